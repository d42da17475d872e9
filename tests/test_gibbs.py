"""The collapsed Gibbs samplers: exact enumeration, the slice step's target, the fast Gaussian draw,
rank updates, prior matching, and the estimator contract."""

import time

import numpy as np
import pytest
from scipy import stats
from scipy.integrate import quad
from sklearn.exceptions import ConvergenceWarning

from adaptcs.models import _gibbs_kernel as kernel
from adaptcs.models import exact_group_spike_slab
from adaptcs.models.gibbs import BayesianGroupLasso, GroupHorseshoe, GroupSpikeSlabGibbs
from adaptcs.models.matching import bg_lasso_gamma, horseshoe_tau, spike_slab_quantile

from conftest import random_group_problem


@pytest.mark.parametrize("seed", range(3))
def test_gss_mcmc_agrees_with_enumeration(seed):
    rng = np.random.default_rng(seed)
    X, y, groups, _w = random_group_problem(rng, 12, 5, 2, 0.5, p0=0.4)
    exact = exact_group_spike_slab(X, y, groups, 0.4, 1.0, 0.5)
    est = GroupSpikeSlabGibbs(groups, p0=0.4, v0=1.0, noise_var=0.5, n_samples=20000, burn_in=500,
                              random_state=seed).fit(X, y)
    # Monte Carlo error of a probability from 20,000 correlated draws is below 0.01 here
    np.testing.assert_allclose(est.group_prob_, exact.group_prob, atol=0.03)
    np.testing.assert_allclose(est.coef_, exact.mean, atol=0.05 * max(1.0, np.abs(exact.mean).max()))
    np.testing.assert_allclose(est.coef_var_, exact.var, atol=0.05 * max(1.0, exact.var.max()))


def _target_cdf(kind, s, q2, shape, rate):
    """CDF of prior(lam) prod_k exp(L_k(lam)), normalised numerically (integrated in t = sqrt(lam))."""
    def log_density_t(t):  # density of t = sqrt(lam): f(lam) * 2 t
        lam = t * t
        value = sum(kernel._lik(lam, sk, qk) for sk, qk in zip(s, q2, strict=True))
        return value + kernel._log_prior(kind, lam, shape, rate) + np.log(2 * t)

    peak = max(log_density_t(t) for t in np.geomspace(1e-4, 1e3, 400))

    def density(t):
        return np.exp(log_density_t(t) - peak) if t > 0 else 0.0

    total = quad(density, 0, np.inf, limit=500)[0]
    return lambda lam: quad(density, 0, np.sqrt(lam), limit=500)[0] / total


@pytest.mark.parametrize("kind, shape, rate", [(kernel.HORSESHOE, 1.0, 1.0), (kernel.GAMMA, 2.5, 3.0),
                                               (kernel.GAMMA, 1.0, 0.5)])
def test_slice_step_reproduces_its_target(kind, shape, rate):
    s = np.array([0.8, 2.0, 0.1])
    q2 = np.array([3.0, 0.5, 0.2])
    rng = np.random.default_rng(0)
    lam, chain = 1.0, []
    for u in rng.random((40000, 5)):
        lam = kernel.slice_step(kind, lam, s, q2, shape, rate, u)
        chain.append(lam)
    sample = np.array(chain[1000::10])  # thinned: nearly independent draws
    cdf = _target_cdf(kind, s, q2, shape, rate)
    result = stats.kstest(sample, np.vectorize(cdf))
    assert result.pvalue > 1e-3, result


def test_fast_gaussian_draw_has_the_right_moments(rng):
    n, d, s2 = 6, 4, 0.7
    X = rng.normal(size=(n, d))
    y = rng.normal(size=n)
    D = rng.uniform(0.2, 2.0, d)
    C = s2 * np.eye(n) + (X * D) @ X.T
    Cinv = np.linalg.inv(C)
    S = np.linalg.inv(X.T @ X / s2 + np.diag(1 / D))
    mu = S @ X.T @ y / s2
    XT = np.ascontiguousarray(X.T)
    draws = np.array([kernel.draw_coefficients(XT, y, s2, D, Cinv, z) for z in rng.standard_normal((40000, d + n))])
    assert np.all(np.abs(draws.mean(axis=0) - mu) < 4 * np.sqrt(np.diag(S) / 40000))
    assert np.linalg.norm(np.cov(draws.T) - S) / np.linalg.norm(S) < 0.03


