"""Cartesian k-space: its FFT conventions, and the separable wavelet that makes the posterior of lines block
diagonal (docs/mri.md).

Conventions (those of fastMRI): an image ``x`` is complex, shape (ny, nx), rows = y = the phase-encode direction;
its k-space is ``K = fftshift(fft2(ifftshift(x), norm="ortho"))``, so the DC sample is at ``(ny // 2, nx // 2)``
and the transform is unitary (noise of variance s2 per complex k-space sample is noise of variance s2 per pixel).
A line is a row ``ky`` of K (0..ny-1 in this centred order), measured at every readout position kx.

With a *fully separable* orthonormal wavelet (``C = W_y x W_x^T``), the lines S measure
``K_S U^H = A C + E'`` with ``A = F_y[S] W_y^T`` and ``U = W_x F_x^T`` unitary: column j of the coefficients is
measured by A alone (spec: MRI-LINES.md). :class:`LineScan` gives A, its real form and the column data.
"""

from __future__ import annotations

import warnings

import numpy as np
import pywt


def to_kspace(image: np.ndarray) -> np.ndarray:
    """Centred, unitary 2-D DFT: ``fftshift(fft2(ifftshift(image), norm="ortho"))``; shape (ny, nx) -> (ny, nx)."""
    return np.fft.fftshift(np.fft.fft2(np.fft.ifftshift(image), norm="ortho"))


def to_image(kspace: np.ndarray) -> np.ndarray:
    """Inverse of :func:`to_kspace`."""
    return np.fft.fftshift(np.fft.ifft2(np.fft.ifftshift(kspace), norm="ortho"))


