"""Collapsed Gibbs samplers for linear regression with group priors on the coefficient variances.

One engine (:mod:`adaptcs.models._gibbs_kernel`), three priors on the variance ``lam_g`` of group g (prior
covariance of ``w_g`` is ``tau^2 lam_g I``), as in docs/model.md section 5:

* :class:`GroupSpikeSlabGibbs` (GSS-MCMC): ``lam_g`` in {0, v0} with P(lam_g = v0) = p0_g (tau = 1);
* :class:`GroupHorseshoe` (G-HS): ``sqrt(lam_g) ~ half-Cauchy(0, 1)``, global scale ``tau``;
* :class:`BayesianGroupLasso` (BG-LASSO): ``lam_g ~ Gamma((d_g + 1) / 2, rate d_g gamma^2 / 2)`` (tau = 1).

A sweep costs O(n^2 d). The point estimate is the mean of the kept samples of w; ``cov_matvec`` uses their
(mean-centred) sample covariance, so the samplers can take part in design experiments.
"""

from __future__ import annotations

import logging
import os
import time
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.validation import check_is_fitted

from adaptcs import _validation as val
from adaptcs._styles import PAPER_BURN_IN, PAPER_N_SAMPLES  # the paper's protocol (11,000 sweeps, 1,000 discarded)
from adaptcs.models import _constraints as constraints
from adaptcs.models._base import GroupRegressor
from adaptcs.models._chain_checkpoint import ChainCheckpoint
from adaptcs.models._scaling import DataScale

log = logging.getLogger(__name__)

def _compiled_kernel():
    """The numba kernel, imported (and on a machine's first use compiled, about a minute) when a sampler first runs."""
    import sys

    if "adaptcs.models._gibbs_kernel" not in sys.modules:
        log.info("loading the Gibbs kernel (numba compiles it on a machine's first run and caches it)")
    from adaptcs.models import _gibbs_kernel

    return _gibbs_kernel


_BLOCK = 250  # sweeps per compiled call (random numbers are drawn per block)
RHAT_LIMIT = 1.1  # split R-hat at or above this: the chain has not mixed (converged_ is False)
MAX_SIGNAL_TO_NOISE = 1e20  # prior signal-to-noise ratios outside [1e-20, 1e20] are refused (wrong units)


# The parameters every sampler has (each adds its prior's own).
_SAMPLER = {"groups": constraints.GROUPS, "noise_var": constraints.POSITIVE, "n_samples": constraints.COUNT,
            "burn_in": constraints.NON_NEGATIVE_COUNT, "thin": constraints.COUNT,
            "refactor_every": constraints.COUNT, "random_state": ["random_state"], "warm_start": constraints.BOOLEAN,
            "checkpoint_dir": [str, os.PathLike, None], "checkpoint_seconds": constraints.NON_NEGATIVE}


