"""Priors per scale in GSS-EP and SS-EP (``scales=``): a spike probability and a slab variance per label, label 0
always on, learned per label or as a profile.

Ground truths: exact enumeration (orthogonal columns, where SS-EP is exact), the dense reference EP of
reference_ep.py with one slab variance per coefficient, finite differences of the re-converged EP evidence, and the
values simulated data were drawn from.
"""

import numpy as np
import pytest
from scipy.special import logit

from adaptcs.models import GroupSpikeSlabEP, SpikeSlabEP, exact_group_spike_slab
from adaptcs.models import _ep_learning as lrn

from reference_ep import reference_ep

ALL = ("p0", "v0", "noise_var")


def scale_problem(rng, n, counts=(2, 8, 16, 32), p0=(1.0, 0.5, 0.25, 0.125), v0=(4.0, 1.0, 0.25, 0.0625),
                  group_size=4, noise_var=0.05):
    """Data drawn from a per-scale group prior: ``counts[s]`` groups of scale s (scale 0 always on), of which
    ``round(p0[s] counts[s])`` (at least one) are active.

    Returns X, y, groups, scales, w, active (per group).
    """
    group_scale = np.repeat(np.arange(len(counts)), counts)
    active = np.zeros(group_scale.shape[0], dtype=bool)
    for s, (count, p) in enumerate(zip(counts, p0, strict=True)):
        members = np.flatnonzero(group_scale == s)
        active[rng.choice(members, max(1, round(p * count)), replace=False)] = True
    groups = np.repeat(np.arange(group_scale.shape[0]), group_size)
    scales = group_scale[groups]
    w = np.where(active[groups], rng.normal(size=groups.shape[0]) * np.sqrt(np.asarray(v0)[scales]), 0.0)
    X = rng.normal(size=(n, groups.shape[0]))
    y = X @ w + rng.normal(0.0, np.sqrt(noise_var), n)
    return X, y, groups, scales, w, active


@pytest.mark.parametrize("seed", range(3))
def test_ss_ep_per_scale_is_exact_for_orthogonal_columns(seed):
    """Orthogonal columns decouple the coefficients: SS-EP with a p0 and a v0 per scale equals exact enumeration
    with one slab variance per coefficient; the always-on label 0 is the enumeration with p0 -> 1."""
    rng = np.random.default_rng(seed)
    n, d, s2 = 14, 8, 0.4
    Q, _ = np.linalg.qr(rng.normal(size=(n, d)))
    X = Q * rng.uniform(0.5, 3.0, d)
    scales = np.array([0, 0, 1, 1, 2, 2, 2, 3])
    p0_scale, v0_scale = np.array([0.5, 0.6, 0.3, 0.2]), np.array([5.0, 2.0, 0.7, 0.2])
    w = rng.normal(size=d) * np.sqrt(v0_scale[scales]) * (rng.random(d) < 0.6)
    y = X @ w + rng.normal(0.0, np.sqrt(s2), n)
    p0_coef = np.where(scales == 0, 1.0 - 1e-15, p0_scale[scales])
    exact = exact_group_spike_slab(X, y, np.arange(d), p0_coef, v0_scale[scales], s2)
    ep = SpikeSlabEP(p0=p0_scale, v0=v0_scale, scales=scales, noise_var=s2, tol=1e-12, max_iter=5000).fit(X, y)
    assert ep.converged_
    np.testing.assert_allclose(ep.coef_, exact.mean, atol=1e-8)
    np.testing.assert_allclose(ep.group_prob_, exact.group_prob, atol=1e-8)
    assert ep.log_evidence_ == pytest.approx(exact.log_evidence, abs=1e-8)
    np.testing.assert_array_equal(ep.group_prob_[scales == 0], 1.0)
    np.testing.assert_array_equal(ep.scale_labels_, [0, 1, 2, 3])
    np.testing.assert_array_equal(ep.p0_, [1.0, *p0_scale[1:]])
    np.testing.assert_array_equal(ep.v0_, v0_scale)