def centre_lines(ny: int, count: int) -> np.ndarray:
    """The ``count`` rows nearest the centre of a centred k-space (ky = 0 at ``ny // 2``), shape (count,)."""
    if not 0 < count <= ny:
        raise ValueError(f"count must lie in 1..{ny}; got {count}")
    return np.sort(np.argsort(np.abs(np.arange(ny) - ny // 2), kind="stable")[:count])


def zero_filled(kspace_lines: np.ndarray, lines, shape: tuple[int, int]) -> np.ndarray:
    """The image of the measured lines with every other line zero: ``to_image`` of the k-space (shape ``shape``)
    that holds ``kspace_lines`` (m, nx) in rows ``lines`` (m,)."""
    kspace = np.zeros(shape, complex)
    kspace[np.asarray(lines, dtype=np.intp)] = kspace_lines
    return to_image(kspace)


def centred_dft(n: int) -> np.ndarray:
    """The matrix of the centred unitary 1-D DFT, shape (n, n): ``to_kspace`` along one axis is ``F @ x``."""
    eye = np.eye(n)
    return np.fft.fftshift(np.fft.fft(np.fft.ifftshift(eye, axes=0), axis=0, norm="ortho"), axes=0)


def wavelet_matrix(n: int, wavelet: str, level: int) -> tuple[np.ndarray, np.ndarray]:
    """The periodised orthonormal 1-D wavelet transform as a matrix, and the scale of every coefficient.

    Returns
    -------
    W : ndarray, shape (n, n)
        ``c = W x`` in PyWavelets' ``wavedec`` order (approximation first, then details coarse to fine);
        orthonormal (``W W^T = I``) for an orthogonal wavelet.
    scale : ndarray of int, shape (n,)
        0 for the approximation, 1..level for the details, coarse to fine.
    """
    if n % (2**level):
        raise ValueError(f"a {level}-level periodised transform needs a length divisible by {2**level}; got {n}")
    if not pywt.Wavelet(wavelet).orthogonal:
        raise ValueError(f"wavelet {wavelet!r} is not orthogonal; the line posterior needs an orthonormal basis")
    with warnings.catch_warnings():  # "level too high": periodised, the filters wrap around; still orthonormal
        warnings.simplefilter("ignore", UserWarning)
        columns = [np.concatenate(pywt.wavedec(e, wavelet, mode="periodization", level=level)) for e in np.eye(n)]
        sizes = [len(c) for c in pywt.wavedec(np.zeros(n), wavelet, mode="periodization", level=level)]
    scale = np.repeat(np.arange(level + 1), sizes)
    return np.array(columns).T, scale


class SeparableWavelet:
    """A fully separable 2-D orthonormal wavelet: 1-D along y times 1-D along x (``C = W_y x W_x^T``).

    Parameters
    ----------
    shape : (ny, nx)
    wavelet : str
        An orthogonal PyWavelets wavelet ("db4", "haar", "sym8", ...).
    level : int
        Levels of the 1-D transforms (the same along both axes).
    """

    def __init__(self, shape: tuple[int, int], wavelet: str = "db4", level: int = 4):
        self.shape = (int(shape[0]), int(shape[1]))
        self.wavelet, self.level = wavelet, int(level)
        self.Wy, self.scale_y = wavelet_matrix(self.shape[0], wavelet, self.level)
        self.Wx, self.scale_x = wavelet_matrix(self.shape[1], wavelet, self.level)

    def forward(self, image: np.ndarray) -> np.ndarray:
        """Coefficients ``W_y x W_x^T``, shape (ny, nx)."""
        return self.Wy @ image @ self.Wx.T

    def inverse(self, coef: np.ndarray) -> np.ndarray:
        """Image ``W_y^T C W_x``, shape (ny, nx)."""
        return self.Wy.T @ coef @ self.Wx

    def scale_pair(self) -> np.ndarray:
        """Class of every coefficient by its pair of scales, ``s_y * (level + 1) + s_x``, shape (ny, nx)."""
        return self.scale_y[:, None] * (self.level + 1) + self.scale_x[None, :]


class LineScan:
    """The lines ``ky`` of a Cartesian scan in coefficient space: ``z_j = A c_j + e_j`` for every column j.

    Parameters
    ----------
    basis : SeparableWavelet
    lines : array-like of int, shape (m,)
        Measured rows of the centred k-space, each at most once.
    """

    def __init__(self, basis: SeparableWavelet, lines):
        self.basis = basis
        ny, nx = basis.shape
        self.lines = np.asarray(lines, dtype=np.intp)
        if self.lines.ndim != 1 or np.any((self.lines < 0) | (self.lines >= ny)):
            raise ValueError(f"lines must be row indices of the centred k-space, 0..{ny - 1}")
        if np.unique(self.lines).shape[0] != self.lines.shape[0]:
            raise ValueError("a line is measured at most once")
        self.Fy_Wt = centred_dft(ny) @ basis.Wy.T  # all candidate rows, (ny, ny) complex
        self.A = self.Fy_Wt[self.lines]  # (m, ny)
        self._UH = np.conj(centred_dft(nx)) @ basis.Wx.T  # U^H, (nx, nx)

    def real_block(self) -> np.ndarray:
        """A in real form, ``[[Re A, -Im A], [Im A, Re A]]``, shape (2m, 2ny): acts on ``[Re c_j; Im c_j]``."""
        return real_form(self.A)

    def column_data(self, kspace_lines: np.ndarray) -> np.ndarray:
        """``Z = K_S U^H``, shape (m, nx): column j measures coefficient column j. ``kspace_lines`` (m, nx) are the
        measured lines in the order of ``lines``."""
        kspace_lines = np.asarray(kspace_lines)
        if kspace_lines.shape != (self.lines.shape[0], self.basis.shape[1]):
            raise ValueError(f"kspace_lines must have shape ({self.lines.shape[0]}, {self.basis.shape[1]}) (one row "
                             f"per measured line); got {kspace_lines.shape}")
        return kspace_lines @ self._UH


def real_form(A: np.ndarray) -> np.ndarray:
    """``[[Re A, -Im A], [Im A, Re A]]`` for complex A (m, k): shape (2m, 2k)."""
    return np.block([[A.real, -A.imag], [A.imag, A.real]])


def stack_columns(Z: np.ndarray) -> np.ndarray:
    """Complex columns (p, nx) as the real vector ``[Re z_0; Im z_0; Re z_1; ...]``, shape (2 p nx,)."""
    return np.concatenate([Z.real, Z.imag], axis=0).T.ravel()


def unstack_columns(u: np.ndarray, p: int) -> np.ndarray:
    """Inverse of :func:`stack_columns`: shape (2 p nx,) -> complex (p, nx)."""
    blocks = u.reshape(-1, 2 * p).T
    return blocks[:p] + 1j * blocks[p:]
