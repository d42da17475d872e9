"""The method registry: estimators from the prior knowledge, parameters checked without data."""

import warnings
from dataclasses import replace

import numpy as np
import pytest

from adaptcs.bases.images import make_basis
from adaptcs.bases.separable import SeparableWavelet, to_kspace
from adaptcs.experiments import check_n_steps, run_synthetic_job
from adaptcs.models.gibbs import PAPER_BURN_IN, PAPER_N_SAMPLES
from adaptcs.models.registry import METHODS, PER_PROBLEM, PriorInfo, make_estimator
from adaptcs.mri.coils import simulated_sensitivities

PRIOR = PriorInfo(p0_group=0.1, p0_coef=0.05, v0=0.5, noise_var=0.2)


@pytest.mark.parametrize("method", list(METHODS))
def test_every_method_checks_its_parameters_without_data(method):
    spec = METHODS[method]
    spec.check_params({})
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['tolerance'\]"):
        spec.check_params({"tolerance": 1e-5})
    with pytest.raises(ValueError, match="unknown parameter"):
        spec.check_params({"groups": [0, 1]})  # the labels come with the data, never from method_params
    if "warm_start" in spec.parameter_names():  # every method but VG, which always runs its whole gamma path
        with pytest.raises(ValueError, match=r"'warm_start' parameter of \w+ must be an instance of 'bool'"):
            spec.check_params({"warm_start": "yes"})
    count = "max_iter" if "max_iter" in spec.parameter_names() else "n_samples"
    if count not in spec.parameter_names():  # a closed-form fit (lines_phase) has no iteration count to refuse
        assert spec.lines_only
        return
    message = rf"'{count}' parameter of \w+ must be an int in the range \[1, inf\)\. Got -1"
    with pytest.raises(ValueError, match=message):
        spec.check_params({count: -1})


@pytest.mark.parametrize("method", list(METHODS))
def test_what_the_check_refuses_fit_refuses_too(method, rng):
    """The data-free check is the one fit uses: a value it refuses makes fit fail the same way."""
    count = "max_iter" if "max_iter" in METHODS[method].parameter_names() else "n_samples"
    if count not in METHODS[method].parameter_names():  # closed form: the check refuses a negative noise variance
        count = "noise_var"
    groups, prior, X = problem_for(method, rng)
    if count == "noise_var":
        estimator = make_estimator(method, groups, prior)
        estimator.noise_var = -1.0
        with pytest.raises(ValueError, match=r"'noise_var' parameter of \w+ must be a float in the range \(0.0, inf\)"):
            estimator.fit(X[[7, 8]], [7, 8])
        with pytest.raises(ValueError, match=r"noise_var"):
            METHODS[method].check_params({"noise_var": -1.0})
        return
    estimator = make_estimator(method, groups, prior, **{count: 0})
    with pytest.raises(ValueError, match=rf"'{count}' parameter of \w+ must be an int in the range \[1, inf\)\. Got 0"):
        if METHODS[method].lines_only:  # X is the k-space, rows of it are lines
            estimator.fit(X[[7, 8]], [7, 8])
        else:
            estimator.fit(X, rng.normal(size=5))


@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("case", ["zero rows", "huge values", "huge rows"])
def test_every_method_refuses_data_no_fit_can_use_in_one_message(method, case, rng):
    """Issue 46, point 10: all-zero X (a ZeroDivisionError in learned GSS-EP, SS-EP and FLAS) is one ValueError
    naming the estimator; data in extreme units (y x 1e300: G-LASSO's OverflowError; X x 1e200) either fit to a
    finite estimate (the methods that rescale to unit size) or are one ValueError, never another exception."""
    groups, prior, X = problem_for(method, rng)
    if METHODS[method].lines_only:  # lines have no rows to be zero or huge: their values in extreme units
        lines_fit_extreme_values(method, groups, prior, X, 1e-150 if case == "zero rows" else 1e150)
        return
    y = rng.normal(size=X.shape[0])
    X, y = {"zero rows": (0.0 * X, y), "huge values": (X, 1e300 * y), "huge rows": (1e200 * X, y)}[case]
    for hyperparameters in ("oracle", "learned"):
        if hyperparameters == "learned" and not isinstance(METHODS[method].learned, dict):
            continue
        estimator = make_estimator(method, groups, prior, hyperparameters=hyperparameters)
        if case == "zero rows":
            with pytest.raises(ValueError, match="every entry of X is zero"):
                estimator.fit(X, y)
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                estimator.fit(X, y)
        except ValueError as exc:
            assert "\n" not in str(exc)
        else:
            assert np.all(np.isfinite(estimator.coef_))


