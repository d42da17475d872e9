"""The ask/tell designer and +-1 design rows, against dense linear algebra and exhaustive search."""

import itertools
import warnings

import numpy as np
import pytest
from sklearn.linear_model import Ridge

from adaptcs.design import FitFailedWarning, SequentialDesigner, binary_rows
from adaptcs.design.designer import NO_MEASUREMENTS, RANDOM_START, Asked, Told
from adaptcs.models import GroupSpikeSlabEP, SpikeSlabEP

from conftest import random_group_problem


@pytest.fixture
def problem(rng):
    X, y, groups, w = random_group_problem(rng, n=10, n_groups=8, group_size=4, noise_var=0.1, p0=0.25)
    return X, y, groups, w


def dense_covariance(est, X):
    """GSS-EP's posterior covariance (X^T X / s2 + diag(1 / site variances))^-1, by a dense inverse."""
    return np.linalg.inv(X.T @ X / est.noise_var_ + np.diag(1.0 / est.sites_.var))


def test_first_rows_are_random_before_any_measurement(problem):
    _, _, groups, _ = problem
    designer = SequentialDesigner(GroupSpikeSlabEP(groups, p0=0.25, v0=1.0, noise_var=0.1), batch_size=3, rng=0)
    rows = designer.ask()
    assert rows.shape == (3, 32)
    np.testing.assert_allclose(np.linalg.norm(rows, axis=1), np.sqrt(32))
    assert designer.history_[-1].chosen_by == NO_MEASUREMENTS
    binary = SequentialDesigner(GroupSpikeSlabEP(groups, p0=0.25, v0=1.0, noise_var=0.1), row_constraint="binary",
                                row_norm=8.0,
                                rng=0).ask()
    np.testing.assert_array_equal(np.abs(binary), np.full((1, 32), 8.0 / np.sqrt(32)))


def test_design_and_pool_start_with_random_rows_until_d_over_16_are_told(problem):
    X, y, groups, _ = problem  # d = 32: "auto" asks for 2 random rows first
    est = GroupSpikeSlabEP(groups, p0=0.25, v0=1.0, noise_var=0.1)
    designer = SequentialDesigner(est, rng=0)
    designer.tell(X[:1], y[:1])
    designer.ask()
    assert designer.history_[-1].chosen_by == RANDOM_START
    designer.tell(X[1:2], y[1:2])
    designer.ask()
    assert designer.history_[-1].chosen_by == "design"
    pool = X[2:]
    pooled = SequentialDesigner(est, strategy="pool", pool=pool, rng=0, n_random_start=5).tell(X[:4], y[:4])
    row = pooled.ask()
    assert pooled.history_[-1].chosen_by == RANDOM_START and any(np.array_equal(row[0], p) for p in pool)
    at_once = SequentialDesigner(est, rng=0, n_random_start=0).tell(X[:1], y[:1])
    at_once.ask()
    assert at_once.history_[-1].chosen_by == "design"
    with pytest.raises(ValueError, match="n_random_start"):
        SequentialDesigner(est, n_random_start=-1)


def test_asking_before_the_size_is_known_is_a_clear_error():
    with pytest.raises(ValueError, match="number of coefficients is not known yet"):
        SequentialDesigner(SpikeSlabEP(p0=0.1, v0=1.0, noise_var=0.1)).ask()


def test_designed_rows_are_the_top_eigenvectors_of_the_dense_posterior_covariance(problem):
    X, y, groups, _ = problem
    designer = SequentialDesigner(GroupSpikeSlabEP(groups, p0=0.25, v0=1.0, noise_var=0.1), batch_size=2,
                                  row_norm=3.0, rng=1)
    rows = designer.tell(X, y).ask()
    V = dense_covariance(designer.estimator_, X)
    values, vectors = np.linalg.eigh(V)
    cosines = np.linalg.svd(vectors[:, -2:].T @ (rows.T / 3.0), compute_uv=False)
    # direction tolerance DESIGN_EIGEN_TOL = 1e-3 (what a row needs); the scores converge quadratically
    assert cosines.min() > 1 - 1e-5
    asked = designer.history_[-1]
    np.testing.assert_allclose(asked.scores, 9.0 * values[::-1][:2], rtol=1e-5)
    assert asked.bound == pytest.approx(9.0 * values[-1], rel=1e-6)


