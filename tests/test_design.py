"""The power method and the sequential design loop."""

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import Ridge

from adaptcs.data.synthetic import experiment_rng, make_e1_problem
from adaptcs.design import leading_eigenvector, run_sequential_design, top_eigenvectors
from adaptcs.models import GroupSpikeSlabEP, SpikeSlabEP


def psd_with_spectrum(rng, eigenvalues):
    Q, _ = np.linalg.qr(rng.normal(size=(len(eigenvalues), len(eigenvalues))))
    return (Q * eigenvalues) @ Q.T


@pytest.mark.parametrize("second", [0.5, 0.9, 0.999])  # well separated ... near-degenerate
@pytest.mark.parametrize("seed", range(3))
def test_leading_eigenvector_matches_eigh(second, seed):
    rng = np.random.default_rng(seed)
    d = 60
    eigenvalues = np.concatenate([[1.0, second], rng.uniform(0.0, 0.8 * second, d - 2)])
    V = psd_with_spectrum(rng, eigenvalues)
    vector, value = leading_eigenvector(lambda v: V @ v, d, rng=rng)
    w, U = np.linalg.eigh(V)
    assert abs(vector @ U[:, -1]) > 0.9999
    assert value == pytest.approx(w[-1], rel=1e-6)
    assert np.linalg.norm(vector) == pytest.approx(1.0)


def test_plain_power_method_on_a_separated_spectrum(rng):
    d = 40
    V = psd_with_spectrum(rng, np.concatenate([[2.0], rng.uniform(0.0, 1.0, d - 1)]))
    vector, value = leading_eigenvector(lambda v: V @ v, d, rng=rng, oversample=0)
    w, U = np.linalg.eigh(V)
    assert abs(vector @ U[:, -1]) > 0.9999
    assert value == pytest.approx(w[-1], rel=1e-8)


def test_top_k_eigenvectors_span_the_top_eigenspace(rng):
    d, k = 50, 3
    V = psd_with_spectrum(rng, np.concatenate([[3.0, 2.5, 2.0], rng.uniform(0.0, 1.0, d - 3)]))
    res = top_eigenvectors(lambda B: V @ B, d, k, rng=rng)
    w, U = np.linalg.eigh(V)
    assert res.converged
    np.testing.assert_allclose(res.values, w[::-1][:k], rtol=1e-8)
    np.testing.assert_allclose(res.vectors.T @ res.vectors, np.eye(k), atol=1e-10)
    # principal angles with the true top-k eigenspace are ~0
    cosines = np.linalg.svd(U[:, -k:].T @ res.vectors, compute_uv=False)
    assert cosines.min() > 0.9999


def test_power_method_reports_non_convergence(rng):
    V = psd_with_spectrum(rng, np.linspace(1.0, 0.1, 30))
    with pytest.warns(ConvergenceWarning, match="power method"):
        res = top_eigenvectors(lambda B: V @ B, 30, 1, rng=rng, max_iter=1)
    assert not res.converged


def test_degenerate_leading_eigenspace_stops_on_the_rayleigh_quotient(rng):
    """Any vector of a repeated top eigenspace is optimal; the method must stop, not spin."""
    d = 30
    V = psd_with_spectrum(rng, np.concatenate([[1.0] * 5, rng.uniform(0.0, 0.5, d - 5)]))
    res = top_eigenvectors(lambda B: V @ B, d, 1, rng=rng, oversample=0)
    assert res.converged and res.n_iter < 200
    assert res.values[0] == pytest.approx(1.0, rel=1e-7)


def test_a_start_block_that_misses_the_top_direction_still_finds_it(rng):
    """The previous block may be orthogonal to a direction that has just become the largest: the random vector
    added to it lets that direction grow."""
    d = 80
    eigenvalues = np.concatenate([[5.0], np.linspace(2.0, 0.1, d - 1)])
    V = np.diag(eigenvalues)
    start = np.eye(d)[:, 1:6]  # exact eigenvectors, all orthogonal to the top one
    for seed in range(20):
        res = top_eigenvectors(lambda B: V @ B, d, 1, rng=np.random.default_rng(seed), tol=1e-3, start=start)
        assert abs(res.vectors[0, 0]) > 0.9999
        assert res.values[0] == pytest.approx(5.0, rel=1e-5)


