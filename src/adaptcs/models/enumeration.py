"""Exact posterior of the group spike-and-slab model by enumerating all 2^G group patterns.

Ground truth for small problems (G <= about 14): for every pattern z, with S the coefficients of the active
groups, ``p(y | z) = N(y | 0, s2 I + v0 X_S X_S^T)`` and ``E[w_S | y, z] = v0 X_S^T (s2 I + v0 X_S X_S^T)^{-1} y``.
Used to test the EP engine and the Gibbs sampler; cost O(2^G n^3).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from scipy.special import logsumexp

from adaptcs import _validation as val

MAX_GROUPS = 16


@dataclass
class ExactPosterior:
    """Exact posterior summaries.

    Attributes
    ----------
    mean : ndarray, shape (d,)
        ``E[w | y]``.
    var : ndarray, shape (d,)
        ``Var[w_j | y]``.
    group_prob : ndarray, shape (G,)
        ``P(z_g = 1 | y)`` in sorted label order.
    log_evidence : float
        ``log p(y | X)`` in nats.
    """

    mean: np.ndarray
    var: np.ndarray
    group_prob: np.ndarray
    log_evidence: float


def exact_group_spike_slab(X, y, groups, p0, v0, noise_var: float) -> ExactPosterior:
    """Enumerate every group pattern and return the exact posterior.

    Parameters
    ----------
    X : array-like, shape (n, d)
    y : array-like, shape (n,)
    groups : array-like, shape (d,)
        Group labels (mapped to 0..G-1 in sorted order).
    p0 : float or array-like of shape (G,)
        Prior probability of each group being active.
    v0 : float or array-like of shape (d,)
        Slab variance, one for all or one per coefficient (a prior per scale).
    noise_var : float
        Noise variance.
    """
    X, y = val.check_design(X, y)
    n, d = X.shape
    labels, coef_group = val.check_groups(groups, d)
    G = labels.shape[0]
    if G > MAX_GROUPS:
        raise ValueError(f"groups: exact enumeration of 2^{G} patterns is too expensive (at most {MAX_GROUPS})")
    p0 = val.check_probability(p0, G, "p0")
    v0 = np.broadcast_to(np.asarray(v0, dtype=np.float64), (d,))
    if not np.all(np.isfinite(v0) & (v0 > 0.0)):
        raise ValueError("v0 must be finite and > 0 (one value or one per coefficient)")
    s2 = val.check_positive_scalar(noise_var, "noise_var")

    patterns = np.array(list(itertools.product([0, 1], repeat=G)), dtype=bool)  # (2^G, G)
    log_weights = np.empty(len(patterns))
    means = np.zeros((len(patterns), d))
    second = np.zeros((len(patterns), d))  # E[w_j^2 | y, z]
    for k, z in enumerate(patterns):
        active = z[coef_group]
        XS = X[:, active]
        v0_S = v0[active]
        cov_y = s2 * np.eye(n) + (XS * v0_S) @ XS.T
        chol = np.linalg.cholesky(cov_y)
        alpha = np.linalg.solve(chol.T, np.linalg.solve(chol, y))
        log_lik = -0.5 * (n * np.log(2 * np.pi) + 2 * np.sum(np.log(np.diag(chol))) + y @ alpha)
        log_prior = np.sum(np.where(z, np.log(p0), np.log1p(-p0)))
        log_weights[k] = log_lik + log_prior
        if active.any():
            mean_S = v0_S * (XS.T @ alpha)
            # Var[w_S | y, z] = D - D X_S^T cov_y^{-1} X_S D, D = diag(v0_S) (diagonal only)
            half = np.linalg.solve(chol, XS)
            var_S = v0_S - v0_S**2 * np.sum(half * half, axis=0)
            means[k, active] = mean_S
            second[k, active] = var_S + mean_S**2
    log_evidence = float(logsumexp(log_weights))
    post_weights = np.exp(log_weights - log_evidence)
    mean = post_weights @ means
    return ExactPosterior(mean=mean, var=post_weights @ second - mean**2,
                          group_prob=post_weights @ patterns.astype(float), log_evidence=log_evidence)