class _GroupGibbs(GroupRegressor):
    """Shared engine; subclasses define the prior (``_prior``) and the initial variances (``_initial``)."""

    _kind: str  # the prior's code in the kernel: SPIKE_SLAB, HORSESHOE or GAMMA

    def __init__(self, groups, noise_var, *, n_samples, burn_in, thin, refactor_every, random_state, warm_start,
                 checkpoint_dir, checkpoint_seconds):
        self.groups = groups
        self.noise_var = noise_var
        self.n_samples = n_samples
        self.burn_in = burn_in
        self.thin = thin
        self.refactor_every = refactor_every
        self.random_state = random_state
        self.warm_start = warm_start
        self.checkpoint_dir = checkpoint_dir
        self.checkpoint_seconds = checkpoint_seconds

    def _prior(self, G: int, sizes: np.ndarray):
        """Returns (tau2, prior_logit (G,), v0, shape (G,), rate (G,))."""
        raise NotImplementedError

    def _initial(self, X, y, members, prior) -> np.ndarray:
        return np.ones(len(members))

    def _check_extra(self, n_groups: int | None = None) -> None:
        """A seed numpy's ``default_rng`` takes."""
        val.check_random_state(self.random_state)

    def _typical_group_var(self, prior) -> float:
        """A typical prior value of lam_g (times tau^2 the prior variance of a coefficient), for range checks."""
        _tau2, _logit, _v0, shape, rate = prior
        return float(np.mean(shape / rate))

    def _fit(self, X, y, labels, coef_group):
        """Run ``burn_in + n_samples`` sweeps and keep every ``thin``-th sample after the burn-in."""
        n, d = X.shape
        noise_var, n_samples, burn_in = float(self.noise_var), int(self.n_samples), int(self.burn_in)
        thin, refactor_every = int(self.thin), int(self.refactor_every)
        G = labels.shape[0]
        order, members = val.group_members(coef_group, G)
        sizes = np.bincount(coef_group, minlength=G)
        ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        prior = self._prior(G, sizes)
        tau2, prior_logit, v0, shape, rate = prior
        # Work on data of unit size (exact power-of-two rescaling): the prior covariance of w_g, tau^2 lam_g I,
        # is in the units of w^2, so only tau^2 changes (tau^2 / unit^2); draws of w are scaled back by unit.
        scale = DataScale.of(X, y)
        unit = scale.coef
        X, y = X / scale.x, y / scale.y
        noise_s = scale.scaled_noise(noise_var)
        tau2_s = scale.scaled_variance(tau2, "the prior scale")
        snr = tau2_s * self._typical_group_var(prior) * float(np.max(np.einsum("ij,ij->i", X, X))) / noise_s
        if not 1.0 / MAX_SIGNAL_TO_NOISE < snr < MAX_SIGNAL_TO_NOISE:
            raise ValueError(f"{type(self).__name__}: prior variance x |x_i|^2 / noise_var = {snr:.3g} for the most "
                             "informative row, outside what double precision can resolve "
                             f"({1 / MAX_SIGNAL_TO_NOISE:.0e} to {MAX_SIGNAL_TO_NOISE:.0e}); the prior scale or "
                             "noise_var is probably in the wrong units")

        XT = np.ascontiguousarray(X[:, order].T)  # (d, n), each group's rows contiguous
        if self.warm_start and hasattr(self, "group_var_samples_") and self.group_var_samples_.shape[1] == G:
            lam = self.group_var_samples_[-1].astype(float).copy()
        else:
            lam = self._initial(X, y, members, prior).astype(float)
        Cinv = np.empty((n, n))
        kernel = _compiled_kernel()
        kind = getattr(kernel, self._kind)
        try:
            kernel.refactor(XT, lam[np.repeat(np.arange(G), sizes)], tau2_s, noise_s, Cinv)
        except np.linalg.LinAlgError as exc:
            raise ValueError(f"{type(self).__name__}: s2 I + X D X^T is numerically singular at the start ({exc}); "
                             "X, the prior scale and noise_var are degenerate together") from None

        rng = np.random.default_rng(self.random_state)
        total = burn_in + n_samples
        n_keep = len(range(0, n_samples, thin))
        w_out = np.empty((n_keep, d))
        lam_out = np.empty((n_keep, G))
        width = int(sizes.max()) + 2
        checkpoint = ChainCheckpoint(
            self.checkpoint_dir, type(self).__name__,
            {"XT": XT, "y": y, "noise": noise_s, "ptr": ptr, "lam": lam, "tau2": tau2_s, "kind": kind,
             "prior_logit": prior_logit, "v0": v0, "shape": shape, "rate": rate, "order": order, "unit": unit,
             "sweeps": [total, burn_in, thin, refactor_every, _BLOCK, width]}, rng, self.checkpoint_seconds)
        written, first_sweep, cpu_before = 0, 0, 0.0
        saved = checkpoint.resume({"lam": lam.shape, "Cinv": Cinv.shape, "w_out": w_out.shape,
                                   "lam_out": lam_out.shape}, total, _BLOCK)
        if saved is not None:
            first_sweep, written, cpu_before = saved["sweep"], saved["written"], saved["cpu_seconds"]
            lam[:], Cinv[:] = saved["lam"], saved["Cinv"]
            w_out[:written], lam_out[:written] = saved["w_kept"], saved["lam_kept"]
            rng.bit_generator.state = saved["rng_state"]
        start, next_report = time.perf_counter(), 0.1
        with checkpoint:
            for sweep0 in range(first_sweep, total, _BLOCK):
                checkpoint.save_if_due(sweep0, written, lam, Cinv, w_out, lam_out, rng)
                m = min(_BLOCK, total - sweep0)
                uniforms = rng.random((m, G, width))
                normals = rng.standard_normal((m, d + n))
                try:
                    written += kernel.run_sweeps(XT, y, noise_s, ptr, lam, tau2_s, Cinv, kind, prior_logit, v0,
                                                 shape, rate, uniforms, normals, sweep0, refactor_every, burn_in, thin,
                                                 w_out, lam_out, written)
                except (np.linalg.LinAlgError, ZeroDivisionError, FloatingPointError) as exc:
                    raise ValueError(f"{type(self).__name__}: the sampler broke down numerically after {sweep0} sweeps "
                                     f"({type(exc).__name__}: {exc}); X, y, the prior scale and noise_var are probably "
                                     "in inconsistent units") from None
                done = (sweep0 + m) / total
                if done >= next_report:
                    log.info("%s: %d/%d sweeps (%.0f%%), %.1f s", type(self).__name__, sweep0 + m, total,
                             100 * done, time.perf_counter() - start)
                    next_report = np.floor(done * 10) / 10 + 0.1
            checkpoint.save_if_due(total, written, lam, Cinv, w_out, lam_out, rng, only_if_terminated=True)
        if not np.all(np.isfinite(w_out)):
            raise ValueError(f"{type(self).__name__}: the sampler produced non-finite values; X, y, the prior scale "
                             "and noise_var are probably in inconsistent units")
        checkpoint.remove()

        samples = np.empty_like(w_out)
        samples[:, order] = w_out * unit  # back to the caller's coefficient order and units
        self.n_features_in_ = d
        self.group_labels_ = labels
        self.samples_ = samples
        self.group_var_samples_ = lam_out
        self.coef_ = samples.mean(axis=0)
        self.coef_var_ = samples.var(axis=0, ddof=1) if n_keep > 1 else np.zeros(d)
        self.group_var_ = tau2 * lam_out.mean(axis=0)
        self.n_iter_ = total
        self.resumed_at_ = first_sweep
        self.resumed_cpu_seconds_ = cpu_before
        self.rhat_ = split_rhat(samples)
        self.converged_ = bool(self.rhat_ < RHAT_LIMIT)
        if not self.converged_:
            warnings.warn(f"{type(self).__name__}: the chain has not mixed: split R-hat {self.rhat_:.3g} >= "
                          f"{RHAT_LIMIT} (run more sweeps); the fit is marked not converged", ConvergenceWarning,
                          stacklevel=5)
        self._noise_var = noise_var
        self._centred = samples - self.coef_
        return self

    def cov_matvec(self, v):
        """Sample covariance of the kept samples times ``v`` (shape (d,) or (d, k)); O(N d k)."""
        check_is_fitted(self, "coef_")
        v = val.check_vector_or_block(v, self.n_features_in_)
        N = self._centred.shape[0]
        return self._centred.T @ (self._centred @ v) / max(N - 1, 1)

    def predict(self, X, return_std: bool = False):
        """Predictive mean (and standard deviation including the noise) at rows X of shape (k, d)."""
        check_is_fitted(self, "coef_")
        X = val.check_predict_rows(self, X)
        mean = X @ self.coef_
        if not return_std:
            return mean
        proj = self._centred @ X.T  # (N, k)
        var = np.sum(proj * proj, axis=0) / max(self._centred.shape[0] - 1, 1)
        return mean, np.sqrt(var + self._noise_var)