def test_eigenvector_signs_do_not_depend_on_the_start(rng):
    """A row's sign decides how its noise enters the measurement, so it must not depend on the random start or
    on rounding: every returned vector has its largest-magnitude entry positive, from any start."""
    d = 40
    V = psd_with_spectrum(rng, np.concatenate([[4.0, 3.0, 2.0], rng.uniform(0.0, 1.0, d - 3)]))
    _, exact = np.linalg.eigh(V)
    exact = exact[:, ::-1][:, :3]
    exact *= np.sign(exact[np.argmax(np.abs(exact), axis=0), np.arange(3)])
    for seed in range(10):
        res = top_eigenvectors(lambda B: V @ B, d, 3, rng=np.random.default_rng(seed), tol=1e-10)
        np.testing.assert_allclose(res.vectors, exact, atol=1e-4)  # a flip would be ~0.1
        flipped = top_eigenvectors(lambda B: V @ B, d, 3, rng=np.random.default_rng(seed), tol=1e-10,
                                   start=-res.vectors)
        np.testing.assert_allclose(flipped.vectors, exact, atol=1e-4)


def test_start_shape_is_checked(rng):
    with pytest.raises(ValueError, match="start"):
        top_eigenvectors(lambda B: B, 10, 1, rng=rng, start=np.ones((9, 2)))


@pytest.fixture(scope="module")
def e3_problem():
    return make_e1_problem(experiment_rng("E3", 0, 0), n=32)


def test_designed_row_beats_random_rows(e3_problem):
    p = e3_problem
    est = GroupSpikeSlabEP(p.groups, p0=4 / 128, v0=1 / 3, noise_var=1.0).fit(p.X, p.y)
    rng = np.random.default_rng(1)
    x, value = leading_eigenvector(est.cov_matvec, 512, rng=rng)
    best = x @ est.cov_matvec(x)
    assert best == pytest.approx(value, rel=1e-6)
    random_rows = rng.normal(size=(1000, 512))
    random_rows /= np.linalg.norm(random_rows, axis=1, keepdims=True)
    random_scores = np.einsum("ij,ji->i", random_rows, est.cov_matvec(random_rows.T))
    assert best > random_scores.max()


def _run(p, strategy, seed=5, **kw):
    est = GroupSpikeSlabEP(p.groups, p0=4 / 128, v0=1 / 3, noise_var=1.0)
    return run_sequential_design(est, p.w_true, p.X, p.y, kw.pop("n_steps", 4), strategy=strategy,
                                 noise_var=1.0, row_norm=np.sqrt(512), rng=np.random.default_rng(seed), **kw)


@pytest.mark.parametrize("strategy", ["design", "random"])
def test_loop_is_deterministic(e3_problem, strategy):
    a, b = _run(e3_problem, strategy), _run(e3_problem, strategy)
    for name in ["n_measurements", "errors", "coef", "X", "y", "group_prob"]:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


def test_loop_records_every_step(e3_problem):
    seen = []
    res = _run(e3_problem, "design", n_steps=3, batch_size=2, callback=lambda *args: seen.append(args))
    np.testing.assert_array_equal(res.n_measurements, [32, 34, 36, 38])
    assert res.errors.shape == res.fit_seconds.shape == (4,)
    assert res.select_seconds.shape == (3,)
    assert res.X.shape == (38, 512) and res.y.shape == (38,)
    np.testing.assert_allclose(np.linalg.norm(res.X[32:], axis=1), np.sqrt(512))
    assert [s[:2] for s in seen] == [(1, 34), (2, 36), (3, 38)]
    assert res.group_prob.shape == (128,)
    # the two rows of a batch are orthogonal eigenvectors
    assert abs(res.X[32] @ res.X[33]) < 1e-6 * 512


