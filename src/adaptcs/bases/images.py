"""Sparsifying bases for square images: 2-D wavelets (PyWavelets, periodised) and the 2-D DCT (scipy).

An image ``x`` (``side x side`` pixels, flattened row-major to ``d = side^2`` values) has coefficients
``c = Psi x``; ``Psi`` is orthonormal, so ``x = Psi^T c`` and norms are kept. Measurements ``y = X x`` are then
``y = (X Psi^T) c``: the estimator works on ``c`` with the effective rows ``X Psi^T`` (row ``i`` is
``Psi x_i``, :meth:`Basis.row_coefficients`), and a row designed for ``c`` is measured in pixels as ``Psi^T a``
(:meth:`Basis.row_patterns`). Neither ``Psi`` nor any ``d x d`` matrix is formed: each costs O(d log d) per row.

Biorthogonal wavelets (:data:`BIORTHOGONAL`: ``bior2.2`` is Le Gall's 5/3, ``bior4.4`` the CDF 9/7 of JPEG 2000),
which single-pixel cameras use, are not orthonormal: the analysis ``c = W x`` and the synthesis ``x = S c`` are
inverse to each other but not transposes. A camera shows the analysis functions (rows of ``W``: pattern
``W^T e_j`` measures ``c_j``) and the image is the synthesis of the coefficients. So rows and images take different
maps: :meth:`Basis.analyze` and :meth:`Basis.synthesize` for images (``W``, ``S``), :meth:`Basis.row_coefficients`
(``S^T``: what a pixel row measures, as a row on ``c``) and :meth:`Basis.row_patterns` (``W^T``: the pixel row that
measures a row on ``c``) for rows; ``W^T`` and ``S^T`` are the transforms of the dual wavelet (``rbio``), exactly.
For an orthonormal basis the row maps are the image maps.

Coefficient order (what the estimator and the groups see) runs from coarse to fine. Wavelets: the
approximation subband, then the detail subbands of the coarsest level, ..., the finest; within a level the
horizontal, vertical and diagonal details of each position follow one another (position by position, row-major).
DCT: frequencies ``(u, v)`` by ``u + v``, then by ``u``.

Groups (:meth:`Basis.groups`): 2 x 2 blocks of neighbouring coefficients within one subband (for a wavelet
detail subband, the four children of one parent coefficient at the coarser scale; a 1 x 1 subband is a group
of one). For the DCT, 2 x 2 blocks of the frequency grid.
"""

from __future__ import annotations

import abc
import warnings

import numpy as np

ORTHONORMAL_WAVELETS = ("haar", "db2", "db4")
BIORTHOGONAL = ("bior2.2", "bior4.4")  # Le Gall 5/3 and CDF 9/7 (PyWavelets' names)
WAVELETS = (*ORTHONORMAL_WAVELETS, *BIORTHOGONAL)
BASES = (*WAVELETS, "dct")
COARSEST_SIDE = 4  # default wavelet depth: the approximation subband is 4 x 4


