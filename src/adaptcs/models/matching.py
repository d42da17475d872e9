"""Matching the priors of different methods to the group spike and slab (docs/model.md section 5).

The paper gives every method the same prior information: the Bayesian group lasso's gamma makes each
coefficient's prior variance equal the spike and slab's ``p0 v0``; the group horseshoe's tau makes the
distance between the 1% and 99% quantiles of each coefficient's prior marginal equal the spike and slab's.
"""

from __future__ import annotations

import numpy as np
from scipy.integrate import quad
from scipy.optimize import brentq
from scipy.stats import norm

from adaptcs import _validation as val


def bg_lasso_gamma(p0: float, v0: float, group_size: int) -> float:
    """gamma with E[lam_g] = (d_g + 1) / (d_g gamma^2) equal to p0 v0 (E1: sqrt(120))."""
    p0 = float(val.check_probability(p0, 1, "p0")[0])
    v0 = val.check_positive_scalar(v0, "v0")
    d_g = val.check_count(group_size, "group_size")
    return float(np.sqrt((d_g + 1) / (d_g * p0 * v0)))


def spike_slab_quantile(p0: float, v0: float, level: float = 0.99) -> float:
    """The ``level`` quantile (> 0.5) of the marginal (1 - p0) delta_0 + p0 N(0, v0) of one coefficient."""
    p0 = float(val.check_probability(p0, 1, "p0")[0])
    tail = 1.0 - level
    if p0 <= tail:
        raise ValueError(f"p0 ({p0}) must exceed 1 - level ({tail:g}): otherwise the quantile is 0")
    # P(w > q) = p0 (1 - Phi(q / sqrt(v0))) = tail
    return float(np.sqrt(v0) * norm.isf(tail / p0))


def horseshoe_quantile(level: float = 0.99) -> float:
    """The ``level`` quantile of w ~ N(0, lam), sqrt(lam) ~ half-Cauchy(0, 1) (unit global scale)."""

    def upper_tail(x):
        # P(w > x) = int_0^inf (1 - Phi(x / t)) 2 / (pi (1 + t^2)) dt
        return quad(lambda t: norm.sf(x / t) * 2.0 / (np.pi * (1.0 + t * t)), 0.0, np.inf, limit=200)[0]

    tail = 1.0 - level
    return float(brentq(lambda x: upper_tail(x) - tail, 1e-6, 1e6, xtol=1e-12, rtol=1e-12))


def horseshoe_tau(p0: float, v0: float, level: float = 0.99) -> float:
    """tau whose group horseshoe has the same distance between the (1 - level) and level quantiles of each
    coefficient's prior marginal as the spike and slab (both marginals are symmetric; E1: about 0.0106)."""
    return spike_slab_quantile(p0, v0, level) / horseshoe_quantile(level)
