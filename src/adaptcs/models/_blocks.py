"""Exact Gaussian posterior when the rows are block diagonal: ``X = diag(A_1, ..., A_B)``, or ``I_B (x) A``.

Cartesian k-space lines give this structure (docs/mri.md): with a separable wavelet every column of wavelet
coefficients is measured by the same matrix ``A`` (shape (r, b)), independently of the others
(:class:`SharedBlockRows`); with the image's phase known, every column of pixels by its own matrix ``A_q``
(:class:`BlockRows`). Coefficients are laid out block after block (coefficient ``q * b + i`` is entry i of block q)
and so are the measurements (row ``q * r + k``). The posterior is a product over the blocks; each block's is the
Woodbury form of :mod:`adaptcs.models._gaussian` with that block's prior variances, and all blocks are factorised
at once (stacked BLAS calls, no Python loop over blocks):

    K_q = s2 I_r + A_q L_q A_q^T = C_q C_q^T,   G_q = C_q^{-1} A_q L_q   (r x b),   V_q = L_q - G_q^T G_q.

Cost per factorisation O(B r^2 b); no d x d or n x n matrix is formed (d = B b, n = B r). The posterior objects
here have the attributes and methods of :class:`adaptcs.models._gaussian.WoodburyPosterior`, so EP runs on them
unchanged (:class:`adaptcs.models._ep.EPProblem` takes a :class:`SharedBlockRows` as its X).
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import lapack


class BlockRows:
    """The rows ``X = diag(A_1, ..., A_B)``: B blocks, block q measured by its own matrix ``A_q`` (all of shape (r, b)).

    Parameters
    ----------
    blocks : ndarray, shape (B, r, b)
        The matrices ``A_q`` (float64, finite).

    Attributes
    ----------
    stacked : ndarray, shape (B, r, b)
        The blocks, as every stacked product takes them.
    n_blocks : int
    shape : tuple of int
        ``(B r, B b)``, the shape of X.
    """

    def __init__(self, blocks: np.ndarray):
        self.stacked = np.ascontiguousarray(blocks, dtype=np.float64)
        if self.stacked.ndim != 3 or not np.all(np.isfinite(self.stacked)):
            raise ValueError("the blocks must be a finite 3-D array (B, r, b)")
        self.n_blocks = self.stacked.shape[0]
        r, b = self.stacked.shape[1:]
        self.shape = (self.n_blocks * r, self.n_blocks * b)

    def matvec(self, coef: np.ndarray) -> np.ndarray:
        """``X coef``: coef shape (d,), returns shape (n,)."""
        return np.einsum("qrb,qb->qr", self.stacked, coef.reshape(self.n_blocks, -1)).ravel()

    def rmatvec(self, values: np.ndarray) -> np.ndarray:
        """``X^T values``: values shape (n,), returns shape (d,)."""
        return np.einsum("qrb,qr->qb", self.stacked, values.reshape(self.n_blocks, -1)).ravel()

    def column_power(self) -> np.ndarray:
        """``mean_i X_ij^2`` for every column j, shape (d,)."""
        return np.sum(self.stacked * self.stacked, axis=1).ravel() / self.shape[0]

    def dense(self) -> np.ndarray:
        """X itself, shape (n, d): for tests and small problems only."""
        r, b = self.stacked.shape[1:]
        X = np.zeros(self.shape)
        for q in range(self.n_blocks):
            X[q * r:(q + 1) * r, q * b:(q + 1) * b] = self.stacked[q]
        return X

    def block_power(self) -> np.ndarray:
        """``A_q * A_q`` elementwise, shape (B, r, b) (or (1, r, b) for one shared block, which broadcasts)."""
        return self.stacked * self.stacked


class SharedBlockRows(BlockRows):
    """The rows ``X = I_B (x) A``: B blocks, each measured by the same matrix A (stored once).

    Parameters
    ----------
    block : ndarray, shape (r, b)
        The shared block A (float64, finite).
    n_blocks : int
        B.

    Attributes
    ----------
    shape : tuple of int
        ``(B r, B b)``, the shape of X.
    """

    def __init__(self, block: np.ndarray, n_blocks: int):  # not BlockRows.__init__: A is stored once
        self.block = np.ascontiguousarray(block, dtype=np.float64)
        if self.block.ndim != 2 or not np.all(np.isfinite(self.block)):
            raise ValueError("the shared block must be a finite 2-D array")
        self.n_blocks = int(n_blocks)
        if self.n_blocks < 1:
            raise ValueError(f"n_blocks must be at least 1; got {n_blocks}")
        r, b = self.block.shape
        self.shape = (self.n_blocks * r, self.n_blocks * b)
        self.stacked = self.block[None]  # (1, r, b): broadcast over the blocks

    def matvec(self, coef: np.ndarray) -> np.ndarray:
        """``X coef``: coef shape (d,), returns shape (n,)."""
        return (coef.reshape(self.n_blocks, -1) @ self.block.T).ravel()

    def rmatvec(self, values: np.ndarray) -> np.ndarray:
        """``X^T values``: values shape (n,), returns shape (d,)."""
        return (values.reshape(self.n_blocks, -1) @ self.block).ravel()

    def column_power(self) -> np.ndarray:
        """``mean_i X_ij^2`` for every column j, shape (d,)."""
        return np.tile(np.sum(self.block * self.block, axis=0) / self.shape[0], self.n_blocks)

    def dense(self) -> np.ndarray:
        """X itself, shape (n, d): for tests and small problems only."""
        return np.kron(np.eye(self.n_blocks), self.block)

    def rows_of_block(self, index: np.ndarray) -> SharedBlockRows:
        """The same blocks measured only by the rows ``index`` of A."""
        return SharedBlockRows(self.block[index], self.n_blocks)


class BlockGaussianModel:
    """The data part of the model for rows :class:`BlockRows` (or :class:`SharedBlockRows`): the same interface as
    :class:`adaptcs.models._gaussian.LinearGaussianModel` (the Woodbury form, always).

    Parameters
    ----------
    rows : BlockRows
    y : ndarray, shape (n,)
        Measurements, block after block.
    noise_var : float
        Noise variance ``s2`` of every measurement (> 0).
    """

    use_woodbury = True
    selection = None

    def __init__(self, rows: BlockRows, y: np.ndarray, noise_var: float):
        self.rows = rows
        self.y = np.asarray(y, dtype=np.float64)
        self.noise_var = float(noise_var)
        self.n, self.d = rows.shape
        if self.y.shape != (self.n,):
            raise ValueError(f"y must have shape ({self.n},); got {self.y.shape}")
        self.Xty = rows.rmatvec(self.y) / self.noise_var
        self.yty = float(self.y @ self.y)

    def fitted(self, coef: np.ndarray) -> np.ndarray:
        """``X coef``, shape (n,)."""
        return self.rows.matvec(coef)

    def signal_to_noise(self, prior_var: np.ndarray) -> float:
        """``max_i sum_j X_ij^2 prior_var_j / s2`` (see :meth:`LinearGaussianModel.signal_to_noise`)."""
        power = self.rows.block_power()  # (1 or B, r, b)
        with np.errstate(over="ignore"):
            return float(np.max(np.einsum("qrb,qb->qr", power, prior_var.reshape(self.rows.n_blocks, -1)))
                         / self.noise_var)

    def posterior(self, prior_var: np.ndarray, shift: np.ndarray) -> BlockPosterior:
        """Posterior for the diagonal term with variances ``prior_var`` (d,) and natural means ``shift`` (d,)."""
        return BlockPosterior(self, prior_var, shift)


def _factorise(stacked: np.ndarray, block_prior_var: np.ndarray, s2: float):
    """Every block's ``log|K_q|`` (shape (B,)), ``|C_q^{-1}|_F^2`` (shape (B,)) and ``G_q = C_q^{-1} A_q L_q``
    (shape (B, r, b)), where ``C_q`` is the lower Cholesky factor of ``K_q = s2 I + A_q L_q A_q^T``; ``stacked``
    (B or 1, r, b), ``block_prior_var`` (B, b). O(B r^2 b). Only ``G_q`` is kept whole: the evidence needs no more
    of ``C_q`` than the two sums, and a partial update copies what is kept."""
    r = stacked.shape[1]
    sqrt_l = np.sqrt(block_prior_var)
    scaled = stacked * sqrt_l[:, None, :]  # A_q L_q^{1/2}, (B, r, b)
    K = np.matmul(scaled, scaled.transpose(0, 2, 1))
    K[:, np.arange(r), np.arange(r)] += s2
    chol = np.linalg.cholesky(K)  # LinAlgError where some K_q is not positive definite
    # C_q^{-1} then one stacked product: about twice as fast as a stacked triangular solve (measured at
    # B = 256, r = 128, b = 512) and as accurate here, K_q >= s2 I keeping C_q well conditioned. The inverse by
    # LAPACK's triangular dtrtri, block by block: np.linalg.inv takes C_q as a general matrix (LU, 6 times the
    # flops); the whole factorisation costs 0.8 of what it did with it (benchmarks/bench_blocks.py)
    chol_inv = np.empty_like(chol)
    for q in range(chol.shape[0]):
        chol_inv[q], info = lapack.dtrtri(chol[q], lower=1)
        if info:
            raise np.linalg.LinAlgError(f"block {q}: the Cholesky factor is singular")
    log_det = 2.0 * np.sum(np.log(np.diagonal(chol, axis1=1, axis2=2)), axis=1)
    inv_sq = np.einsum("qij,qij->q", chol_inv, chol_inv)
    return log_det, inv_sq, np.matmul(chol_inv, scaled) * sqrt_l[:, None, :]


class BlockPosterior:
    """``N(m, V)`` for block-diagonal rows, V block diagonal (B blocks of b x b, never formed).

    Attributes
    ----------
    mean, var, var_reduction : ndarray, shape (d,)
        As in :class:`adaptcs.models._gaussian.WoodburyPosterior`.
    block_prior_var : ndarray, shape (B, b)
        The prior (site) variances ``L_q`` of every block.
    factor : ndarray, shape (B, r, b)
        ``G_q = C_q^{-1} A_q L_q`` of every block: ``V_q = L_q - G_q^T G_q``, with ``C_q`` the lower Cholesky factor
        of ``K_q = s2 I + A_q L_q A_q^T``.
    """

    def __init__(self, model: BlockGaussianModel, prior_var: np.ndarray, shift: np.ndarray):
        rows = model.rows
        B, b = rows.n_blocks, rows.stacked.shape[2]
        self.prior_var = prior_var
        self.block_prior_var = prior_var.reshape(B, b)
        self._log_det_k, self._inv_sq, self.factor = _factorise(rows.stacked, self.block_prior_var,
                                                                model.noise_var)
        self.var_reduction = np.einsum("qrb,qrb->qb", self.factor, self.factor).ravel()
        self.var = prior_var - self.var_reduction
        self._shape, self._noise_var, self._n = (B, b), model.noise_var, model.n
        self.eta = model.Xty + shift
        self.mean = self.matvec(self.eta)

    def updated(self, model: BlockGaussianModel, prior_var: np.ndarray, shift: np.ndarray,
                blocks: np.ndarray, *, supersede: bool = False) -> BlockPosterior:
        """The posterior at new prior variances and shifts that differ from this one's only in ``blocks`` (bool,
        shape (B,)): those blocks are factorised again, O(|blocks| r^2 b), the others' are copied (this posterior
        is left as it was).

        With ``supersede`` (an iteration that moves on from this posterior) the new posterior takes over this one's
        factor ``G`` (the largest array, B r b) and changes it in place in ``blocks`` only, keeping their old values
        for :meth:`undo`: this posterior's factor is then the new one's until undone."""
        B, b = self._shape
        new = object.__new__(BlockPosterior)
        new._shape, new._noise_var, new._n = self._shape, self._noise_var, self._n
        new.prior_var = prior_var
        new.block_prior_var = prior_var.reshape(B, b)
        stacked = model.rows.stacked
        stacked = stacked[blocks] if stacked.shape[0] == B else stacked  # per-block rows, or one shared block
        log_det, inv_sq, factor = _factorise(stacked, new.block_prior_var[blocks], self._noise_var)
        new._log_det_k, new._inv_sq = self._log_det_k.copy(), self._inv_sq.copy()
        if supersede:
            new.factor, new._undo = self.factor, (blocks, self.factor[blocks])
        else:
            new.factor = self.factor.copy()
        new._log_det_k[blocks], new._inv_sq[blocks], new.factor[blocks] = log_det, inv_sq, factor
        var_reduction = self.var_reduction.reshape(B, b).copy()
        var_reduction[blocks] = np.einsum("qrb,qrb->qb", factor, factor)
        new.var_reduction = var_reduction.ravel()
        new.var = prior_var - new.var_reduction
        new.eta = model.Xty + shift
        eta = new.eta.reshape(B, b)[blocks]
        mean = self.mean.reshape(B, b).copy()
        mean[blocks] = new.block_prior_var[blocks] * eta - np.einsum("qrb,qr->qb", factor,
                                                                      np.einsum("qrb,qb->qr", factor, eta))
        new.mean = mean.ravel()
        return new

    def undo(self) -> None:
        """Give back the factor this posterior took over by ``updated(..., supersede=True)`` as it was (the
        posterior it superseded is whole again; this one must not be used after)."""
        blocks, old = self._undo
        self.factor[blocks] = old
        self.factor = None

    def matvec(self, v: np.ndarray) -> np.ndarray:
        """``V v`` for v of shape (d,) or (d, k); O(n b k)."""
        B, b = self._shape
        vb = v.reshape(B, b, -1)
        Gt = self.factor.transpose(0, 2, 1)
        out = self.block_prior_var[:, :, None] * vb - np.matmul(Gt, np.matmul(self.factor, vb))
        return out.reshape(v.shape)

    def quad_rows(self, Z: np.ndarray) -> np.ndarray:
        """``z^T V z`` for each row z of Z (k, d); returns shape (k,)."""
        B, b = self._shape
        Zb = Z.reshape(Z.shape[0], B, b).transpose(1, 2, 0)  # (B, b, k)
        GZ = np.matmul(self.factor, Zb)  # (B, r, k)
        return (Z * Z) @ self.prior_var - np.einsum("qrk,qrk->k", GZ, GZ)

    def block_bilinear(self, R: np.ndarray, S: np.ndarray) -> np.ndarray:
        """``r_k^T V_q s_k`` of every block q for paired rows ``r_k``, ``s_k`` (rows of R and S, shape (k, b)) that act
        inside one block; returns shape (B, k). O(B r b k)."""
        GR = np.matmul(self.factor, R.T)  # (B, r, k)
        GS = GR if S is R else np.matmul(self.factor, S.T)
        return self.block_prior_var @ (R * S).T - np.einsum("qrk,qrk->qk", GR, GS)

    def trace_data(self) -> float:
        """``tr(X V X^T) = sum_q (s2 r - s2^2 |C_q^{-1}|_F^2)``."""
        s2 = self._noise_var
        return float(s2 * self._n - s2 * s2 * np.sum(self._inv_sq))

    def log_det_marginal(self) -> float:
        """``log|K| = sum_q log|K_q|``."""
        return float(np.sum(self._log_det_k))

    def log_det(self) -> float:
        """``log|V|`` by Sylvester's identity (-inf if some prior variance is 0)."""
        if np.any(self.prior_var == 0.0):
            return -np.inf
        return float(np.sum(np.log(self.prior_var)) - self.log_det_marginal() + self._n * np.log(self._noise_var))