def split_rhat(samples: np.ndarray) -> float:
    """Largest split R-hat (Gelman et al., Bayesian Data Analysis, 3rd ed., section 11.4) over columns.

    The samples (N, k) are cut into two halves treated as two chains; columns whose within-half variance is
    below 1e-12 of the largest (coefficients that stay at zero) are left out. NaN with fewer than 4 samples.
    """
    half = samples.shape[0] // 2
    if half < 2:
        return float("nan")
    chains = np.stack([samples[:half], samples[half:2 * half]])  # (2, half, k)
    within = chains.var(axis=1, ddof=1).mean(axis=0)
    between = half * chains.mean(axis=1).var(axis=0, ddof=1)
    moving = within > 1e-12 * within.max() if within.max() > 0 else np.zeros_like(within, dtype=bool)
    if not np.any(moving):
        return 1.0
    pooled = (half - 1) / half * within[moving] + between[moving] / half
    return float(np.sqrt(np.max(pooled / within[moving])))


# The parameters and attributes every sampler shares, put into each class docstring by :func:`_sampler_doc`
# (so that ``__doc__`` is a real string, and the text is written once).
_SAMPLER_DOC = """    n_samples : int
        Sweeps kept after the burn-in (before thinning); the paper uses 10,000.
    burn_in : int
        Sweeps discarded at the start; the paper uses 1,000.
    thin : int
        Keep every ``thin``-th sample (memory: n_samples / thin x d floats).
    refactor_every : int
        Recompute ``C^{-1}`` from scratch every this many sweeps.
    random_state : int, numpy Generator or None
    warm_start : bool
        Start from the last group variances of the previous fit.
    checkpoint_dir : str, path or None
        A folder where the chain saves its state every ``checkpoint_seconds`` (one ``.npz`` file named by a digest
        of the data, the prior, the chain's length, ``random_state``'s starting state and the sampler's code; removed
        when the chain ends). A later fit of the same chain (a job killed at its time limit and run again) goes on
        from the saved sweep and gives the same samples bit for bit. Needs a fixed ``random_state`` (with None no
        two chains are the same, so none is resumed). None: no checkpoints.
    checkpoint_seconds : float
        Wall-clock seconds between two saves: at most this much work is lost when the process is killed outright.
        SIGTERM (what a scheduler sends at a job's time limit, before it kills the job) makes the chain save at the
        end of the block of 250 sweeps under way and then end the process as SIGTERM would have.

    Attributes
    ----------
    coef_ : ndarray, shape (d,)
        Posterior mean (mean of the kept samples of w).
    coef_var_ : ndarray, shape (d,)
    samples_ : ndarray, shape (N, d)
        Kept samples of w.
    group_var_samples_ : ndarray, shape (N, G)
        Kept samples of the group variances lam_g.
    group_var_ : ndarray, shape (G,)
        Posterior mean of each group's prior variance tau^2 lam_g.
    n_iter_ : int
        Sweeps done (burn-in included).
    resumed_at_ : int
        The sweep a checkpoint resumed the chain at (0: the chain ran from its first sweep in this fit).
    resumed_cpu_seconds_ : float
        CPU seconds the chain had taken, in the fits before, up to the checkpoint it resumed from (0 when not
        resumed); a design loop's ``fit_seconds`` includes them, so a resumed chain's cost is its whole cost.
    rhat_ : float
        Largest split R-hat over the coefficients (the kept samples cut in two halves compared as two chains;
        coefficients that never move are left out). Near 1 when the chain has mixed.
    converged_ : bool
        ``rhat_ < 1.1``; otherwise a ConvergenceWarning says to run more sweeps.
"""


