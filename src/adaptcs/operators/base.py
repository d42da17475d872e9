"""The measurement-operator interface: what an instrument can measure next, in the model's coordinates.

An operator is a finite set of *candidates* (basis images, rows of a pattern set, k-space lines), each a block of
``values_per_candidate`` real rows acting on the model's ``n_coef`` coefficients. It says four things, and the
acquisition loops (:func:`adaptcs.design.basis_scan.replay_recording`, :class:`adaptcs.design.SequentialDesigner`'s
pool, :class:`adaptcs.design.CandidateDesigner`) ask nothing else of it:

- what a known signal's complete recording is (:meth:`record`; a recorded one is read from a file instead) and
  what the chosen candidates' values in it are (:meth:`read`), in the instrument's own layout;
- the rows of chosen candidates on the model's coefficients (:meth:`rows`) and their values as those rows measure
  them (:meth:`model_values`), so ``rows(S) @ coefficients(x) == model_values(S, read(record(x), S))``;
- the exact information gain of each candidate under a fitted posterior (:meth:`gains`, in nats; the default works
  for any estimator with ``cov_matvec``; an operator whose model has structure overrides it);
- the order a fixed scan takes, coarse to fine (:meth:`coarse_to_fine`), and how many of its first candidates
  every acquisition measures before it chooses (``n_first``).
"""

from __future__ import annotations

import abc

import numpy as np
from scipy import sparse


class MeasurementOperator(abc.ABC):
    """A finite set of candidate measurements (abstract).

    Attributes
    ----------
    n_candidates : int
        Candidates, numbered 0..n_candidates - 1.
    n_coef : int
        Coefficients of the model the rows act on.
    values_per_candidate : int
        Real values (rows) one candidate measures: 1 for a pattern, ``2 nx`` for a complex k-space line.
    n_first : int
        How many candidates of :meth:`coarse_to_fine` every acquisition measures before it chooses (a wavelet
        scan's approximation, the centre lines of k-space); 0 if none.
    """

    n_candidates: int
    n_coef: int
    values_per_candidate: int = 1
    n_first: int = 0

    # -- what an instrument returns --------------------------------------------------------------------------
    @abc.abstractmethod
    def record(self, signal) -> np.ndarray:
        """The complete noise-free recording of a known signal, one entry (or row) per candidate, in the layout
        :meth:`read` takes (for simulations and tests)."""

    def read(self, recording, chosen) -> np.ndarray:
        """The values of the ``chosen`` candidates in a complete recording (recorded, or :meth:`record`), in the
        order of ``chosen``: ``recording[chosen]``, shape (len(chosen), ...)."""
        return np.asarray(recording)[self.check_chosen(chosen)]

    # -- what the model sees ---------------------------------------------------------------------------------
    @abc.abstractmethod
    def rows(self, chosen, *, as_sparse: bool = False):
        """The rows of the ``chosen`` candidates on the model's coefficients, ``values_per_candidate`` per
        candidate in the order of ``chosen``: shape (len(chosen) * values_per_candidate, n_coef), an ndarray or,
        with ``as_sparse``, a scipy.sparse array where that is smaller. The rows of one candidate are
        ``rows([k])``; with several candidates they may interleave (k-space lines stack coefficient columns)."""

    def model_values(self, chosen, values) -> np.ndarray:
        """What the :meth:`rows` of ``chosen`` measure, from the values :meth:`read` gives for them: shape
        (len(chosen) * values_per_candidate,). Default: the values as floats, flattened."""
        return np.asarray(values, dtype=float).ravel()

    def coefficients(self, signal) -> np.ndarray:
        """The model's coefficients of a signal, shape (n_coef,). Default: the signal itself."""
        return np.asarray(signal, dtype=float).ravel()

    # -- choosing ----------------------------------------------------------------------------------------------
    def coarse_to_fine(self) -> np.ndarray:
        """Every candidate in the order of a fixed coarse-to-fine scan, shape (n_candidates,). Default: by
        number."""
        return np.arange(self.n_candidates)

    def first(self) -> np.ndarray:
        """The ``n_first`` candidates every acquisition measures before it chooses, coarsest first."""
        return self.coarse_to_fine()[:self.n_first].copy()

    def gains(self, estimator, candidates=None) -> np.ndarray:
        """Exact information gain (nats) of measuring each candidate next, under ``estimator``'s fitted
        posterior: ``1/2 log det(I + R V R^T / s2)``, R the candidate's rows, V the posterior covariance, s2 the
        noise variance per value.

        This default needs ``estimator.cov_matvec`` and its noise variance (``noise_var_`` or the parameter
        ``noise_var``); O(k r) covariance products for k candidates of r rows.

        Parameters
        ----------
        estimator : fitted estimator
        candidates : array-like of int, optional
            Default: every candidate.

        Returns
        -------
        ndarray, shape (k,)
        """
        candidates = np.arange(self.n_candidates) if candidates is None else self.check_chosen(candidates,
                                                                                               unique=False)
        noise = noise_variance(estimator)
        out = np.empty(candidates.shape[0])
        if self.values_per_candidate > 1:  # one candidate at a time: rows() may interleave several candidates
            for i, c in enumerate(candidates):
                R = _dense(self.rows([c]))
                block = R @ np.asarray(estimator.cov_matvec(R.T)) / noise
                out[i] = 0.5 * np.linalg.slogdet(np.eye(R.shape[0]) + block)[1]
            return out
        for start in range(0, candidates.shape[0], 256):  # blocks of candidates: bounded memory
            R = _dense(self.rows(candidates[start:start + 256]))
            RV = np.asarray(estimator.cov_matvec(R.T)).T  # (rows, n_coef)
            out[start:start + R.shape[0]] = 0.5 * np.log1p(np.einsum("ij,ij->i", RV, R) / noise)
        return out

    # -- checks ----------------------------------------------------------------------------------------------
    def check_chosen(self, chosen, *, unique: bool = True) -> np.ndarray:
        """``chosen`` as a 1-D array of candidate numbers in range (each at most once unless ``unique`` is
        False); ValueError otherwise."""
        chosen = np.asarray(chosen)
        if chosen.ndim != 1 or (chosen.size and not np.issubdtype(chosen.dtype, np.integer)):
            raise ValueError(f"{type(self).__name__}: candidates must be a 1-D array of integers; got dtype "
                             f"{chosen.dtype}, shape {chosen.shape}")
        chosen = chosen.astype(np.intp)
        if np.any((chosen < 0) | (chosen >= self.n_candidates)):
            raise ValueError(f"{type(self).__name__}: candidates must lie in 0..{self.n_candidates - 1}")
        if unique and np.unique(chosen).shape[0] != chosen.shape[0]:
            raise ValueError(f"{type(self).__name__}: a candidate is measured at most once")
        return chosen