@pytest.mark.parametrize("seed", range(4))
def test_per_scale_fixed_point_equals_dense_reference_ep(seed):
    """Same fixed point as the dense reference EP given one p0 per group and one v0 per coefficient (groups of
    label 0 with p0 = 1), on problems with ambiguous groups and clamped sites."""
    rng = np.random.default_rng(seed)
    noise_var = [1.0, 0.3][seed % 2]
    n = [10, 16, 30, 12][seed]
    groups = rng.permutation(np.repeat(np.arange(5), 3))
    group_scale = np.array([0, 1, 1, 2, 2])
    scales = group_scale[groups]
    p0_scale, v0_scale = np.array([0.5, 0.4, 0.2]), np.array([3.0, 1.0, 0.3])
    X = rng.normal(size=(n, 15))
    w = rng.normal(size=15) * np.sqrt(v0_scale[scales]) * (rng.random(5) < 0.5)[groups]
    y = X @ w + rng.normal(0.0, np.sqrt(noise_var), n)
    v0_coef = v0_scale[scales]
    with np.errstate(divide="ignore"):  # the reference takes log(1 - p0) = -inf for the always-on group
        mean, group_prob, log_evidence = reference_ep(X, y, groups, np.where(group_scale == 0, 1.0,
                                                                             p0_scale[group_scale]),
                                                      v0_coef, noise_var, v_inf=300.0 * v0_coef)
    ep = GroupSpikeSlabEP(groups, p0=p0_scale, v0=v0_scale, scales=scales, noise_var=noise_var, damping=0.5,
                          damping_decay=1.0, tol=1e-11, max_iter=5000).fit(X, y)
    assert ep.converged_
    np.testing.assert_allclose(ep.coef_, mean, atol=1e-9)
    np.testing.assert_allclose(ep.group_prob_, group_prob, atol=1e-9)
    assert ep.log_evidence_ == pytest.approx(log_evidence, abs=1e-8)