class Basis(abc.ABC):
    """A basis of ``side x side`` images, orthonormal unless :attr:`orthonormal` says not (abstract: use
    :func:`make_basis`).

    Attributes
    ----------
    name : str
    side : int
    d : int
        ``side ** 2``, pixels per image and coefficients per image.
    """

    name: str
    side: int

    @property
    def d(self) -> int:
        """Pixels per image, and coefficients per image."""
        return self.side * self.side

    def analyze(self, images) -> np.ndarray:
        """Coefficients ``Psi x`` of each image (rows: :meth:`row_coefficients`, the same for an orthonormal basis).

        Parameters
        ----------
        images : array-like, shape (k, d) or (d,)
            Flattened images (row-major).

        Returns
        -------
        ndarray, same shape
        """
        x, single = self._check(images)
        c = self._analyze(x.reshape(-1, self.side, self.side))
        return c[0] if single else c

    def synthesize(self, coefficients) -> np.ndarray:
        """Images ``Psi^T c`` of coefficient vectors (rows: :meth:`row_patterns`, the same for an orthonormal basis).

        Parameters
        ----------
        coefficients : array-like, shape (k, d) or (d,)

        Returns
        -------
        ndarray, same shape (flattened images)
        """
        c, single = self._check(coefficients)
        x = self._synthesize(c).reshape(c.shape[0], self.d)
        return x[0] if single else x

    @property
    def orthonormal(self) -> bool:
        """Whether ``synthesize`` is the transpose of ``analyze`` (then rows and images take the same maps)."""
        return True

    def row_coefficients(self, rows) -> np.ndarray:
        """What pixel rows measure, as rows on the coefficients: ``r . x = (S^T r) . c`` (``S^T r``; for an
        orthonormal basis :meth:`analyze`).

        Parameters
        ----------
        rows : array-like, shape (k, d) or (d,)
            Pixel patterns (row-major).

        Returns
        -------
        ndarray, same shape
        """
        return self.analyze(rows) if self.orthonormal else self._rows(rows, "analyze")

    def row_patterns(self, coefficient_rows) -> np.ndarray:
        """The pixel rows that measure rows on the coefficients: ``(W^T a) . x = a . c``; row ``e_j`` gives the
        basis image (analysis function) that measures ``c_j``. For an orthonormal basis :meth:`synthesize`.

        Parameters
        ----------
        coefficient_rows : array-like, shape (k, d) or (d,)

        Returns
        -------
        ndarray, same shape
        """
        return self.synthesize(coefficient_rows) if self.orthonormal else self._rows(coefficient_rows, "synthesize")

    def _rows(self, rows, how: str) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} is orthonormal: rows take the image maps")

    def _check(self, values) -> tuple[np.ndarray, bool]:
        values = np.asarray(values, dtype=float)
        single = values.ndim == 1
        values = np.atleast_2d(values)
        if values.ndim != 2 or values.shape[1] != self.d:
            raise ValueError(f"{self.name} basis of {self.side} x {self.side} images: rows must have {self.d} "
                             f"values; got shape {np.shape(values)}")
        return values, single

    @abc.abstractmethod
    def scales(self) -> np.ndarray:
        """Scale of every coefficient, shape (d,): 0 for the coarsest, growing towards fine detail."""

    @abc.abstractmethod
    def groups(self) -> np.ndarray:
        """Group label of every coefficient, shape (d,): 2 x 2 blocks within each subband."""

    def coarse_to_fine(self, k: int, row_norm: float | None = None) -> np.ndarray:
        """Pixel rows that measure the first ``k`` coefficients (coarse scales first), each ``row_norm`` (default
        ``sqrt(d)``) times that coefficient's pattern (:meth:`row_patterns`; of norm ``row_norm`` for an
        orthonormal basis); shape (k, d)."""
        if not 0 <= k <= self.d:
            raise ValueError(f"k must be in 0..{self.d}; got {k}")
        norm = np.sqrt(self.d) if row_norm is None else float(row_norm)
        return self.row_patterns(np.eye(k, self.d) * norm) if k else np.zeros((0, self.d))

    @abc.abstractmethod
    def _analyze(self, images: np.ndarray) -> np.ndarray:
        """Coefficients of images of shape (k, side, side): shape (k, d)."""

    @abc.abstractmethod
    def _synthesize(self, coefficients: np.ndarray) -> np.ndarray:
        """Images of coefficients of shape (k, d): shape (k, side, side) or (k, d)."""