class PatternOperator(MeasurementOperator):
    """An operator whose candidates are single real patterns on the signal's samples (pixels), measured as
    ``pattern . x`` (a single-pixel camera, a pool of rows), possibly fitted in a sparsifying ``basis``.

    Subclasses give :meth:`patterns`; the rows, values and coefficients follow. The designer's ``pool`` takes such
    an operator (:class:`adaptcs.design.SequentialDesigner`).

    Parameters
    ----------
    basis : :class:`adaptcs.bases.images.Basis`, optional
        Fit the signal's coefficients in this basis (rows ``S^T p``,
        :meth:`~adaptcs.bases.images.Basis.row_coefficients`); None: fit the samples themselves.
    """

    def __init__(self, n_candidates: int, n_samples: int, basis=None):
        if basis is not None and basis.d != n_samples:
            raise ValueError(f"the basis has {basis.d} coefficients; the patterns have {n_samples} samples")
        self.n_candidates, self.n_coef, self.basis = int(n_candidates), int(n_samples), basis

    @abc.abstractmethod
    def patterns(self, chosen) -> np.ndarray:
        """The patterns of the ``chosen`` candidates on the signal's samples, shape (len(chosen), n_coef)."""

    def record(self, signal) -> np.ndarray:
        """``pattern . x`` for every candidate, shape (n_candidates,) (in blocks: never all patterns at once)."""
        signal = np.asarray(signal, dtype=float).ravel()
        if signal.shape != (self.n_coef,):
            raise ValueError(f"signal must have {self.n_coef} samples; got shape {signal.shape}")
        out = np.empty(self.n_candidates)
        for start in range(0, self.n_candidates, 512):
            stop = min(start + 512, self.n_candidates)
            out[start:stop] = self.patterns(np.arange(start, stop)) @ signal
        return out

    def rows(self, chosen, *, as_sparse: bool = False):
        patterns = self.patterns(self.check_chosen(chosen, unique=False))
        rows = patterns if self.basis is None else self.basis.row_coefficients(patterns)
        return sparse.csr_array(rows) if as_sparse else rows

    def coefficients(self, signal) -> np.ndarray:
        signal = np.asarray(signal, dtype=float).ravel()
        return signal if self.basis is None else self.basis.analyze(signal)


def _dense(rows) -> np.ndarray:
    return rows.toarray() if sparse.issparse(rows) else np.asarray(rows, dtype=float)


def noise_variance(estimator) -> float:
    """The noise variance per measured value of a fitted estimator: ``noise_var_`` if it reports one, else its
    parameter ``noise_var``; ValueError if it has neither."""
    noise = getattr(estimator, "noise_var_", None)
    if noise is None and hasattr(estimator, "get_params"):
        noise = estimator.get_params().get("noise_var")
    if noise is None or not np.isfinite(noise) or noise <= 0:
        raise ValueError(f"information gains need the noise variance; {type(estimator).__name__} reports neither "
                         "a positive noise_var_ nor a noise_var parameter")
    return float(noise)