def test_profile_and_each_give_the_same_fit_at_the_same_values(rng):
    """Without learning, the two ways of holding per-scale values are the same prior."""
    X, y, groups, scales, _w, _a = scale_problem(rng, 300)
    kwargs = dict(p0=[0.5, 0.5, 0.25, 0.125], v0=[4.0, 1.0, 0.25, 0.0625], scales=scales, noise_var=0.05, tol=1e-10,
                  damping=0.5, damping_decay=1.0)
    each = GroupSpikeSlabEP(groups, **kwargs).fit(X, y)
    profile = GroupSpikeSlabEP(groups, scale_learning="profile", **kwargs).fit(X, y)
    assert each.converged_ and profile.converged_
    np.testing.assert_allclose(profile.coef_, each.coef_, rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(profile.group_prob_, each.group_prob_, atol=1e-9)
    np.testing.assert_allclose(profile.p0_, each.p0_, rtol=1e-12)
    np.testing.assert_allclose(profile.v0_, each.v0_, rtol=1e-12)


def test_one_scale_label_is_the_plain_model(rng):
    """``scales`` with a single detail label is the model without scales."""
    X, y, groups, _scales, _w, _a = scale_problem(rng, 300)
    plain = GroupSpikeSlabEP(groups, p0=0.3, v0=0.5, noise_var=0.05).fit(X, y)
    one = GroupSpikeSlabEP(groups, p0=0.3, v0=0.5, noise_var=0.05, scales=np.ones(len(groups), int)).fit(X, y)
    assert plain.converged_ and one.converged_
    np.testing.assert_allclose(one.coef_, plain.coef_, rtol=1e-9, atol=1e-12)
    assert one.log_evidence_ == pytest.approx(plain.log_evidence_, abs=1e-9)


def _classes_problem(X, y, groups, scales):
    """A tight EPProblem (constant damping) with one prior class per detail scale and one slab class per scale."""
    _labels, coef_group = np.unique(groups, return_inverse=True)
    group_scale = np.zeros(coef_group.max() + 1, dtype=int)
    group_scale[coef_group] = scales
    return lrn.EPProblem(X, y, coef_group, np.zeros(group_scale.shape[0]), group_class=group_scale - 1,
                         coef_slab=scales, v_inf_ratio=300.0, damping=0.5, damping_decay=1.0)


def test_evidence_gradient_per_class_matches_finite_differences():
    """The gradient in (level per class, log v0 per class, log s2) is the total derivative of the re-converged
    EP evidence at a moment-matching fixed point."""
    checked = 0
    for seed in range(8):
        rng = np.random.default_rng(seed)
        X, y, groups, scales, _w, _a = scale_problem(rng, 40, counts=(1, 2, 3), p0=(1.0, 0.5, 0.4),
                                                     v0=(2.0, 1.0, 0.3), group_size=3, noise_var=0.3)
        problem = _classes_problem(X, y, groups, scales)
        hyper = lrn.Hyper([logit(0.5), logit(0.3)], [1.5, 0.8, 0.4], 0.4)
        run = problem.run(hyper, tol=1e-12, max_iter=20000)
        if not run.converged or np.any(run.sites.var >= 0.99 * problem.v_inf_ratio * problem.slab_var(hyper)):
            continue  # clamped sites: the formula is not the total derivative there
        checked += 1
        grad = lrn.evidence_gradient(problem, hyper, run)
        assert grad.shape == (6,)
        h = 1e-5
        for k in range(6):
            values = []
            for sign in (1.0, -1.0):
                phi = hyper.phi()
                phi[k] += sign * h
                moved = lrn.Hyper.from_phi(phi, problem.n_levels)
                values.append(problem.run(moved, run.sites, tol=1e-13, max_iter=20000).log_evidence)
            fd = (values[0] - values[1]) / (2 * h)
            assert grad[k] == pytest.approx(fd, rel=1e-5, abs=1e-6), (k, grad, fd)
        if checked == 3:
            break
    assert checked >= 3


def test_learned_per_scale_values_recover_the_simulating_ones():
    """Type-II ML per scale on data drawn from a per-scale prior (n = 400 > d = 232) recovers every scale's slab
    variance (against the sample second moment of its active coefficients), the fraction of active groups, and
    the noise variance."""
    v0_true = np.array([4.0, 1.0, 0.25, 0.0625])
    ratios, p0_errors, noise = [], [], []
    for seed in range(3):
        rng = np.random.default_rng(100 + seed)
        X, y, groups, scales, w, active = scale_problem(rng, 400, v0=tuple(v0_true), noise_var=0.01)
        est = GroupSpikeSlabEP(groups, scales=scales, learn=ALL).fit(X, y)
        assert est.converged_ and est.learn_converged_
        on = w != 0
        sample_v0 = np.array([np.mean(w[on & (scales == s)] ** 2) for s in range(4)])
        ratios.append(est.v0_ / sample_v0)
        group_scale = scales[::4]
        p0_errors.append([abs(est.p0_[s] - np.mean(active[group_scale == s])) for s in (1, 2, 3)])
        noise.append(est.noise_var_)
    ratios = np.array(ratios)
    assert np.all((ratios > 0.6) & (ratios < 1.6)), ratios
    assert np.max(p0_errors) < 0.15, p0_errors
    assert np.all(np.abs(np.array(noise) / 0.01 - 1.0) < 0.3), noise
    assert np.all(est.p0_[0] == 1.0)


def test_learned_profile_recovers_the_common_multiplier():
    """With the true profile given, learning the common multiplier and level recovers the simulating values."""
    v0_true = np.array([4.0, 1.0, 0.25, 0.0625])
    found = []
    for seed in range(3):
        rng = np.random.default_rng(200 + seed)
        X, y, groups, scales, w, _active = scale_problem(rng, 400, v0=tuple(v0_true), noise_var=0.01)
        # the profile's shape is right, its overall size (x 5) is not: learning finds the multiplier
        est = GroupSpikeSlabEP(groups, scales=scales, scale_learning="profile", v0=5 * v0_true,
                               p0=[0.5, 0.5, 0.25, 0.125], learn=ALL).fit(X, y)
        assert est.converged_
        np.testing.assert_allclose(est.v0_ / est.v0_[0], v0_true / v0_true[0], rtol=1e-12)  # the profile kept
        on = w != 0
        found.append(np.sum(w[on] ** 2 / v0_true[scales[on]]) / np.count_nonzero(on) / (est.v0_[0] / v0_true[0]))
        assert est.noise_var_ == pytest.approx(0.01, rel=0.3)
    assert np.all(np.abs(np.array(found) - 1.0) < 0.3), found


def test_scale_priors_are_equivariant_to_units(rng):
    """Fitting (c X, y) with v0 / c^2 per scale gives the coefficients of (X, y) divided by c (c a power of two,
    so that the internal rescaling is exact and the two fits agree to rounding)."""
    X, y, groups, scales, _w, _a = scale_problem(rng, 300)
    v0 = np.array([4.0, 1.0, 0.25, 0.0625])
    ref = GroupSpikeSlabEP(groups, scales=scales, v0=v0, p0=0.3, noise_var=0.05, learn=ALL).fit(X, y)
    assert ref.converged_
    c = 2.0**20
    scaled = GroupSpikeSlabEP(groups, scales=scales, v0=v0 / c**2, p0=0.3, noise_var=0.05, learn=ALL).fit(c * X, y)
    np.testing.assert_allclose(scaled.coef_ * c, ref.coef_, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(scaled.v0_ * c**2, ref.v0_, rtol=1e-12)
    assert scaled.noise_var_ == pytest.approx(ref.noise_var_, rel=1e-12)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"scales": [0, 0, 1, 2, 2, 2]}, "mixes scales"),
    ({"scales": [0, 0, 1, 1, -1, -1]}, "non-negative"),
    ({"scales": [0.5, 0.5, 1, 1, 2, 2]}, "integer labels"),
    ({"scales": [0, 0, 1, 1]}, "4 labels, X has 6 columns"),
    ({"scales": [0, 0, 1, 1, 2, 2], "p0": [0.5, 0.5]}, "one per scale label"),
    ({"scales": [0, 0, 1, 1, 2, 2], "v0": [1.0, 2.0, -1.0]}, "finite and > 0"),
    ({"v0": [1.0, 2.0]}, "unless scales are given"),
])
def test_bad_scale_priors_are_refused(kwargs, message):
    X = np.random.default_rng(0).normal(size=(5, 6))
    with pytest.raises(ValueError, match=message):
        GroupSpikeSlabEP([0, 0, 1, 1, 2, 2], **kwargs).fit(X, X[:, 0])