class WaveletBasis(Basis):
    """2-D wavelet transform with periodic extension (PyWavelets' ``periodization`` mode): orthonormal for the
    orthogonal wavelets on ``side x side`` images with ``side`` a power of two, a biorthogonal pair of analysis and
    synthesis for ``bior`` wavelets (see the module docstring).

    Parameters
    ----------
    side : int
        Image side, a power of two.
    wavelet : {"haar", "db2", "db4", "bior2.2", "bior4.4"}
    level : int, optional
        Decomposition depth; default such that the approximation subband is 4 x 4 (``log2(side / 4)``).
    """

    def __init__(self, side: int, wavelet: str = "haar", level: int | None = None):
        if wavelet not in WAVELETS:
            raise ValueError(f"wavelet must be one of {WAVELETS}; got {wavelet!r}")
        if not isinstance(side, (int, np.integer)) or side < 2 or side & (side - 1):
            raise ValueError(f"side must be a power of two >= 2 (periodised wavelets); got {side!r}")
        max_level = int(np.log2(side))
        if level is None:
            level = max(1, int(np.log2(side / COARSEST_SIDE))) if side >= 2 * COARSEST_SIDE else 1
        if not 1 <= level <= max_level:
            raise ValueError(f"level must be in 1..{max_level} for side {side}; got {level}")
        self.name, self.side, self.wavelet, self.level = wavelet, int(side), wavelet, int(level)
        # (level, side) of each detail level, coarsest first; the approximation has the coarsest side
        self._sides = [side >> (level - j) for j in range(level)]

    @property
    def orthonormal(self) -> bool:
        """Whether the wavelet is orthogonal (haar, db2, db4); ``bior`` wavelets are biorthogonal."""
        return self.wavelet in ORTHONORMAL_WAVELETS

    def _rows(self, rows, how: str) -> np.ndarray:
        # the transposes of a biorthogonal pair are the transforms of its dual wavelet (rbio: the filters swapped)
        dual = "rbio" + self.wavelet[len("bior"):]
        values, single = self._check(rows)
        if how == "analyze":  # S^T
            out = self._analyze(values.reshape(-1, self.side, self.side), dual)
        else:  # W^T
            out = self._synthesize(values, dual).reshape(values.shape[0], self.d)
        return out[0] if single else out

    def groups(self) -> np.ndarray:
        """Group label of every coefficient, shape (d,): 2 x 2 blocks of one orientation of one level (the
        approximation's 2 x 2 blocks too)."""
        # interleaved order: coefficients 3p..3p+2 are h, v, d at position p; a group is a 2 x 2 block of one
        # orientation, so label by (block, orientation)
        labels = [self._block_labels(self._sides[0])[0]]
        offset = int(labels[0].max()) + 1
        for s in self._sides:
            blocks, n_blocks = self._block_labels(s)
            level = (3 * blocks[:, None] + np.arange(3)[None, :]).ravel()
            labels.append(offset + level)
            offset += 3 * n_blocks
        return np.concatenate(labels).astype(np.int64)

    @staticmethod
    def _block_labels(s: int) -> tuple[np.ndarray, int]:
        rows, cols = np.divmod(np.arange(s * s), s)
        if s == 1:
            return np.zeros(1, dtype=np.int64), 1
        half = s // 2
        return (rows // 2) * half + cols // 2, half * half

    def scales(self) -> np.ndarray:
        """Scale of every coefficient, shape (d,): 0 for the approximation, j for the j-th detail level."""
        return np.concatenate([np.zeros(self._sides[0] ** 2, dtype=np.int64)]
                              + [np.full(3 * s * s, j) for j, s in enumerate(self._sides, start=1)])

    def parents(self) -> np.ndarray:
        """Parent of every coefficient in the wavelet quadtree, shape (d,): the coefficient of the same orientation
        at the next coarser level whose support covers it (position ``(r // 2, c // 2)``); -1 for the
        approximation and the coarsest details. The four children of one parent are one group (:meth:`groups`)."""
        parents = np.full(self.d, -1, dtype=np.int64)
        starts = np.cumsum([self._sides[0] ** 2] + [3 * s * s for s in self._sides])
        for level in range(1, len(self._sides)):
            s, half = self._sides[level], self._sides[level - 1]
            rows, cols = np.divmod(np.arange(s * s), s)
            parent_position = (rows // 2) * half + cols // 2
            for o in range(3):
                parents[starts[level] + 3 * np.arange(s * s) + o] = starts[level - 1] + 3 * parent_position + o
        return parents

    def pattern_light(self, image) -> np.ndarray:
        """The light each basis image collects from ``image`` when shown as its positive and negative parts:
        ``|a_j| . x`` for every coefficient ``j`` (``a_j`` the basis image, ``|.|`` entrywise), shape (d,).

        A photon-counting single-pixel camera's value of basis image ``j`` has variance proportional to this
        (:func:`adaptcs.design.basis_scan.photon_basis_scan`). Every basis image of one subband is its first one
        shifted periodically by the subband's stride, so each subband is one circular correlation (FFT):
        O(L d log d), no d x d matrix.

        Parameters
        ----------
        image : array-like, shape (d,)
            Intensities, flattened row-major.
        """
        x = np.asarray(image, dtype=float)
        if x.shape != (self.d,):
            raise ValueError(f"image must have {self.d} values; got shape {x.shape}")
        spectrum = np.fft.rfft2(x.reshape(self.side, self.side))
        light = np.empty(self.d)
        starts = np.cumsum([0, self._sides[0] ** 2] + [3 * s * s for s in self._sides])
        subbands = [(starts[0], self._sides[0], 1)] + [(starts[k + 1], s, 3) for k, s in enumerate(self._sides)]
        for start, s, orientations in subbands:
            stride = self.side // s
            for o in range(orientations):
                unit = np.zeros(self.d)
                unit[start + o] = 1.0
                template = np.abs(self.row_patterns(unit)).reshape(self.side, self.side)
                # sum_p |T|(p - shift) x(p) for every shift: the circular cross-correlation of x with |T|
                correlation = np.fft.irfft2(spectrum * np.conj(np.fft.rfft2(template)), s=(self.side, self.side))
                light[start + o:start + orientations * s * s:orientations] = correlation[::stride, ::stride].ravel()
        return light

    def _analyze(self, images: np.ndarray, wavelet: str | None = None) -> np.ndarray:
        import pywt

        with warnings.catch_warnings():
            # deeper than dwt_max_level only means every coefficient sees the periodic boundary; still orthonormal
            warnings.filterwarnings("ignore", message="Level value of .* is too high")
            coeffs = pywt.wavedec2(images, wavelet or self.wavelet, mode="periodization", level=self.level,
                                   axes=(-2, -1))
        k = images.shape[0]
        parts = [coeffs[0].reshape(k, -1)]
        for h, v, dd in coeffs[1:]:
            s = h.shape[-1]
            stacked = np.stack([h.reshape(k, s * s), v.reshape(k, s * s), dd.reshape(k, s * s)], axis=2)
            parts.append(stacked.reshape(k, 3 * s * s))  # position-major: h, v, d of position 0, then 1, ...
        return np.concatenate(parts, axis=1)

    def subbands(self, coefficients) -> list:
        """The coefficients in PyWavelets' ``wavedec2`` layout: ``[approximation, (h, v, d) of the coarsest
        level, ..., (h, v, d) of the finest]``, each ``s x s`` (views of ``coefficients`` where possible).

        Parameters
        ----------
        coefficients : array-like, shape (d,) or (k, d)
            In this basis's order; a leading axis of ``k`` is kept on every subband.
        """
        coefficients = np.asarray(coefficients, dtype=float)
        if coefficients.shape[-1:] != (self.d,) or coefficients.ndim > 2:
            raise ValueError(f"coefficients must have shape ({self.d},) or (k, {self.d}); got {coefficients.shape}")
        lead = coefficients.shape[:-1]
        a = self._sides[0]
        coeffs = [coefficients[..., :a * a].reshape(*lead, a, a)]
        start = a * a
        for s in self._sides:
            level = coefficients[..., start:start + 3 * s * s].reshape(*lead, s * s, 3)
            coeffs.append(tuple(level[..., o].reshape(*lead, s, s) for o in range(3)))
            start += 3 * s * s
        return coeffs

    def _synthesize(self, coefficients: np.ndarray, wavelet: str | None = None) -> np.ndarray:
        import pywt

        return pywt.waverec2(self.subbands(coefficients), wavelet or self.wavelet, mode="periodization",
                             axes=(-2, -1))


class DCTBasis(Basis):
    """The orthonormal 2-D DCT-II (``scipy.fft.dctn(norm="ortho")``), frequencies ordered by ``u + v``."""

    def __init__(self, side: int):
        if not isinstance(side, (int, np.integer)) or side < 2:
            raise ValueError(f"side must be an integer >= 2; got {side!r}")
        self.name, self.side = "dct", int(side)
        u, v = np.divmod(np.arange(self.d), self.side)
        self._order = np.lexsort((u, u + v))  # coefficient i is frequency (u, v)[self._order[i]]
        self._u, self._v = u[self._order], v[self._order]

    def scales(self) -> np.ndarray:
        """Scale of every coefficient, shape (d,): the sum of its two frequency indices."""
        return (self._u + self._v).astype(np.int64)

    def groups(self) -> np.ndarray:
        """Group label of every coefficient, shape (d,): 2 x 2 blocks of neighbouring frequencies."""
        half = (self.side + 1) // 2
        block = (self._u // 2) * half + self._v // 2
        return block.astype(np.int64)

    def _analyze(self, images: np.ndarray) -> np.ndarray:
        from scipy.fft import dctn

        c = dctn(images, type=2, norm="ortho", axes=(-2, -1)).reshape(images.shape[0], self.d)
        return c[:, self._order]

    def _synthesize(self, coefficients: np.ndarray) -> np.ndarray:
        from scipy.fft import idctn

        grid = np.empty_like(coefficients)
        grid[:, self._order] = coefficients
        return idctn(grid.reshape(-1, self.side, self.side), type=2, norm="ortho", axes=(-2, -1))


def scale_profile(basis: Basis, images) -> np.ndarray:
    """Slab variances per scale label, relative to each other, from training images of the same kind.

    The mean squared coefficient of every scale label over ``images`` (the approximation's includes the
    images' mean brightness), divided by its mean over the coefficients: a profile whose level a prior then
    learns, with an implied signal power that ``v0`` alone sets (``mean_j profile[scale_j] = 1``).

    Parameters
    ----------
    basis : Basis
    images : ndarray, shape (m, d)
        Training images (pixels, row-major), never the ones to reconstruct.

    Returns
    -------
    ndarray, shape (n_labels,)
        One positive value per label of ``np.unique(basis.scales())``, in that order.
    """
    coefficients = basis.analyze(np.atleast_2d(np.asarray(images, dtype=float)))
    labels, coef_label = np.unique(basis.scales(), return_inverse=True)
    counts = np.bincount(coef_label, minlength=labels.shape[0])
    second_moment = np.bincount(coef_label, np.mean(coefficients**2, axis=0), minlength=labels.shape[0]) / counts
    if not np.all(second_moment > 0.0):
        raise ValueError(f"the training images have no energy at scale label(s) {labels[second_moment <= 0.0]}: "
                         "no profile")
    return second_moment / float(np.mean(second_moment[coef_label]))


def make_basis(name: str, side: int, level: int | None = None) -> Basis:
    """The basis ``name`` (one of :data:`BASES`) for ``side x side`` images."""
    if name == "dct":
        if level is not None:
            raise ValueError("level applies to wavelets only")
        return DCTBasis(side)
    if name in WAVELETS:
        return WaveletBasis(side, name, level)
    raise ValueError(f"basis must be one of {BASES}; got {name!r}")