def test_tell_keeps_every_measurement_and_knows_which_rows_were_asked(problem):
    X, y, groups, w = problem
    designer = SequentialDesigner(GroupSpikeSlabEP(groups, p0=0.25, v0=1.0, noise_var=0.1), batch_size=2, rng=2)
    designer.tell(X[:6], y[:6])
    rows = designer.ask()
    extra = X[6:8]  # measured although nobody asked for them
    designer.tell(np.vstack([extra[:1], rows[::-1], extra[1:]]), np.r_[y[6], rows[::-1] @ w, y[7]])
    told = designer.history_[-1]
    assert isinstance(told, Told) and isinstance(designer.history_[-2], Asked)
    np.testing.assert_array_equal(told.asked, [False, True, True, False])
    assert designer.X_.shape == (10, 32) and designer.n_told_ == told.n_told == 10
    np.testing.assert_array_equal(designer.y_[:6], y[:6])
    designer.tell(rows[0], rows[0] @ w)  # a single row as a vector; asked rows match only once
    assert designer.history_[-1].asked.tolist() == [False]
    # the refit is the fit on everything told (warm started; the same fixed point to EP's tolerance)
    cold = GroupSpikeSlabEP(groups, p0=0.25, v0=1.0, noise_var=0.1).fit(designer.X_, designer.y_)
    np.testing.assert_allclose(designer.estimator_.coef_, cold.coef_, atol=1e-3)


@pytest.mark.parametrize("X_new, y_new, match", [
    (np.ones((2, 31)), np.ones(2), "rows must have 32 entries"),
    (np.ones((2, 32)), np.ones(3), "inconsistent|rows|samples"),
    (np.full((2, 32), np.nan), np.ones(2), "NaN|finite"),
    (np.ones((2, 32)), np.array([1.0, np.inf]), "NaN|finite|infinity"),
])
def test_bad_measurements_change_nothing(problem, X_new, y_new, match):
    X, y, groups, _ = problem
    designer = SequentialDesigner(GroupSpikeSlabEP(groups, p0=0.25, v0=1.0, noise_var=0.1), rng=3).tell(X, y)
    before = (designer.X_.copy(), designer.y_.copy(), len(designer.history_), designer.estimator_.coef_.copy())
    with pytest.raises(ValueError, match=match):
        designer.tell(X_new, y_new)
    np.testing.assert_array_equal(designer.X_, before[0])
    np.testing.assert_array_equal(designer.y_, before[1])
    assert len(designer.history_) == before[2]
    np.testing.assert_array_equal(designer.estimator_.coef_, before[3])


def test_a_failed_refit_keeps_the_data_and_stops_asking(problem):
    X, y, _, _ = problem

    class FailsOnSecondFit(Ridge):
        def fit(self, X, y):
            if X.shape[0] > 10:
                raise np.linalg.LinAlgError("singular")
            return super().fit(X, y)

    designer = SequentialDesigner(FailsOnSecondFit(), strategy="random", rng=4).tell(X, y)
    with pytest.warns(FitFailedWarning, match="the fit on 11 rows failed"):
        designer.tell(X[0], y[0])
    assert designer.n_told_ == 11 and "LinAlgError" in designer.failure_
    with pytest.raises(RuntimeError, match="last fit failed"):
        designer.ask()


def test_pool_rows_are_spent_when_measured_not_when_asked(problem):
    X, y, groups, w = problem
    pool = np.random.default_rng(5).normal(size=(6, 32))
    designer = SequentialDesigner(GroupSpikeSlabEP(groups, p0=0.25, v0=1.0, noise_var=0.1), strategy="pool", pool=pool,
                                  batch_size=2, rng=5).tell(X, y)
    first = designer.ask()
    np.testing.assert_array_equal(designer.ask(), first)  # nothing measured: the same advice
    designer.tell(first, first @ w)
    second = designer.ask()
    assert not any((second[i] == first[j]).all() for i in range(2) for j in range(2))
    with pytest.raises(ValueError, match="pool rows are used as given"):
        SequentialDesigner(GroupSpikeSlabEP(groups), strategy="pool", pool=pool, row_constraint="binary")


@pytest.mark.parametrize("kwargs, match", [
    ({"strategy": "best"}, "strategy must be one of"),
    ({"row_constraint": "ternary"}, "row_constraint must be one of"),
    ({"strategy": "pool"}, "pool must be given"),
    ({"pool": np.ones((3, 32))}, "only used by strategies"),
    ({"batch_size": 0}, "batch_size"),
    ({"row_norm": 0.0}, "row_norm"),
])
def test_bad_designer_arguments(problem, kwargs, match):
    with pytest.raises(ValueError, match=match):
        SequentialDesigner(GroupSpikeSlabEP(problem[2]), **kwargs)


