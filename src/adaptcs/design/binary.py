"""Rows in {-a, +a}^d that make x^T V x large: designs a digital micromirror device can show.

A micromirror array shows 0/1 patterns; the difference of two complementary patterns is a +-1 row, so a
single-pixel camera measures ``x^T w`` for x in {-1, +1}^d (times an amplitude a). Maximising x^T V x over
the cube is NP-hard (it contains max-cut), and the continuous optimum ``lambda_max ||x||^2 = lambda_max d``
is an upper bound. Here: candidates are the signs of the leading eigenvector and randomized roundings
``sign(U g)``, g ~ N(0, diag(lambda)) over the top few eigenvectors U (Goemans-Williamson style), and the best
candidates are improved by greedy single-bit flips. Flipping bit i changes x^T V x by
``4 (V_ii - x_i (V x)_i)``, so all d gains cost O(d) from ``V x`` and the diagonal of V; a flip then
updates ``V x`` with one column of V (one operator product). A batch conditions each row on the earlier
ones (``V <- V - V x x^T V / (s2 + x^T V x)``), as if they had been measured, so its rows differ.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from adaptcs.design.eigen import top_eigenvectors

N_ROUNDINGS = 16  # randomized roundings per row
N_IMPROVED = 3  # candidates (best first) that are improved by bit flips
ROUNDING_RANK = 4  # eigenvectors the roundings mix
EIGEN_TOL = 1e-4  # only the signs of the eigenvectors matter


@dataclass
class BinaryRows:
    """Rows in {-1, +1}^d and how good they are.

    Attributes
    ----------
    rows : ndarray of float, shape (k, d)
        Entries -1 or +1.
    scores : ndarray, shape (k,)
        ``x^T V x`` of each row under the covariance conditioned on the batch's earlier rows.
    bounds : ndarray, shape (k,)
        The continuous bound ``lambda_max d`` under the same covariance (no +-1 row can exceed it).
    flips : ndarray of int, shape (k,)
        Bits flipped by the greedy improvement of the chosen row.
    """

    rows: np.ndarray
    scores: np.ndarray
    bounds: np.ndarray
    flips: np.ndarray


class _Conditioned:
    """``V - sum_j u_j u_j^T / c_j``: the covariance after measuring some rows (u_j = V_{j-1} x_j,
    c_j = s2 + x_j^T V_{j-1} x_j), as an operator with its diagonal."""

    def __init__(self, matvec: Callable[[np.ndarray], np.ndarray], diag: np.ndarray):
        self.base = matvec
        self.diag = np.asarray(diag, dtype=float).copy()
        self.U: list[np.ndarray] = []
        self.c: list[float] = []

    def __call__(self, B: np.ndarray) -> np.ndarray:
        out = np.asarray(self.base(B), dtype=float)
        for u, c in zip(self.U, self.c, strict=True):
            out = out - np.multiply.outer(u, u @ B / c)  # B of shape (d,) or (d, p)
        return out

    def condition(self, x: np.ndarray, noise_var: float) -> None:
        u = self(x)
        c = noise_var + float(x @ u)
        self.U.append(u)
        self.c.append(c)
        self.diag = self.diag - u * u / c


def _signs(v: np.ndarray) -> np.ndarray:
    return np.where(v >= 0.0, 1.0, -1.0)


def improve_by_flips(op, diag: np.ndarray, x: np.ndarray, max_flips: int) -> tuple[np.ndarray, float, int]:
    """Greedy best-improvement bit flips of ``x`` until no flip raises ``x^T V x`` (a 1-flip local optimum).

    Parameters
    ----------
    op : callable
        ``v -> V v`` for v of shape (d,).
    diag : ndarray, shape (d,)
        The diagonal of V.
    x : ndarray, shape (d,)
        Start, entries +-1.
    max_flips : int
        Cap on the flips.

    Returns
    -------
    (x, score, flips)
        The improved row, its ``x^T V x`` (recomputed, not accumulated) and the number of flips.
    """
    x = x.copy()
    Vx = op(x)
    flips = 0
    while flips < max_flips:
        gain = diag - x * Vx  # a quarter of the change of x^T V x when the bit flips
        i = int(np.argmax(gain))
        if gain[i] <= 1e-12 * max(float(x @ Vx), np.finfo(float).tiny):
            break
        column = op(np.eye(1, x.shape[0], i)[0])
        Vx -= 2.0 * x[i] * column
        x[i] = -x[i]
        flips += 1
    Vx = op(x)
    return x, float(x @ Vx), flips


def binary_rows(matvec: Callable[[np.ndarray], np.ndarray], diag: np.ndarray, k: int, noise_var: float, *,
                rng: np.random.Generator, max_flips: int | None = None) -> BinaryRows:
    """``k`` rows in {-1, +1}^d with large ``x^T V x``, each conditioned on the earlier ones.

    Parameters
    ----------
    matvec : callable
        ``V @ B`` for B of shape (d,) or (d, p) (the posterior covariance, ``estimator.cov_matvec``).
    diag : ndarray, shape (d,)
        The diagonal of V (the posterior marginal variances, ``estimator.coef_var_``).
    k : int
        Rows wanted.
    noise_var : float
        Noise variance, for conditioning a batch's later rows on its earlier ones.
    rng : numpy.random.Generator
        Eigenvector starts and the roundings.
    max_flips : int, optional
        Cap on greedy flips per candidate (default d).
    """
    diag = np.asarray(diag, dtype=float)
    d = diag.shape[0]
    max_flips = d if max_flips is None else max_flips
    op = _Conditioned(matvec, diag)
    rows, scores, bounds, flips = [], [], [], []
    for _ in range(k):
        rank = min(ROUNDING_RANK, d)
        eig = top_eigenvectors(op, d, rank, rng=rng, tol=EIGEN_TOL)
        gaussians = rng.standard_normal((rank, N_ROUNDINGS)) * np.sqrt(eig.values)[:, None]
        candidates = np.column_stack([_signs(eig.vectors[:, 0]), _signs(eig.vectors @ gaussians)])
        quick = np.einsum("ij,ij->j", candidates, op(candidates))
        best = (None, -np.inf, 0)
        for j in np.argsort(-quick, kind="stable")[:N_IMPROVED]:
            x, score, n_flips = improve_by_flips(op, op.diag, candidates[:, j], max_flips)
            if score > best[1]:
                best = (x, score, n_flips)
        x, score, n_flips = best
        rows.append(x)
        scores.append(score)
        bounds.append(float(eig.values[0]) * d)
        flips.append(n_flips)
        op.condition(x, noise_var)
    return BinaryRows(rows=np.asarray(rows), scores=np.asarray(scores), bounds=np.asarray(bounds),
                      flips=np.asarray(flips, dtype=np.int64))