def test_design_reduces_error_more_than_random(e3_problem):
    design = _run(e3_problem, "design", n_steps=16)
    random = _run(e3_problem, "random", n_steps=16)
    assert design.errors[-1] < random.errors[-1]


def test_pool_strategy_picks_the_most_uncertain_rows(e3_problem):
    p = e3_problem
    pool = np.random.default_rng(2).normal(size=(20, 512))
    est = GroupSpikeSlabEP(p.groups, p0=4 / 128, v0=1 / 3, noise_var=1.0).fit(p.X, p.y)
    first_choice = np.argmax(np.einsum("ij,ji->i", pool, est.cov_matvec(pool.T)))
    res = _run(p, "pool", n_steps=3, pool=pool)
    np.testing.assert_array_equal(res.X[32], pool[first_choice])
    chosen = [int(np.flatnonzero((pool == row).all(axis=1))[0]) for row in res.X[32:]]
    assert len(set(chosen)) == 3  # each candidate used at most once


def test_methods_without_covariance_only_run_random(e3_problem):
    p = e3_problem
    with pytest.raises(ValueError, match="only run with strategy='random'"):
        run_sequential_design(Ridge(), p.w_true, p.X, p.y, 2, strategy="design", noise_var=1.0, row_norm=1.0,
                              rng=np.random.default_rng(0))
    res = run_sequential_design(Ridge(alpha=10.0), p.w_true, p.X, p.y, 2, strategy="random", noise_var=1.0,
                                row_norm=np.sqrt(512), rng=np.random.default_rng(0))
    assert res.group_prob is None and res.errors.shape == (3,)


def test_caller_estimator_is_not_modified(e3_problem):
    p = e3_problem
    est = SpikeSlabEP(p0=16 / 512, v0=1 / 3, noise_var=1.0)
    run_sequential_design(est, p.w_true, p.X, p.y, 1, strategy="design", noise_var=1.0, row_norm=1.0,
                          rng=np.random.default_rng(0))
    assert not hasattr(est, "coef_") and est.warm_start is False


@pytest.mark.parametrize("kwargs, match", [
    ({"strategy": "best"}, "strategy must be one of"),
    ({"strategy": "pool"}, "pool must be given"),
    ({"strategy": "pool", "pool": np.ones((2, 512))}, "pool has 2 rows"),
    ({"strategy": "design", "batch_size": 0}, "batch_size"),
    ({"strategy": "design", "row_norm": -1.0}, "row_norm"),
    ({"strategy": "design", "w_true": np.ones(5)}, "w_true must have shape"),
    ({"strategy": "design", "batch_size": 513}, "batch_size"),
    ({"strategy": "random", "rng": "seven"}, "rng must be None, an integer seed"),
    ({"strategy": "random", "rng": -1}, "rng"),
])
def test_bad_loop_arguments(e3_problem, kwargs, match):
    p = e3_problem
    args = {"noise_var": 1.0, "row_norm": 1.0, "rng": np.random.default_rng(0)} | kwargs
    w_true = args.pop("w_true", p.w_true)
    with pytest.raises(ValueError, match=match):
        run_sequential_design(SpikeSlabEP(p0=0.1), w_true, p.X, p.y, 3, **args)


def test_rng_may_be_a_seed_or_none(e3_problem):
    p = e3_problem

    def run(rng):
        return run_sequential_design(GroupSpikeSlabEP(p.groups, p0=4 / 128, v0=1 / 3, noise_var=1.0), p.w_true, p.X,
                                     p.y, 2,
                                     strategy="random", noise_var=1.0, row_norm=np.sqrt(512), rng=rng)

    np.testing.assert_array_equal(run(7).X, run(np.random.default_rng(7)).X)  # default_rng semantics
    assert run(None).errors.shape == (3,)


