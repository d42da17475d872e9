"""Explicit rows as candidates: a pool of patterns given as an array (the designer's ``pool``, a lab's candidate
rows)."""

from __future__ import annotations

import numpy as np

from adaptcs import _validation as val
from adaptcs.operators.base import PatternOperator


class RowPool(PatternOperator):
    """The rows of an array, each a candidate measured as ``row . x``.

    Parameters
    ----------
    patterns : array-like, shape (m, d)
        One candidate per row, on the signal's samples (finite).
    basis : :class:`adaptcs.bases.images.Basis`, optional
        Fit the signal's coefficients in this basis.
    """

    def __init__(self, patterns, basis=None):
        patterns = val.check_rows(patterns, np.shape(patterns)[-1], "patterns")
        super().__init__(patterns.shape[0], patterns.shape[1], basis)
        self._patterns = patterns

    def patterns(self, chosen) -> np.ndarray:
        return self._patterns[self.check_chosen(chosen, unique=False)]

    def record(self, signal) -> np.ndarray:
        return self._patterns @ np.asarray(signal, dtype=float).ravel()