def _sampler_doc(cls):
    """Fill the ``<sampler parameters and attributes>`` line of a sampler's docstring with :data:`_SAMPLER_DOC`."""
    cls.__doc__ = cls.__doc__.replace("    <sampler parameters and attributes>\n", _SAMPLER_DOC)
    return cls


@_sampler_doc
class GroupSpikeSlabGibbs(_GroupGibbs):
    """Group spike and slab by collapsed Gibbs sampling (the paper's GSS-MCMC).

    Parameters
    ----------
    groups : array-like, shape (d,)
    p0 : float or array-like of shape (G,)
        Prior probability that a group is active.
    v0 : float
        Slab variance.
    noise_var : float
        Variance of the measurement noise.
    <sampler parameters and attributes>
    group_prob_ : ndarray, shape (G,)
        Fraction of kept samples with the group switched on.

    Examples
    --------
    >>> from adaptcs.data.synthetic import experiment_rng, make_e1_problem
    >>> p = make_e1_problem(experiment_rng("E1", 0, 0))  # 512 coefficients in 128 groups of 4, 64 rows
    >>> from adaptcs.models import GroupSpikeSlabGibbs
    >>> est = GroupSpikeSlabGibbs(p.groups, p0=4 / 128, v0=1 / 3, noise_var=1.0, n_samples=500, burn_in=100,
    ...                           random_state=0).fit(p.X, p.y)  # the paper runs 10,000 + 1,000 sweeps
    >>> est.samples_.shape, est.group_prob_.shape
    ((500, 512), (128,))
    """

    _kind = "SPIKE_SLAB"

    _parameter_constraints = {**_SAMPLER, "p0": constraints.PROBABILITY, "v0": constraints.POSITIVE}

    def __init__(self, groups=None, *, p0=0.5, v0=1.0, noise_var=1.0, n_samples=PAPER_N_SAMPLES,
                 burn_in=PAPER_BURN_IN, thin=1, refactor_every=10, random_state=None, warm_start=False,
                 checkpoint_dir=None, checkpoint_seconds=60.0):
        self.p0 = p0
        self.v0 = v0
        super().__init__(groups, noise_var, n_samples=n_samples, burn_in=burn_in, thin=thin,
                         refactor_every=refactor_every, random_state=random_state, warm_start=warm_start,
                         checkpoint_dir=checkpoint_dir, checkpoint_seconds=checkpoint_seconds)

    def _check_extra(self, n_groups: int | None = None) -> None:
        """A seed; one ``p0`` per group (or one for all), each inside (0, 1)."""
        super()._check_extra(n_groups)
        val.check_probability(self.p0, n_groups, "p0")

    def _prior(self, G, sizes):
        p0 = val.check_probability(self.p0, G, "p0")  # one per group
        v0 = float(self.v0)
        return 1.0, np.log(p0) - np.log1p(-p0), v0, np.ones(G), np.ones(G)

    def _typical_group_var(self, prior) -> float:
        return float(prior[2])  # v0

    def _initial(self, X, y, members, prior):
        """Switch on the round(p0 G) groups whose least-squares fit alone leaves the smallest residual."""
        _tau2, prior_logit, v0, _shape, _rate = prior
        p0 = 1.0 / (1.0 + np.exp(-prior_logit))
        residual = np.array([np.sum((y - X[:, m] @ np.linalg.lstsq(X[:, m], y, rcond=None)[0]) ** 2)
                             for m in members])
        lam = np.zeros(len(members))
        lam[np.argsort(residual, kind="stable")[: int(round(p0.mean() * len(members)))]] = v0
        return lam

    def _fit(self, X, y, labels, coef_group):
        """Sample as :class:`_GroupGibbs` does; ``group_prob_`` is the fraction of kept samples with the group on."""
        super()._fit(X, y, labels, coef_group)
        self.group_prob_ = np.mean(self.group_var_samples_ > 0, axis=0)