# --- measurements that leave coefficients untouched (a subset of a basis) -------------------------------------


def selection_problem(rng, measured_fraction=0.6, noise_var=0.01, scale=8.0):
    """Rows that each measure one coefficient (times ``scale``): 6 groups of 3 coefficients in 3 scales, some
    coefficients never measured. Returns X, y, groups, scales, w, the measured mask."""
    groups = np.repeat(np.arange(6), 3)
    scales = np.repeat([0, 1, 1, 2, 2, 2], 3)
    w = rng.normal(size=18) * np.array([2.0, 1.0, 0.3])[scales] * (rng.random(6) < 0.6)[groups]
    measured = rng.random(18) < measured_fraction
    measured[0] = True
    X = scale * np.eye(18)[measured]
    y = X @ w + rng.normal(0.0, np.sqrt(noise_var), X.shape[0])
    return X, y, groups, scales, w, measured


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("form", ["selection", "woodbury"])
def test_a_subset_of_basis_rows_is_exact(seed, form):
    """Rows that select coefficients decouple the groups, so EP is exact (against enumeration), also for the
    coefficients no row touches: mean 0 and variance P(z_g = 1 | y) v0_g (the limit site). "selection": the
    diagonal posterior; "woodbury": the same rows with the first measured coefficient measured twice (a general
    posterior, the limit sites within it)."""
    rng = np.random.default_rng(seed)
    X, y, groups, scales, _w, measured = selection_problem(rng)
    if form == "woodbury":
        X, y = np.vstack([X, 0.5 * X[:1]]), np.concatenate([y, 0.5 * y[:1] + rng.normal(0.0, 0.1)])
    p0_scale, v0_scale = np.array([0.5, 0.5, 0.3]), np.array([4.0, 1.0, 0.1])
    p0_group = np.where(scales[::3] == 0, 1.0 - 1e-15, p0_scale[scales[::3]])
    exact = exact_group_spike_slab(X, y, groups, p0_group, v0_scale[scales], 0.01)
    ep = GroupSpikeSlabEP(groups, scales=scales, p0=p0_scale, v0=v0_scale, noise_var=0.01, tol=1e-12,
                          max_iter=5000).fit(X, y)
    assert ep.converged_ and np.isfinite(ep.log_evidence_)
    np.testing.assert_allclose(ep.coef_, exact.mean, atol=1e-9)
    np.testing.assert_allclose(ep.coef_var_, exact.var, rtol=1e-7, atol=1e-12)
    np.testing.assert_allclose(ep.group_prob_, exact.group_prob, atol=1e-9)
    assert ep.log_evidence_ == pytest.approx(exact.log_evidence, abs=1e-8)
    unmeasured = ~measured
    np.testing.assert_array_equal(ep.coef_[unmeasured], 0.0)
    np.testing.assert_allclose(ep.coef_var_[unmeasured], (ep.group_prob_[groups] * v0_scale[scales])[unmeasured],
                               rtol=1e-8)


