"""Cartesian k-space lines as candidates, fitted in a separable wavelet (:mod:`adaptcs.bases.separable`, docs/mri.md).

A candidate is a phase encode ``ky`` (a row of the centred k-space), measured at every readout position: ``2 nx``
real values. The model's coefficients are the wavelet coefficient columns stacked as
:func:`adaptcs.bases.separable.stack_columns` orders them, where a line's rows are block diagonal (``I_nx (x) B``).
"""

from __future__ import annotations

import numpy as np
from scipy import sparse

from adaptcs.bases.separable import (
    SeparableWavelet,
    centred_dft,
    real_form,
    stack_columns,
    to_kspace,
    unstack_columns,
)
from adaptcs.models._blocks import SharedBlockRows
from adaptcs.operators.base import MeasurementOperator


class KSpaceLines(MeasurementOperator):
    """The phase-encode lines of a ``(ny, nx)`` Cartesian k-space (single coil).

    Parameters
    ----------
    basis : SeparableWavelet
    n_first : int, optional
        Centre lines every acquisition measures first; default ``max(1, ny // 16)``.

    Notes
    -----
    :meth:`gains` asks the line model (:class:`adaptcs.models.line_spike_slab.LineSpikeSlab`,
    :class:`adaptcs.models.line_phase.PhaseLineGaussian`) for its exact block-diagonal gains; the generic formula of
    :class:`MeasurementOperator` on :meth:`rows` gives the same numbers (tests/test_operators.py) at O(ny) times the
    cost.
    """

    def __init__(self, basis: SeparableWavelet, n_first: int | None = None):
        self.basis = basis
        ny, nx = basis.shape
        self.n_candidates, self.n_coef, self.values_per_candidate = ny, 2 * ny * nx, 2 * nx
        self.n_first = max(1, ny // 16) if n_first is None else int(n_first)
        if not 1 <= self.n_first <= ny:
            raise ValueError(f"n_first must lie in 1..{ny}; got {n_first}")
        self._Fy_Wt = centred_dft(ny) @ basis.Wy.T  # every line's row on a coefficient column, (ny, ny) complex
        self._UH = np.conj(centred_dft(nx)) @ basis.Wx.T

    def coarse_to_fine(self) -> np.ndarray:
        """Lines by distance from the k-space centre (ky = 0 at ``ny // 2``), nearer first; ties to the lower."""
        ny = self.n_candidates
        return np.argsort(np.abs(np.arange(ny) - ny // 2), kind="stable")

    def record(self, signal) -> np.ndarray:
        """The k-space of a complex image, ``to_kspace(x)``, shape (ny, nx): line ky is row ky."""
        image = np.asarray(signal)
        if image.shape != self.basis.shape:
            raise ValueError(f"the image must have shape {self.basis.shape}; got {image.shape}")
        return to_kspace(image)

    def read(self, recording, chosen) -> np.ndarray:
        """The chosen lines of a centred k-space (complex, shape (len(chosen), nx))."""
        recording = np.asarray(recording)
        if recording.shape != self.basis.shape:
            raise ValueError(f"the k-space must have shape {self.basis.shape}; got {recording.shape}")
        return recording[self.check_chosen(chosen)]

    def rows(self, chosen, *, as_sparse: bool = False):
        """``I_nx (x) real_form(F_y[S] W_y^T)``: shape (2 nx len(S), 2 ny nx), acting on the stacked columns."""
        block = real_form(self._Fy_Wt[self.check_chosen(chosen)])
        nx = self.basis.shape[1]
        if as_sparse:
            return sparse.kron(sparse.eye_array(nx), sparse.csr_array(block), format="csr")
        return SharedBlockRows(block, nx).dense()

    def model_values(self, chosen, values) -> np.ndarray:
        """The lines' k-space values rotated into the coefficient columns (``K_S U^H``) and stacked."""
        chosen = self.check_chosen(chosen)
        values = np.asarray(values)
        if values.shape != (chosen.shape[0], self.basis.shape[1]):
            raise ValueError(f"values must have shape ({chosen.shape[0]}, {self.basis.shape[1]}) (one row per "
                             f"line); got {values.shape}")
        return stack_columns(values @ self._UH)

    def coefficients(self, signal) -> np.ndarray:
        """The stacked wavelet coefficient columns of a complex image, shape (2 ny nx,)."""
        return stack_columns(self.basis.forward(np.asarray(signal)))

    def gains(self, estimator, candidates=None) -> np.ndarray:
        """The line model's exact gains (``estimator.line_gains``); the generic formula if it has ``cov_matvec``
        instead (an estimator fitted on :meth:`rows`)."""
        if hasattr(estimator, "line_gains"):
            return estimator.line_gains(None if candidates is None else self.check_chosen(candidates, unique=False))
        return super().gains(estimator, candidates)


class CoilKSpaceLines(KSpaceLines):
    """The phase-encode lines of a receive array's k-space, ``(coils, ny, nx)``: a candidate is a line read by every
    coil, ``2 nx coils`` real values.

    Parameters
    ----------
    basis : SeparableWavelet
    sensitivities : array-like of complex, shape (coils, ny, nx)
        The coils' sensitivities (what :meth:`record` applies; the coil line model,
        :class:`adaptcs.models.line_coils.CoilPhaseLineGaussian`, takes the same).
    n_first : int, optional
        Centre lines every acquisition measures first; default ``max(1, ny // 16)``.

    Notes
    -----
    :meth:`read` gives a line's values as (coils, nx) per line, shape (m, coils, nx). :meth:`gains` asks the coil
    line model for its exact gains. :meth:`rows` are exact but built by linearity from one synthesis per
    coefficient (O(ny nx) FFTs of the whole image): for small images only (tests, a generic estimator).
    """

    def __init__(self, basis: SeparableWavelet, sensitivities, n_first: int | None = None):
        from adaptcs.models._coil_moments import check_sensitivities

        super().__init__(basis, n_first)
        self.sensitivities = check_sensitivities(sensitivities, basis.shape)
        self.n_coils = int(self.sensitivities.shape[0])
        self.values_per_candidate = 2 * basis.shape[1] * self.n_coils

    def record(self, signal) -> np.ndarray:
        """The k-space of every coil of a complex image, ``to_kspace(s_c x)``, shape (coils, ny, nx)."""
        image = np.asarray(signal)
        if image.shape != self.basis.shape:
            raise ValueError(f"the image must have shape {self.basis.shape}; got {image.shape}")
        return np.array([to_kspace(s * image) for s in self.sensitivities])

    def read(self, recording, chosen) -> np.ndarray:
        """The chosen lines of every coil of a centred multi-coil k-space (coils, ny, nx): shape (m, coils, nx)."""
        recording = np.asarray(recording)
        if recording.shape != (self.n_coils, *self.basis.shape):
            raise ValueError(f"the k-space must have shape {(self.n_coils, *self.basis.shape)} (coils, ny, nx); got "
                             f"{recording.shape}")
        return np.moveaxis(recording[:, self.check_chosen(chosen)], 0, 1)

    def rows(self, chosen, *, as_sparse: bool = False):
        """The rows of the chosen lines (every coil) on the stacked separable coefficients: shape
        (2 m coils nx, 2 ny nx), real parts of the values as :meth:`read` orders them, then their imaginary parts
        (:meth:`model_values`). Dense (``as_sparse`` is ignored: they are not sparse)."""
        chosen = self.check_chosen(chosen)
        ny, nx = self.basis.shape
        out = np.empty((2 * chosen.shape[0] * self.n_coils * nx, self.n_coef))
        unit = np.zeros(self.n_coef)
        for i in range(self.n_coef):
            unit[i] = 1.0
            values = self.read(self.record(self.basis.inverse(unstack_columns(unit, ny))), chosen).ravel()
            out[:, i] = np.concatenate([values.real, values.imag])
            unit[i] = 0.0
        return out

    def model_values(self, chosen, values) -> np.ndarray:
        """The lines' values (m, coils, nx) as :meth:`rows` measure them: real parts, then imaginary parts."""
        chosen = self.check_chosen(chosen)
        values = np.asarray(values)
        if values.shape != (chosen.shape[0], self.n_coils, self.basis.shape[1]):
            raise ValueError(f"values must have shape ({chosen.shape[0]}, {self.n_coils}, {self.basis.shape[1]}) "
                             f"(lines, coils, readout); got {values.shape}")
        flat = values.ravel()
        return np.concatenate([flat.real, flat.imag])