def test_designer_leaves_the_callers_estimator_alone(problem):
    X, y, groups, _ = problem
    est = GroupSpikeSlabEP(groups, p0=0.25, v0=1.0, noise_var=0.1)
    designer = SequentialDesigner(est, rng=6).tell(X, y)
    assert not hasattr(est, "coef_") and est.warm_start is False and designer.estimator_.warm_start is True


# ---- +-1 rows ----------------------------------------------------------------------------------------------

@pytest.fixture
def small_covariance(rng):
    """A GSS-EP posterior covariance on 12 coefficients (exhaustive search over 2^12 sign rows is cheap)."""
    X, y, groups, _ = random_group_problem(rng, n=4, n_groups=3, group_size=4, noise_var=0.05, p0=0.4)
    est = GroupSpikeSlabEP(groups, p0=0.4, v0=1.0, noise_var=0.05).fit(X, y)
    return dense_covariance(est, X), est.noise_var_


def all_sign_rows(d):
    return np.array(list(itertools.product([-1.0, 1.0], repeat=d)))


@pytest.mark.parametrize("seed", range(4))
def test_binary_rows_reach_the_exhaustive_optimum(small_covariance, seed):
    V, _ = small_covariance
    d = V.shape[0]
    chosen = binary_rows(lambda B: V @ B, np.diag(V), 1, 0.05, rng=np.random.default_rng(seed))
    x = chosen.rows[0]
    assert set(np.unique(x)) <= {-1.0, 1.0}
    assert chosen.scores[0] == pytest.approx(x @ V @ x, rel=1e-10)
    cube = all_sign_rows(d)
    scores = np.einsum("ij,jk,ik->i", cube, V, cube)
    # a heuristic over the cube: at least 98 % of the exact maximum here (its roundings and flips find the top
    # basin of these small problems), never above it, and below the continuous bound lambda_max d
    assert 0.98 * scores.max() <= chosen.scores[0] <= scores.max() * (1 + 1e-12)
    assert chosen.bounds[0] == pytest.approx(np.linalg.eigvalsh(V)[-1] * d, rel=1e-3)
    # a local optimum: no single flip improves it
    flipped = x * (1 - 2 * np.eye(d))
    assert np.einsum("ij,jk,ik->i", flipped, V, flipped).max() <= chosen.scores[0] * (1 + 1e-12)


def test_a_binary_batch_conditions_each_row_on_the_earlier_ones(small_covariance):
    V, noise_var = small_covariance
    chosen = binary_rows(lambda B: V @ B, np.diag(V), 2, noise_var, rng=np.random.default_rng(0))
    x1, x2 = chosen.rows
    V1 = V - np.outer(V @ x1, V @ x1) / (noise_var + x1 @ V @ x1)  # the covariance after measuring x1
    assert chosen.scores[1] == pytest.approx(x2 @ V1 @ x2, rel=1e-9)
    assert not np.array_equal(x1, x2) and not np.array_equal(x1, -x2)
    cube = all_sign_rows(V.shape[0])
    assert chosen.scores[1] >= 0.98 * np.einsum("ij,jk,ik->i", cube, V1, cube).max()


def test_binary_designed_rows_beat_random_sign_rows(problem):
    X, y, groups, _ = problem
    designer = SequentialDesigner(GroupSpikeSlabEP(groups, p0=0.25, v0=1.0, noise_var=0.1), row_constraint="binary",
                                  row_norm=np.sqrt(32), rng=7).tell(X, y)
    x = designer.ask()[0]
    np.testing.assert_array_equal(np.abs(x), 1.0)
    V = dense_covariance(designer.estimator_, X)
    R = 2.0 * np.random.default_rng(8).integers(0, 2, size=(200, 32)) - 1.0
    assert x @ V @ x > np.einsum("ij,jk,ik->i", R, V, R).max()


def test_the_docstring_example_runs():
    import doctest
    import warnings

    import adaptcs.design.designer as module

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the example's early refits on few rows may stop before converging
        result = doctest.testmod(module)
    assert result.attempted >= 5 and result.failed == 0