@pytest.mark.parametrize("cls, kwargs", [(GroupHorseshoe, {"tau": 0.3}), (BayesianGroupLasso, {"gamma": 2.0}),
                                         (GroupSpikeSlabGibbs, {"p0": 0.3})])
def test_rank_updates_keep_the_inverse_exact(rng, cls, kwargs):
    """Without refactoring, the updated C^{-1} still matches a fresh inverse after many sweeps."""
    X, y, groups, _w = random_group_problem(rng, 10, 4, 3, 0.5)
    est = cls(groups, noise_var=0.5, n_samples=300, burn_in=0, refactor_every=10**6, random_state=1, **kwargs)
    est.fit(X, y)
    # the same random numbers with a fresh inverse after every sweep give the same chain
    again = cls(groups, noise_var=0.5, n_samples=300, burn_in=0, refactor_every=1, random_state=1, **kwargs)
    again.fit(X, y)
    np.testing.assert_allclose(again.group_var_samples_, est.group_var_samples_, rtol=1e-6, atol=1e-10)
    np.testing.assert_allclose(again.samples_, est.samples_, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("cls, kwargs", [(GroupHorseshoe, {"tau": 0.3}), (BayesianGroupLasso, {"gamma": 2.0}),
                                         (GroupSpikeSlabGibbs, {"p0": 0.3})])
@pytest.mark.parametrize("block_rows", [3, 8, kernel.BLOCK_ROWS])
def test_delayed_block_updates_give_the_chain_of_one_group_at_a_time(rng, monkeypatch, cls, kwargs, block_rows):
    """Blocks of delayed C^{-1} updates (groups of uneven sizes, some larger than a block) draw the same chain as
    updating C^{-1} after every group, from the same random numbers."""
    sizes = np.array([1, 5, 2, 3, 1, 4, 2, 6, 1, 3])
    groups = rng.permutation(np.repeat(np.arange(sizes.size), sizes))
    X = rng.normal(size=(12, groups.size))
    y = X @ np.where(np.isin(groups, [1, 7]), 1.0, 0.0) + rng.normal(0.0, 0.7, 12)
    run_sweeps = kernel.run_sweeps
    chains = {}
    for rows in (1, block_rows):
        monkeypatch.setattr(kernel, "run_sweeps", lambda *args, rows=rows: run_sweeps(*args, rows))
        est = cls(groups, noise_var=0.5, n_samples=300, burn_in=0, refactor_every=10**6, random_state=3, **kwargs)
        chains[rows] = est.fit(X, y)
    np.testing.assert_allclose(chains[block_rows].group_var_samples_, chains[1].group_var_samples_, rtol=1e-8,
                               atol=1e-12)
    np.testing.assert_allclose(chains[block_rows].samples_, chains[1].samples_, rtol=1e-8, atol=1e-10)


def test_matching_helpers_reproduce_e1():
    assert bg_lasso_gamma(4 / 128, 1 / 3, 4) == pytest.approx(np.sqrt(120), rel=1e-12)
    assert horseshoe_tau(4 / 128, 1 / 3) == pytest.approx(0.0106, rel=0.01)
    with pytest.raises(ValueError, match="must exceed"):
        spike_slab_quantile(0.005, 1.0)


@pytest.mark.parametrize("cls, kwargs", [(GroupHorseshoe, {"tau": 0.5}), (BayesianGroupLasso, {"gamma": 1.0}),
                                         (GroupSpikeSlabGibbs, {"p0": 0.3})])
def test_estimator_contract(rng, cls, kwargs):
    X, y, groups, _w = random_group_problem(rng, 15, 4, 3, 0.5)
    a = cls(groups, noise_var=0.5, n_samples=400, burn_in=100, random_state=7, **kwargs).fit(X, y)
    b = cls(groups, noise_var=0.5, n_samples=400, burn_in=100, random_state=7, **kwargs).fit(X, y)
    np.testing.assert_array_equal(a.samples_, b.samples_)
    assert a.samples_.shape == (400, 12) and a.group_var_samples_.shape == (400, 4)
    np.testing.assert_allclose(a.coef_, a.samples_.mean(axis=0))
    v = rng.normal(size=12)
    np.testing.assert_allclose(a.cov_matvec(v), np.cov(a.samples_.T) @ v, rtol=1e-10)
    mean, std = a.predict(X[:2], return_std=True)
    np.testing.assert_allclose(std**2, np.einsum("ij,jk,ik->i", X[:2], np.cov(a.samples_.T), X[:2]) + 0.5)
    thinned = cls(groups, noise_var=0.5, n_samples=400, burn_in=100, thin=4, random_state=7, **kwargs).fit(X, y)
    assert thinned.samples_.shape == (100, 12)
    np.testing.assert_array_equal(thinned.samples_, a.samples_[::4])
    with pytest.raises(ValueError, match="n_samples"):
        cls(groups, n_samples=0, **kwargs).fit(X, y)


def test_group_probabilities_on_a_clear_problem(rng):
    X, y, groups, w = random_group_problem(rng, 30, 5, 3, 0.1, p0=0.4)
    est = GroupSpikeSlabGibbs(groups, p0=0.4, v0=1.0, noise_var=0.1, n_samples=2000, burn_in=200,
                              random_state=0).fit(X, y)
    active = np.bincount(groups, weights=w != 0) > 0
    assert np.all(est.group_prob_[active] > 0.9) and np.all(est.group_prob_[~active] < 0.1)


def test_warm_start_continues_from_the_last_state(rng, monkeypatch):
    X, y, groups, _w = random_group_problem(rng, 15, 4, 3, 0.5)
    est = GroupHorseshoe(groups, tau=0.5, noise_var=0.5, n_samples=50, burn_in=0, random_state=0,
                         warm_start=True).fit(X, y)
    monkeypatch.setattr(GroupHorseshoe, "_initial", lambda *a: pytest.fail("warm start must not reinitialise"))
    est.fit(X, y)


def test_bad_hyperparameters(rng):
    X, y, groups, _w = random_group_problem(rng, 10, 3, 2, 0.5)
    with pytest.raises(ValueError, match="tau"):
        GroupHorseshoe(groups, tau=0.0).fit(X, y)
    with pytest.raises(ValueError, match="gamma"):
        BayesianGroupLasso(groups, gamma=-1.0).fit(X, y)
    with pytest.raises(ValueError, match="p0"):
        GroupSpikeSlabGibbs(groups, p0=1.5).fit(X, y)


def test_split_rhat_against_its_definition(rng):
    """Stationary independent draws give R-hat near 1; a chain whose halves sit at different levels (has not
    mixed) gives the value of the formula; columns that never move are left out."""
    from adaptcs.models.gibbs import split_rhat

    iid = rng.normal(size=(4000, 5))
    assert 1.0 - 0.01 < split_rhat(iid) < 1.01
    shifted = np.concatenate([rng.normal(0.0, 1.0, (2000, 1)), rng.normal(3.0, 1.0, (2000, 1))])
    h = 2000
    expected = np.sqrt(((h - 1) / h + h * 4.5 / h) / 1.0)  # within 1, between-chain variance of the means 4.5
    assert split_rhat(shifted) == pytest.approx(expected, rel=0.05)
    with_zeros = np.hstack([iid, np.zeros((4000, 3))])
    assert split_rhat(with_zeros) == split_rhat(iid)
    assert np.isnan(split_rhat(iid[:3]))


def test_a_chain_that_has_not_mixed_is_not_converged(rng, monkeypatch):
    from adaptcs.models import gibbs

    X, y, groups, _w = random_group_problem(rng, 20, 5, 3, 0.5)
    est = GroupSpikeSlabGibbs(groups, p0=0.3, v0=1.0, noise_var=0.5, n_samples=400, burn_in=50,
                              random_state=0).fit(X, y)
    assert est.converged_ == (est.rhat_ < gibbs.RHAT_LIMIT) and est.rhat_ < 1.1
    monkeypatch.setattr(gibbs, "RHAT_LIMIT", 1.0)  # no chain is that good: every fit must say so
    with pytest.warns(ConvergenceWarning, match="has not mixed"):
        est.fit(X, y)
    assert not est.converged_


def _busy(cpu_seconds: float) -> None:
    """Spend ``cpu_seconds`` of this process's CPU time."""
    end = time.process_time() + cpu_seconds
    while time.process_time() < end:
        pass


def _stop_after(monkeypatch, blocks: int, cpu_per_block: float = 0.0) -> None:
    """Make the kernel raise KeyboardInterrupt (a kill, as far as Python can see one) on its call ``blocks + 1``,
    spending ``cpu_per_block`` CPU seconds in each block before that."""
    run_sweeps, calls = kernel.run_sweeps, [0]

    def stopping(*args):
        calls[0] += 1
        if calls[0] > blocks:
            raise KeyboardInterrupt
        _busy(cpu_per_block)
        return run_sweeps(*args)

    monkeypatch.setattr(kernel, "run_sweeps", stopping)


@pytest.mark.parametrize("cls, kwargs", [(GroupHorseshoe, {"tau": 0.3}), (BayesianGroupLasso, {"gamma": 2.0}),
                                         (GroupSpikeSlabGibbs, {"p0": 0.3})])
def test_a_chain_stopped_and_fitted_again_gives_the_samples_of_one_never_stopped(rng, monkeypatch, tmp_path, cls,
                                                                                 kwargs):
    import signal

    X, y, groups, _w = random_group_problem(rng, 12, 5, 3, 0.5)
    params = dict(noise_var=0.5, n_samples=1000, burn_in=250, thin=3, refactor_every=7, random_state=11, **kwargs)
    whole = cls(groups, **params).fit(X, y)
    assert whole.resumed_at_ == 0 and whole.resumed_cpu_seconds_ == 0
    handler = signal.getsignal(signal.SIGTERM)
    with monkeypatch.context() as patch:
        _stop_after(patch, 3, cpu_per_block=0.1)
        with pytest.raises(KeyboardInterrupt):
            cls(groups, **params, checkpoint_dir=tmp_path, checkpoint_seconds=0).fit(X, y)
    assert len(list(tmp_path.glob(f"{cls.__name__}-*.npz"))) == 1
    assert signal.getsignal(signal.SIGTERM) == handler  # the chain's own handler is gone with it
    resumed = cls(groups, **params, checkpoint_dir=tmp_path, checkpoint_seconds=0).fit(X, y)
    assert signal.getsignal(signal.SIGTERM) == handler
    assert resumed.resumed_at_ == 750  # the save before the fourth block of 250 sweeps
    assert resumed.resumed_cpu_seconds_ >= 0.3  # the stopped fit's three blocks, each made to take 0.1 CPU s
    np.testing.assert_array_equal(resumed.samples_, whole.samples_)
    np.testing.assert_array_equal(resumed.group_var_samples_, whole.group_var_samples_)
    assert resumed.rhat_ == whole.rhat_ and resumed.n_iter_ == whole.n_iter_
    assert list(tmp_path.iterdir()) == []  # removed when the chain ended


def test_a_checkpoint_is_read_only_by_its_own_chain_and_never_when_damaged(rng, monkeypatch, tmp_path):
    X, y, groups, _w = random_group_problem(rng, 12, 5, 3, 0.5)
    params = dict(p0=0.3, noise_var=0.5, n_samples=750, burn_in=250, random_state=4)

    def stopped(**changes):
        with monkeypatch.context() as patch:
            _stop_after(patch, 2)
            with pytest.raises(KeyboardInterrupt):
                GroupSpikeSlabGibbs(groups, **{**params, **changes}, checkpoint_dir=tmp_path,
                                    checkpoint_seconds=0).fit(X, y)

    stopped()
    (saved,) = tmp_path.glob("*.npz")
    for changes, data in [({"random_state": 5}, (X, y)), ({"n_samples": 1000}, (X, y)), ({"v0": 2.0}, (X, y)),
                          ({}, (X, y + 1e-12)), ({"random_state": None}, (X, y))]:
        other = GroupSpikeSlabGibbs(groups, **{**params, **changes}, checkpoint_dir=tmp_path,
                                    checkpoint_seconds=3600).fit(*data)
        assert other.resumed_at_ == 0, changes
    assert list(tmp_path.glob("*.npz")) == [saved]  # another chain leaves it alone

    whole = GroupSpikeSlabGibbs(groups, **params).fit(X, y)
    for damage in (lambda b: b[: len(b) // 2], lambda b: b[:300] + bytes([b[300] ^ 1]) + b[301:]):
        saved.unlink(missing_ok=True)
        stopped()
        saved.write_bytes(damage(saved.read_bytes()))
        with pytest.warns(RuntimeWarning, match="checkpoint not usable"):
            again = GroupSpikeSlabGibbs(groups, **params, checkpoint_dir=tmp_path, checkpoint_seconds=3600).fit(X, y)
        assert again.resumed_at_ == 0
        np.testing.assert_array_equal(again.samples_, whole.samples_)
    assert list(tmp_path.iterdir()) == []


_TERMINATED_CHILD = """
import os, signal, sys
import numpy as np
from adaptcs.models import _gibbs_kernel as kernel
from adaptcs.models.gibbs import GroupSpikeSlabGibbs

data = np.load(sys.argv[1])
run_sweeps, calls = kernel.run_sweeps, [0]

def terminated_in_the_third_block(*args):
    calls[0] += 1
    if calls[0] == 3:
        os.kill(os.getpid(), signal.SIGTERM)  # as a scheduler's time limit would, in the middle of a block
    return run_sweeps(*args)

kernel.run_sweeps = terminated_in_the_third_block
GroupSpikeSlabGibbs(data["groups"], p0=0.3, noise_var=0.5, n_samples=1000, burn_in=250, random_state=2,
                    checkpoint_dir=sys.argv[2], checkpoint_seconds=3600).fit(data["X"], data["y"])
print("the chain ended")
"""


def test_sigterm_saves_the_chain_at_the_end_of_its_block_and_ends_the_process(rng, tmp_path):
    """SIGTERM (a time limit) during a block: the chain saves at the block's end, then the process ends by SIGTERM;
    fitted again, the chain goes on from there to the samples of one never stopped. No periodic save is due (one an
    hour), so the file can only come from the signal."""
    import signal
    import subprocess
    import sys

    X, y, groups, _w = random_group_problem(rng, 12, 5, 3, 0.5)
    np.savez(tmp_path / "data.npz", X=X, y=y, groups=groups)
    folder = tmp_path / "checkpoints"
    done = subprocess.run([sys.executable, "-c", _TERMINATED_CHILD, str(tmp_path / "data.npz"), str(folder)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == -signal.SIGTERM, done.stderr
    assert "the chain ended" not in done.stdout and "terminated (SIGTERM)" in done.stderr
    params = dict(p0=0.3, noise_var=0.5, n_samples=1000, burn_in=250, random_state=2)
    resumed = GroupSpikeSlabGibbs(groups, **params, checkpoint_dir=folder, checkpoint_seconds=3600).fit(X, y)
    assert resumed.resumed_at_ == 750  # the third block (sweeps 500-749) ran to its end
    np.testing.assert_array_equal(resumed.samples_, GroupSpikeSlabGibbs(groups, **params).fit(X, y).samples_)