@_sampler_doc
class GroupHorseshoe(_GroupGibbs):
    """Group horseshoe by collapsed Gibbs sampling (the paper's G-HS): sqrt(lam_g) ~ half-Cauchy(0, 1).

    Parameters
    ----------
    groups : array-like, shape (d,)
    tau : float
        Global scale (prior covariance of w_g is tau^2 lam_g I); see
        :func:`adaptcs.models.matching.horseshoe_tau`.
    noise_var : float
        Variance of the measurement noise.
    <sampler parameters and attributes>

    Examples
    --------
    >>> from adaptcs.data.synthetic import experiment_rng, make_e1_problem
    >>> p = make_e1_problem(experiment_rng("E1", 0, 0))  # 512 coefficients in 128 groups of 4, 64 rows
    >>> from adaptcs.models import GroupHorseshoe
    >>> from adaptcs.models.matching import horseshoe_tau
    >>> tau = horseshoe_tau(4 / 128, 1 / 3)  # about 0.0106 on E1
    >>> est = GroupHorseshoe(p.groups, tau=tau, noise_var=1.0, n_samples=500, burn_in=100, random_state=0)
    >>> est.fit(p.X, p.y).coef_.shape
    (512,)
    """

    _kind = "HORSESHOE"

    _parameter_constraints = {**_SAMPLER, "tau": constraints.POSITIVE}

    def __init__(self, groups=None, *, tau=1.0, noise_var=1.0, n_samples=PAPER_N_SAMPLES, burn_in=PAPER_BURN_IN, thin=1,
                 refactor_every=10, random_state=None, warm_start=False,
                 checkpoint_dir=None, checkpoint_seconds=60.0):
        self.tau = tau
        super().__init__(groups, noise_var, n_samples=n_samples, burn_in=burn_in, thin=thin,
                         refactor_every=refactor_every, random_state=random_state, warm_start=warm_start,
                         checkpoint_dir=checkpoint_dir, checkpoint_seconds=checkpoint_seconds)

    def _prior(self, G, sizes):
        tau = float(self.tau)
        return tau * tau, np.zeros(G), 1.0, np.ones(G), np.ones(G)

    def _typical_group_var(self, prior) -> float:
        return 1.0  # the half-Cauchy's scale (its mean is infinite)


