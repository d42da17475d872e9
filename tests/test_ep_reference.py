"""GSS-EP and SS-EP without hyper-parameter learning give the same numbers as before the learning code existed.

``tests/data/ep_reference.npz`` holds the outputs of commit 928bebc (the last one before learning was added)
on E1 replicates 0 and 1 (GSS-EP and SS-EP), a problem with more rows than coefficients (the direct form) and
a warm-started refit with group-specific p0. Iteration counts and flags must agree exactly; the arrays to
1e-9 of their largest entry (the fixed-point residual, a difference, to 1e-6), which tolerates BLAS kernels that
round differently on another CPU (seen: 2e-11) but no change of algorithm.

One change is on purpose: the warm refit's first fit (40 rows) ended short of a fixed point then (the damping
ran out, residual 0.37) and now goes on with the variance-decoupled fallback to one; the refit then starts from
other sites, so it is compared as a converged fit of the same problem, to EP's tolerance.
"""

import warnings
from pathlib import Path

import numpy as np

from adaptcs.experiments import synthetic_case
from adaptcs.models import GroupSpikeSlabEP, SpikeSlabEP

REFERENCE = np.load(Path(__file__).parent / "data" / "ep_reference.npz")


def _fits():
    for r in (0, 1):
        p = synthetic_case("E1", 0, r).problem
        yield f"e1_{r}_gss", GroupSpikeSlabEP(p.groups, p0=4 / 128, v0=1 / 3, noise_var=1.0).fit(p.X, p.y)
        yield f"e1_{r}_ss", SpikeSlabEP(p0=16 / 512, v0=1 / 3, noise_var=1.0).fit(p.X, p.y)
    rng = np.random.default_rng(5)
    X = rng.normal(size=(40, 24))
    w = np.where(np.arange(24) // 4 < 2, rng.normal(size=24), 0.0)
    y = X @ w + rng.normal(0, 0.3, 40)
    yield "direct_gss", GroupSpikeSlabEP(np.arange(24) // 4, p0=0.3, v0=1.0, noise_var=0.09).fit(X, y)
    p = synthetic_case("E1", 0, 2).problem
    est = GroupSpikeSlabEP(p.groups, p0=np.linspace(0.01, 0.1, 128), v0=1 / 3, noise_var=1.0, warm_start=True)
    est.fit(p.X[:40], p.y[:40])
    yield "warm_gss", est.fit(p.X, p.y)


def test_fits_are_those_of_the_reference_commit():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # some of these fits end by the damping, as they did then
        fits = dict(_fits())
    assert len(fits) == 6
    for name, est in fits.items():
        if name == "warm_gss":
            continue  # below: its first fit changed on purpose
        assert est.n_iter_ == REFERENCE[f"{name}.n_iter_"], name
        assert est.converged_ == REFERENCE[f"{name}.converged_"], name
        # the fixed-point residual is a difference of nearly equal states: rounding is relatively larger there
        for attr, tol in (("coef_", 1e-9), ("coef_var_", 1e-9), ("group_prob_", 1e-9), ("log_evidence_", 1e-9),
                          ("fixed_point_residual_", 1e-6)):
            _assert_close(getattr(est, attr), REFERENCE[f"{name}.{attr}"], tol, f"{name}.{attr}")
        for part in ("var", "mean", "logit"):
            _assert_close(getattr(est.sites_, part), REFERENCE[f"{name}.sites_{part}"], 1e-9, f"{name}.sites_{part}")


def test_the_warm_refit_reaches_the_reference_fixed_point_from_a_converged_start():
    p = synthetic_case("E1", 0, 2).problem
    est = GroupSpikeSlabEP(p.groups, p0=np.linspace(0.01, 0.1, 128), v0=1 / 3, noise_var=1.0, warm_start=True)
    est.fit(p.X[:40], p.y[:40])
    assert est.converged_ and est.fixed_point_residual_ < 1e-3  # the reference commit's: False, 0.37
    est.fit(p.X, p.y)
    assert est.converged_ and REFERENCE["warm_gss.converged_"]
    _assert_close(est.coef_, REFERENCE["warm_gss.coef_"], 1e-3, "coef_")
    np.testing.assert_allclose(est.group_prob_, REFERENCE["warm_gss.group_prob_"], atol=1e-3)


def _assert_close(actual, expected, tol, what):
    """Equal to ``tol`` of the array's largest finite entry (rounding is relative to the numbers it is computed
    from, so a coefficient of 1e-7 next to ones of 1 is only known to about 1e-16 absolutely); same infinities."""
    expected = np.asarray(expected, dtype=float)
    finite = np.isfinite(expected)
    scale = np.max(np.abs(expected[finite]), initial=0.0)
    np.testing.assert_allclose(actual, expected, rtol=0, atol=tol * scale, err_msg=what)