def lines_fit_extreme_values(method, groups, prior, kspace, scale):
    """A line model fits k-space in extreme units (noise variance scale^2 of 1e300 or 1e-300) to a finite image, or
    refuses it in one ValueError."""
    lines = [6, 7, 8, 9]
    short = {"max_iter": 30} if "max_iter" in METHODS[method].parameter_names() else {}  # finite, not converged
    # a line model learns what it learns either way: its "learned" estimator is its "oracle" one (learned={})
    for hyperparameters in ("oracle", "learned") if METHODS[method].learned else ("oracle",):
        estimator = make_estimator(method, groups, replace(prior, noise_var=prior.noise_var * scale**2),
                                   hyperparameters=hyperparameters, **short)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fit = estimator.fit(scale * kspace[lines], lines)
        except ValueError as exc:
            assert "\n" not in str(exc)
        else:
            assert np.all(np.isfinite(fit.image_))


def problem_for(method: str, rng):
    """Groups, prior knowledge and 5 rows of 8 coefficients; for a method that fits only basis scans, 5 rows that
    select coefficients of a 4 x 4 Haar basis (16 coefficients); for a line model, a 16 x 16 k-space (its rows are
    the lines; for the coil line model, every coil's) in place of the rows."""
    if METHODS[method].coils:  # a receive array of 3 coils: every coil's lines, line first (16, coils, 16)
        basis = SeparableWavelet((16, 16), "haar", 2)
        maps = simulated_sensitivities(3, (16, 16))
        image = basis.inverse(rng.normal(size=(16, 16)))
        kspace = np.stack([to_kspace(m * image) for m in maps], axis=1) + 0.1 * rng.normal(size=(16, 3, 16))
        return np.zeros(256, dtype=np.int64), replace(PRIOR, basis=basis, noise_var=0.01, sensitivities=maps), kspace
    if METHODS[method].lines_only:
        basis = SeparableWavelet((16, 16), "haar", 2)
        kspace = to_kspace(basis.inverse(rng.normal(size=(16, 16)))) + 0.1 * rng.normal(size=(16, 16))
        return np.zeros(256, dtype=np.int64), replace(PRIOR, basis=basis, noise_var=0.01), kspace
    if METHODS[method].scans_only:
        basis = make_basis("haar", 4)
        return basis.groups(), replace(PRIOR, scales=basis.scales(), basis=basis), np.eye(16)[[0, 1, 5, 7, 9]]
    return np.arange(8) // 2, PRIOR, rng.normal(size=(5, 8))


def test_effective_parameters_say_where_each_value_comes_from():
    gss = METHODS["gss_ep"].effective_params({"tol": 1e-6})
    assert gss["tol"] == 1e-6 and gss["max_iter"] == 1000
    assert gss["p0"] == gss["v0"] == gss["noise_var"] == PER_PROBLEM
    assert METHODS["g_lasso"].effective_params({})["k"] == 8.0
    gibbs = METHODS["gss_mcmc"].effective_params({})
    assert (gibbs["n_samples"], gibbs["burn_in"]) == (PAPER_N_SAMPLES, PAPER_BURN_IN) == (10_000, 1_000)
    assert METHODS["g_hs"].effective_params({"tau": 0.3})["tau"] == 0.3


def test_design_steps_are_bounded_by_the_signal_length():
    assert check_n_steps("E3", None) == 32 and check_n_steps("E5", None) == 160
    assert check_n_steps("E3", 480) == 480
    with pytest.raises(ValueError, match="at most 480 in E3"):
        check_n_steps("E3", 481)
    with pytest.raises(ValueError, match="non-negative integer"):
        check_n_steps("E3", -1)
    with pytest.raises(ValueError, match="at most 480 in E3"):
        run_synthetic_job("E3", 0, "gss_ep", "design", [0], n_steps=500)


@pytest.mark.parametrize("method", list(METHODS))
def test_the_metadata_of_every_method_matches_its_estimator(method):
    """Whether a method designs rows is what its estimator can do (a posterior covariance), and every method has
    a colour of its own (figures and tables take both from the registry)."""
    from matplotlib.colors import is_color_like

    from adaptcs.design import has_posterior_covariance

    entry = METHODS[method]
    groups, prior, X = problem_for(method, np.random.default_rng(0))
    estimator = make_estimator(method, groups, prior)
    if entry.lines_only:  # designed lines: the exact information gain of every line
        estimator.fit(X[[7, 8]], [7, 8])
        assert entry.designs_rows and estimator.line_gains().shape == (16,)
    elif entry.scans_only:  # a scan's designed rows are the coefficients of largest marginal posterior variance
        assert entry.designs_rows == hasattr(estimator.fit(X, np.ones(5)), "coef_var_")
    else:
        assert entry.designs_rows == has_posterior_covariance(estimator)
    assert is_color_like(entry.color)
    assert [m.color for m in METHODS.values()].count(entry.color) == 1


def test_sampler_labels_say_their_sweeps():
    assert METHODS["gss_mcmc"].label_note({"n_samples": 2000, "burn_in": 500}) == "2,500 sweeps"
    assert METHODS["gss_mcmc"].label_note({}) == METHODS["gss_ep"].label_note({"n_samples": 5}) == ""