@_sampler_doc
class BayesianGroupLasso(_GroupGibbs):
    """Bayesian group lasso by collapsed Gibbs sampling (the paper's BG-LASSO).

    The group variance ~ Gamma(shape (d_g + 1) / 2, rate d_g gamma^2 / 2), the variance mixture that makes the
    marginal prior of w_g proportional to exp(-gamma sqrt(d_g) ||w_g||). It is sampled as tau^2 lam_g with
    tau = 1 / gamma and lam_g ~ Gamma((d_g + 1) / 2, rate d_g / 2), so ``group_var_samples_`` hold the
    dimensionless lam_g and ``group_var_`` the variances tau^2 lam_g.

    Parameters
    ----------
    groups : array-like, shape (d,)
    gamma : float
        See :func:`adaptcs.models.matching.bg_lasso_gamma`.
    noise_var : float
        Variance of the measurement noise.
    <sampler parameters and attributes>

    Examples
    --------
    >>> from adaptcs.data.synthetic import experiment_rng, make_e1_problem
    >>> p = make_e1_problem(experiment_rng("E1", 0, 0))  # 512 coefficients in 128 groups of 4, 64 rows
    >>> from adaptcs.models import BayesianGroupLasso
    >>> from adaptcs.models.matching import bg_lasso_gamma
    >>> gamma = bg_lasso_gamma(4 / 128, 1 / 3, 4)  # sqrt(120) on E1
    >>> est = BayesianGroupLasso(p.groups, gamma=gamma, noise_var=1.0, n_samples=500, burn_in=100, random_state=0)
    >>> est.fit(p.X, p.y).coef_.shape
    (512,)
    """

    _kind = "GAMMA"

    _parameter_constraints = {**_SAMPLER, "gamma": constraints.POSITIVE}

    def __init__(self, groups=None, *, gamma=1.0, noise_var=1.0, n_samples=PAPER_N_SAMPLES, burn_in=PAPER_BURN_IN,
                 thin=1, refactor_every=10, random_state=None, warm_start=False,
                 checkpoint_dir=None, checkpoint_seconds=60.0):
        self.gamma = gamma
        super().__init__(groups, noise_var, n_samples=n_samples, burn_in=burn_in, thin=thin,
                         refactor_every=refactor_every, random_state=random_state, warm_start=warm_start,
                         checkpoint_dir=checkpoint_dir, checkpoint_seconds=checkpoint_seconds)

    def _prior(self, G, sizes):
        # Parametrised with tau^2 = 1 / gamma^2 and lam_g ~ Gamma((d_g + 1) / 2, rate d_g / 2), the same prior on
        # tau^2 lam_g, so that gamma (the only quantity with units) enters through tau^2 alone.
        gamma = float(self.gamma)
        return 1.0 / gamma**2, np.zeros(G), 1.0, (sizes + 1.0) / 2.0, sizes / 2.0
