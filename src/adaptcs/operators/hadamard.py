"""2-D Walsh-Hadamard patterns, the patterns most single-pixel cameras show, in sequency order.

This operator is the example of a new one: one file, and the replay, the designer's pool and the experiments take
it as they take basis images (docs/architecture.md, "How to add a measurement operator").
"""

from __future__ import annotations

import numpy as np

from adaptcs.operators.base import PatternOperator


def walsh_matrix(n: int) -> np.ndarray:
    """The n x n orthonormal Walsh matrix in sequency order (row k changes sign k times), n a power of two.

    Row k is row ``bitreverse(gray(k))`` of Sylvester's Hadamard matrix, divided by ``sqrt(n)``.
    """
    if n < 1 or n & (n - 1):
        raise ValueError(f"Walsh patterns need a power-of-two side; got {n}")
    bits = n.bit_length() - 1
    k = np.arange(n)
    gray = k ^ (k >> 1)
    natural = np.zeros(n, dtype=np.int64)
    for b in range(bits):  # bit reversal of the Gray code
        natural |= ((gray >> b) & 1) << (bits - 1 - b)
    parity = np.zeros((n, n), dtype=np.int64)
    both = natural[:, None] & k[None, :]
    for b in range(bits):
        parity ^= (both >> b) & 1
    return (1.0 - 2.0 * parity) / np.sqrt(n)


class HadamardPatterns(PatternOperator):
    """The ``side^2`` separable Walsh-Hadamard patterns ``w_u w_v^T`` of a ``side x side`` image, unit norm.

    Candidates are numbered coarse to fine: by ``max(u, v)``, then ``u + v``, then ``u`` (the square of the lowest
    ``s x s`` sequencies is the first ``s^2`` candidates). Patterns are formed a few at a time (never all
    ``d x d``); the complete recording is a fast separable transform, O(d side).

    Parameters
    ----------
    side : int
        Image side, a power of two.
    basis : :class:`adaptcs.bases.images.Basis`, optional
        Fit the image's coefficients in this basis (a wavelet: the patterns are dense rows on them).
    n_first : int
        Candidates every acquisition measures first (default 16: the lowest 4 x 4 sequencies).
    """

    def __init__(self, side: int, basis=None, n_first: int = 16):
        self.side = int(side)
        self.walsh = walsh_matrix(self.side)
        super().__init__(self.side * self.side, self.side * self.side, basis)
        u, v = np.divmod(np.arange(self.n_candidates), self.side)
        order = np.lexsort((u, u + v, np.maximum(u, v)))
        self.u, self.v = u[order], v[order]
        if not 0 <= n_first <= self.n_candidates:
            raise ValueError(f"n_first must lie in 0..{self.n_candidates}; got {n_first}")
        self.n_first = int(n_first)

    def patterns(self, chosen) -> np.ndarray:
        chosen = self.check_chosen(chosen, unique=False)
        outer = self.walsh[self.u[chosen], :, None] * self.walsh[self.v[chosen], None, :]
        return outer.reshape(chosen.shape[0], self.n_coef)

    def record(self, signal) -> np.ndarray:
        """Every pattern's value, ``(W X W^T)[u, v]`` in candidate order, shape (side^2,)."""
        image = np.asarray(signal, dtype=float).reshape(self.side, self.side)
        return (self.walsh @ image @ self.walsh.T)[self.u, self.v]