def test_a_fit_that_does_not_converge_warns_once_and_a_loop_sums_up_at_its_end():
    from sklearn.exceptions import ConvergenceWarning

    from adaptcs.design import run_sequential_design

    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(16), 4)
    w = np.where(np.isin(groups, [2, 9]), rng.normal(size=64), 0.0)
    X = rng.normal(size=(12, 64))
    stubborn = GroupSpikeSlabEP(groups, p0=0.2, v0=1.0, noise_var=0.01, max_iter=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stubborn.fit(X, X @ w)
    messages = [str(c.message) for c in caught if issubclass(c.category, ConvergenceWarning)]
    assert len(messages) == 1 and "max_iter=2" in messages[0] and "To converge: give the hyper-parameters" in \
        messages[0]
    # a loop of five refits, none converged: one warning, the summary at the end
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = run_sequential_design(stubborn, w, X, X @ w, 5, strategy="random", noise_var=1e-4, row_norm=8.0,
                                       rng=1, settle_reported=False)
    messages = [str(c.message) for c in caught if issubclass(c.category, ConvergenceWarning)]
    assert np.all(result.converged == 0)
    assert len(messages) == 1 and "6 of 6 refits did not converge (between 12 and 17 rows" in messages[0]
    # how far each refit stopped from a fixed point is recorded, and summarised
    assert np.all(np.isfinite(result.residual)) and np.all(result.residual > 10 * stubborn.tol)
    assert f"residual {np.median(result.residual):.2g} in the median, at most {np.max(result.residual):.2g})" \
        in messages[0]
    assert len(messages[0]) < 300  # a warning of two lines; the details are in history_ and docs/model.md
    # asked and told by hand: the first refit that is not converged warns, the others are counted
    designer = SequentialDesigner(stubborn, strategy="random", rng=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        designer.tell(X, X @ w)
        for _ in range(3):
            rows = designer.ask()
            designer.tell(rows, rows @ w)
    assert sum(issubclass(c.category, ConvergenceWarning) for c in caught) == 1
    assert designer.not_converged_summary().startswith("4 of 4 refits did not converge")
    assert designer.last_fit.residual == designer.estimator_.fixed_point_residual_


def test_methods_without_a_fixed_point_residual_record_nan():
    """A method that reports no ``fixed_point_residual_`` (group ARD) gets NaN, not a made-up number."""
    from adaptcs.design import run_sequential_design
    from adaptcs.models import GroupARD

    rng = np.random.default_rng(3)
    groups = np.repeat(np.arange(8), 4)
    w = np.where(np.isin(groups, [1, 5]), rng.normal(size=32), 0.0)
    X = rng.normal(size=(10, 32))
    result = run_sequential_design(GroupARD(groups, noise_var=0.01), w, X, X @ w + 0.1 * rng.normal(size=10), 2,
                                   strategy="random", noise_var=0.01, row_norm=5.0, rng=0)
    assert result.residual.shape == result.converged.shape and np.all(np.isnan(result.residual))


def test_a_fit_that_is_read_is_taken_on_to_the_fixed_point():
    """E3's signal 1 on its 32 first rows (the paper's values): EP with the paper's decaying schedule stops short
    of the fixed point; ``converge`` reaches it, and so does a fit from scratch (which goes on by itself), at the
    fixed point an independent long run with a small constant damping finds."""
    from adaptcs.experiments.synthetic import synthetic_case
    from adaptcs.models._ep import EPSites
    from adaptcs.models._ep_learning import WarmStart

    case = synthetic_case("E3", 0, 1)
    X, y = case.problem.X, case.problem.y
    given = {"p0": 4 / 128, "v0": 1 / 3, "noise_var": 1.0}
    prior_sites = WarmStart(EPSites.initial(np.full(512, 4 / 128), np.full(512, 1 / 3)))
    est = GroupSpikeSlabEP(case.fit_groups, warm_start=True, warm_schedule="decay", fallback=False, **given)
    est.warm_state_ = prior_sites
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y)  # a warm refit from the prior's sites: the paper's run, not taken on
        assert not est.converged_ and est.fixed_point_residual_ > 1e-3
        est.set_params(warm_start=False)
        est.converge(X, y)
    assert est.converged_ and est.fixed_point_residual_ < 1e-3
    assert not est.warm_start  # restored
    slow = GroupSpikeSlabEP(case.fit_groups, damping=0.3, damping_decay=1.0, max_iter=3000, **given).fit(X, y)
    cold = GroupSpikeSlabEP(case.fit_groups, **given).fit(X, y)
    # the same warm refit with the variance-decoupled fallback (the default) ends at the fixed point by itself
    fallback = GroupSpikeSlabEP(case.fit_groups, warm_start=True, warm_schedule="decay", **given)
    fallback.warm_state_ = prior_sites
    fallback.fit(X, y)
    assert slow.converged_ and cold.converged_ and fallback.converged_
    scale = np.max(np.abs(slow.coef_))
    for fit in (est, cold, fallback):
        np.testing.assert_allclose(fit.coef_, slow.coef_, atol=3e-3 * scale)
        np.testing.assert_allclose(fit.group_prob_, slow.group_prob_, atol=3e-3)


def test_the_designer_converges_the_fits_that_are_read():
    from adaptcs.design import run_sequential_design
    from adaptcs.experiments.synthetic import synthetic_case

    case = synthetic_case("E3", 0, 1)
    p = case.problem
    # the parallel schedule alone, so that some warm refits stop short (the fallback takes them on by itself)
    est = GroupSpikeSlabEP(case.fit_groups, p0=4 / 128, v0=1 / 3, noise_var=1.0, fallback=False)
    rng = np.random.default_rng(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        designer = SequentialDesigner(est, rng=0, n_random_start=0)
        designer.tell(p.X, p.y)
        for _ in range(32):  # designed rows until a warm refit stops short (about one in six does on E3)
            row = designer.ask()
            designer.tell(row, row @ p.w_true + rng.normal())
            if designer.last_fit.converged == 0:
                break
        told = designer.last_fit
        assert told.converged == 0 and told.settle_seconds == 0.0 and told.warning
        seconds = told.fit_seconds
        assert designer.converge() is told
        assert told.converged == 1 and told.residual < 1e-3 and told.settle_seconds > 0.0 and told.warning == ""
        assert told.fit_seconds == pytest.approx(seconds + told.settle_seconds)
        assert designer.estimator_.converged_
        kept = dict(vars(told))
        designer.converge()  # converged: left alone
        assert vars(designer.last_fit) == kept
        common = {"strategy": "design", "noise_var": 1.0, "row_norm": np.sqrt(512), "rng": 3}
        settled = run_sequential_design(est, p.w_true, p.X, p.y, 3, **common)
    assert settled.converged[0] == 1 and settled.converged[-1] == 1


def test_a_pattern_operator_is_a_pool():
    """An operator's patterns (here Walsh-Hadamard, fitted in a Haar basis) are the pool: the same rows asked as
    with the patterns given as an array, each pattern at most once, the one of largest x^T V x first."""
    from adaptcs.bases.images import make_basis
    from adaptcs.operators import HadamardPatterns, MeasurementOperator

    basis = make_basis("haar", 8)
    op = HadamardPatterns(8, basis)
    image = np.random.default_rng(0).random(64)
    est = GroupSpikeSlabEP(basis.groups(), p0=0.3, v0=0.1, noise_var=1e-3)
    asked = []
    for pool, given_basis in ((op, None), (op.patterns(op.coarse_to_fine()), basis)):
        designer = SequentialDesigner(est, strategy="pool", pool=pool, basis=given_basis, batch_size=4, rng=0,
                                      n_random_start=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            designer.tell(op.patterns(op.first()), op.record(image)[op.first()])
            gains = MeasurementOperator.gains(op, designer.estimator_)  # the generic formula
            gains[op.first()] = -np.inf
            first_asked = np.argmax(np.abs(designer.ask() @ op.patterns(np.arange(64)).T), axis=1)
            assert gains[first_asked].min() >= gains.max() * (1 - 1e-9)
            designer.tell(op.patterns(first_asked), op.record(image)[first_asked])
            for _ in range(3):
                rows = designer.ask()
                designer.tell(rows, rows @ image)
        asked.append(designer.X_)
    np.testing.assert_array_equal(asked[0], asked[1])
    P = op.patterns(np.arange(64))
    assert asked[0].shape == (32, 64)
    matches = np.argmax(np.abs(asked[0] @ P.T), axis=1)
    assert np.allclose(np.abs(asked[0] @ P.T).max(axis=1), 1.0) and np.unique(matches).size == matches.size
    with pytest.raises(ValueError, match="different bases"):
        SequentialDesigner(est, strategy="pool", pool=op, basis=make_basis("haar", 8))
