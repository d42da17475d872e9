"""Weak priors on GSS-EP's learned hyper-parameters: type-II MAP instead of type-II ML (docs/learning.md, "Weak
priors on the learned values").

Each prior is a normal density in the coordinate learning works in (:meth:`Hyper.phi`): ``log s2``, ``log v0`` of
every slab class and the level (prior log-odds) of every prior class of groups, centred on a value with standard
deviation ``log(spread)`` (default: a factor of 20 is one standard deviation). A prior in the log (not an inverse
gamma, whose density falls like ``exp(-c / s2)`` below its centre) is what keeps it weak when the centre is far off:
measured in docs/learning.md, an inverse gamma worth 4 pseudo-measurements centred on a design loop's early,
noise-only estimate held the noise variance 20 times too high to the end.

The EM-like updates of :mod:`._ep_learning` become posterior-mode updates: each maximises its EM term plus its
prior, a concave function of one coordinate, e.g. for the noise variance, ``t = log s2``,
``-n t / 2 - E exp(-t) / 2 - (t - t_c)^2 / (2 sigma^2)`` with ``E = |y - X m|^2 + tr(X V X^T)``, solved by
:func:`scipy.optimize.brentq` on its decreasing derivative. With a tree prior the transition probabilities get no
prior (only the noise and slab variances do).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import brentq
from scipy.special import expit

SPREAD = 20.0  # one standard deviation of a prior is this factor (in odds for p0); docs/learning.md: how chosen


@dataclass(frozen=True)
class Hyperprior:
    """Weak priors on the hyper-parameters GSS-EP learns (type-II MAP); a centre left None puts no prior there.

    Parameters
    ----------
    noise_var : float, optional
        Centre of the noise variance's prior, in the units of y squared (an instrument's known noise, or the value
        learned at the end of a design loop's random start).
    p0 : float or array-like of shape (K_p,), optional
        Centre of every prior class's mean prior probability (one value for all, or one per class).
    v0 : float or array-like of shape (K_v,), optional
        Centre of every slab class's variance, in the units of the coefficients squared.
    spread : float
        One standard deviation of every prior, as a factor (> 1): ``log s2``, ``log v0`` and the prior log-odds are
        normal with standard deviation ``log(spread)`` around the centre's.
    """

    noise_var: float | None = None
    p0: float | np.ndarray | None = None
    v0: float | np.ndarray | None = None
    spread: float = SPREAD

    def __post_init__(self):
        if isinstance(self.spread, bool) or not isinstance(self.spread, numbers.Real) \
                or not 1.0 < self.spread < np.inf:
            raise ValueError(f"Hyperprior: spread must be a finite factor > 1; got {self.spread!r}")
        for name in ("noise_var", "v0"):
            centre = getattr(self, name)
            if centre is not None:
                centre = np.asarray(centre, dtype=float)
                if centre.ndim > 1 or not np.all(np.isfinite(centre) & (centre > 0)):
                    raise ValueError(f"Hyperprior: {name} must be positive and finite (one value or one per class); "
                                     f"got {getattr(self, name)!r}")
        if self.noise_var is not None and np.ndim(self.noise_var) != 0:
            raise ValueError(f"Hyperprior: noise_var must be one value; got {self.noise_var!r}")
        if self.p0 is not None:
            p0 = np.asarray(self.p0, dtype=float)
            if p0.ndim > 1 or not np.all((p0 > 0) & (p0 < 1)):
                raise ValueError(f"Hyperprior: p0 must lie inside (0, 1) (one value or one per class); got {self.p0!r}")

    @property
    def precision(self) -> float:
        """``1 / log(spread)^2``: the priors' precision in their coordinates."""
        return 1.0 / np.log(self.spread) ** 2

    def scaled(self, scale) -> Hyperprior:
        """On the unit-size data of ``scale`` (:class:`adaptcs.models._scaling.DataScale`), like :class:`Hyper`."""
        return replace(self, noise_var=None if self.noise_var is None else scale.scaled_noise(float(self.noise_var)),
                       v0=None if self.v0 is None else scale.scaled_variance(np.asarray(self.v0, float), "v0"))

    def centre(self, problem, n_phi: int) -> tuple[np.ndarray, np.ndarray]:
        """The centre in :meth:`Hyper.phi`'s coordinates and which coordinates have a prior, shapes (n_phi,).

        The level of class k is centred where the class's mean prior probability is ``p0[k]``; with a tree no
        level has a prior."""
        centre, has = np.zeros(n_phi), np.zeros(n_phi, dtype=bool)
        k = problem.n_levels
        if self.p0 is not None and problem.tree is None and k > 0:
            p0 = np.broadcast_to(np.asarray(self.p0, float), (k,))
            centre[:k], has[:k] = [problem.level_for(float(p), j) for j, p in enumerate(p0)], True
        if self.v0 is not None:
            centre[k:-1], has[k:-1] = np.log(np.broadcast_to(np.asarray(self.v0, float), (n_phi - k - 1,))), True
        if self.noise_var is not None:
            centre[-1], has[-1] = np.log(self.noise_var), True
        return centre, has

    def log_density(self, problem, hyper) -> float:
        """The log prior density of ``hyper`` in :meth:`Hyper.phi`'s coordinates, up to a constant."""
        phi = hyper.phi()
        centre, has = self.centre(problem, phi.shape[0])
        return float(-0.5 * self.precision * np.sum((phi - centre)[has] ** 2))

    def gradient(self, problem, hyper) -> np.ndarray:
        """Gradient of :meth:`log_density` in :meth:`Hyper.phi`'s coordinates, shape (K_p + K_v + 1,)."""
        phi = hyper.phi()
        centre, has = self.centre(problem, phi.shape[0])
        return np.where(has, -self.precision * (phi - centre), 0.0)

    # posterior-mode (MAP-EM) updates -------------------------------------------------------------------------------

    def scale_update(self, weight: float, moment: float, log_centre: float | None) -> float:
        """The mode of ``-weight t / 2 - moment exp(-t) / 2 - precision (t - log_centre)^2 / 2`` in ``t``, as
        ``exp(t)``: the noise variance's M-step (``weight`` = n rows, ``moment`` = the expected squared residual) or
        a slab variance's (``weight`` = sum of slab responsibilities, ``moment`` = their weighted second moments).
        Without a centre, ``moment / weight`` (ML); NaN where that is undefined."""
        if log_centre is None:
            with np.errstate(divide="ignore", invalid="ignore"):
                return float(np.divide(moment, weight)) if weight > 0 else np.nan
        precision = self.precision

        def slope(t):
            return -0.5 * weight + 0.5 * moment * np.exp(-t) - precision * (t - log_centre)

        return float(np.exp(_decreasing_root(slope, log_centre)))

    def level_update(self, prob_sum: float, logits_at, log_odds_centre: float | None) -> float:
        """The mode in the level ``l`` of ``sum_g [q_g log p_g + (1 - q_g) log(1 - p_g)] - precision (l - c)^2 / 2``,
        ``p_g = expit(l + offset_g)``: a prior class's M-step from its groups' posterior probabilities (their sum
        ``prob_sum``) and the groups' prior logits at a level (``logits_at(l)``)."""
        precision = self.precision

        def slope(level):
            return prob_sum - float(np.sum(expit(logits_at(level)))) - precision * (level - log_odds_centre)

        return _decreasing_root(slope, log_odds_centre)


def _decreasing_root(slope, start: float) -> float:
    """The root of a strictly decreasing function, bracketed by doubling steps from ``start``."""
    step, low, high = 1.0, start, start
    while slope(low) < 0.0:
        low -= step
        step *= 2.0
    step = 1.0
    while slope(high) > 0.0:
        high += step
        step *= 2.0
    return low if low == high else float(brentq(slope, low, high, xtol=1e-12))


def log_prior(hyperprior: Hyperprior | None, problem, hyper) -> float:
    """:meth:`Hyperprior.log_density`, 0 without a prior (type-II ML)."""
    return 0.0 if hyperprior is None else hyperprior.log_density(problem, hyper)