def test_learning_works_from_a_subset_of_basis_rows():
    """Learning every hyper-parameter from rows that leave most coefficients unmeasured (it failed at every point
    of the coarse search before the limit site): the fit converges and the noise variance is found."""
    rng = np.random.default_rng(3)
    counts = (4, 16, 64, 256)
    X, y, groups, scales, w, _active = scale_problem(rng, 10, counts=counts, p0=(1.0, 0.6, 0.3, 0.1),
                                                     v0=(4.0, 1.0, 0.25, 0.0625), noise_var=0.01)
    d = groups.shape[0]
    order = np.argsort(scales, kind="stable")  # the top-down scan: coarse scales first
    X = np.eye(d)[order[:d // 4]]
    y = X @ w + rng.normal(0.0, 0.1, X.shape[0])
    est = GroupSpikeSlabEP(groups, scales=scales, learn=ALL).fit(X, y)
    assert est.converged_ and np.isfinite(est.log_evidence_)
    assert est.noise_var_ == pytest.approx(0.01, rel=0.5)
    unmeasured = np.ones(d, dtype=bool)
    unmeasured[order[:d // 4]] = False
    assert np.all(est.coef_[unmeasured] == 0.0)


@pytest.mark.parametrize("learn", [(), ("p0", "v0", "noise_var")])
def test_an_all_zero_column_among_random_rows_gets_the_limit_site(learn):
    """A coefficient no row touches, among random rows: EP converges and the coefficient's posterior is exactly
    its prior given its group's state (mean 0, variance P(z_g = 1 | y) v0), for GSS-EP and SS-EP, given or learned
    hyper-parameters."""
    rng = np.random.default_rng(3)
    groups = np.repeat(np.arange(16), 4)
    w = np.where(np.isin(groups, [2, 9]), rng.normal(size=64), 0.0)
    X = rng.normal(size=(30, 64))
    X[:, [5, 41]] = 0.0  # group 1 and group 10 keep three touched coefficients each
    X[:, 40:44] = 0.0  # group 10 is touched by no row at all
    y = X @ w + 0.1 * rng.normal(size=30)
    given = {} if learn else {"p0": 0.2, "v0": 1.0, "noise_var": 0.01}
    for est in (GroupSpikeSlabEP(groups, learn=learn, **given), SpikeSlabEP(learn=learn, **given)):
        est.fit(X, y)
        assert est.converged_
        prob = est.group_prob_ if isinstance(est, SpikeSlabEP) else est.group_prob_[groups]  # per coefficient
        for j in (5, 40, 41, 42, 43):
            assert est.coef_[j] == pytest.approx(0.0, abs=1e-12)
            # to EP's tolerance on probabilities (1e-4): the log-odds of a group surely off may still drift
            assert est.coef_var_[j] == pytest.approx(prob[j] * est.v0_, abs=1e-3 * est.v0_)
        assert np.linalg.norm(est.coef_ - w) < 0.1 * np.linalg.norm(w)