class _FailsOnThirdFit(Ridge):
    """A ridge regression whose third fit goes wrong (non-finite estimate, or a raised LinAlgError)."""

    def __init__(self, alpha=1.0, how="nan", fits=0):
        super().__init__(alpha=alpha)
        self.how = how
        self.fits = fits

    def fit(self, X, y):
        super().fit(X, y)
        self.fits += 1
        if self.fits == 3:
            if self.how == "raise":
                raise np.linalg.LinAlgError("matrix is singular")
            self.coef_ = np.full_like(self.coef_, np.nan)
        return self


@pytest.mark.parametrize("how", ["nan", "raise"])
def test_a_failed_fit_is_recorded_not_averaged(e3_problem, how):
    p = e3_problem
    est = _FailsOnThirdFit(alpha=10.0, how=how)
    est.set_params(fits=0)
    with pytest.warns(RuntimeWarning, match="a fit failed at step 2"):
        res = run_sequential_design(est, p.w_true, p.X, p.y, 4, strategy="random", noise_var=1.0,
                                    row_norm=np.sqrt(512), rng=0)
    assert res.failed and "step 2" in res.failure
    np.testing.assert_array_equal(res.finite, [True, True, False, False, False])
    assert np.all(np.isfinite(res.errors[:2])) and np.all(np.isnan(res.errors[2:]))
    np.testing.assert_array_equal(res.n_measurements, [32, 33, 34, 35, 36])
    assert np.all(np.isnan(res.coef))


def test_convergence_and_iterations_are_recorded(e3_problem):
    res = _run(e3_problem, "design", n_steps=3)
    assert res.converged.shape == res.n_iter.shape == res.finite.shape == (4,)
    assert set(res.converged.tolist()) <= {0, 1} and np.all(res.n_iter >= 1) and res.finite.all()
    assert not res.failed
    ridge = run_sequential_design(Ridge(), e3_problem.w_true, e3_problem.X, e3_problem.y, 1, strategy="random",
                                  noise_var=1.0, row_norm=1.0, rng=0)
    np.testing.assert_array_equal(ridge.converged, [-1, -1])  # no convergence test: recorded as unknown


def test_designed_rows_along_a_loop_are_the_dense_leading_eigenvectors(e3_problem):
    """Warm-started, looser eigenvectors (issue 14) against the dense covariance at every step: each designed row
    has x^T V x within 1e-4 of lambda_max |x|^2, is the leading eigenvector where the gap is clear, and needs fewer
    block iterations than a cold start at the old tolerance."""
    from adaptcs.design import SequentialDesigner

    p = e3_problem
    designer = SequentialDesigner(GroupSpikeSlabEP(p.groups, p0=4 / 128, v0=1 / 3, noise_var=1.0), row_norm=1.0, rng=3)
    designer.tell(p.X, p.y)
    noise = np.random.default_rng(4)
    warm_iterations, cold_iterations = [], []
    for _ in range(8):
        est = designer.estimator_
        V = est.cov_matvec(np.eye(512))  # dense covariance: only affordable because this is a test
        w, U = np.linalg.eigh(0.5 * (V + V.T))
        cold = top_eigenvectors(est.cov_matvec, 512, 1, rng=np.random.default_rng(0), tol=1e-6)
        x = designer.ask()[0]
        warm_iterations.append(designer._eigen_iterations)
        cold_iterations.append(cold.n_iter)
        assert np.linalg.norm(x) == pytest.approx(1.0)
        assert x @ V @ x >= (1.0 - 1e-4) * w[-1]
        if (w[-1] - w[-2]) / w[-1] > 1e-2:
            assert abs(x @ U[:, -1]) > 1.0 - 1e-4
            assert abs(x @ cold.vectors[:, 0]) > 1.0 - 1e-4
        designer.tell(x, x @ p.w_true + noise.normal())
    assert sum(warm_iterations[1:]) < sum(cold_iterations[1:])
