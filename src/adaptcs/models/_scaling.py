"""Exact rescaling of regression data, so that estimators see numbers of order one at any input scale.

Linear-Gaussian models are equivariant: fitting ``(X / a, y / b)`` with slab (or group) variances
``v a^2 / b^2`` and noise variance ``s2 / b^2`` is the same model as ``(X, y)`` with ``v`` and ``s2``, with
every coefficient multiplied by ``a / b``. Estimators use this to work on data of unit size internally
(no overflow of ``X L X^T`` for X of 1e150, no underflow for X of 1e-150). The factors are powers of two,
so the rescaling itself is exact in floating point and costs no accuracy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def power_of_two_scale(values) -> float:
    """The power of two nearest (in log) to the root mean square of ``values``; 1.0 if they are all zero.

    Overflow-safe: the mean square is formed after dividing by the largest magnitude.
    """
    a = np.abs(np.asarray(values, dtype=np.float64)).ravel()
    peak = float(a.max()) if a.size else 0.0
    if peak == 0.0 or not np.isfinite(peak):
        return 1.0
    rms = peak * float(np.sqrt(np.mean((a / peak) ** 2)))
    return float(np.ldexp(1.0, int(np.round(np.log2(rms)))))


@dataclass(frozen=True)
class DataScale:
    """Powers of two that bring X and y to unit size; ``coef`` is the unit of the coefficients.

    Attributes
    ----------
    x : float
        Scale of X (rows are divided by it).
    y : float
        Scale of y (measurements are divided by it).
    """

    x: float
    y: float

    @classmethod
    def of(cls, X, y) -> DataScale:
        """The power-of-two scales of ``X`` and ``y``."""
        return cls(power_of_two_scale(X), power_of_two_scale(y))

    @property
    def coef(self) -> float:
        """Coefficients in original units = coefficients in scaled units times this (y / x)."""
        return self.y / self.x

    @property
    def coef2(self) -> float:
        """``coef^2``, the unit of variances of the coefficients; ``ValueError`` if it leaves the float range."""
        with np.errstate(over="ignore", under="ignore"):
            unit2 = np.float64(self.coef) ** 2
        if not (np.isfinite(unit2) and unit2 > 0.0):
            raise ValueError(f"the coefficients' units are out of floating-point range (X of size {self.x:g}, y of "
                             f"size {self.y:g}): rescale X or y")
        return float(unit2)

    def scaled_variance(self, var, name: str):
        """A prior variance of the coefficients in scaled units (one value or an array of them); ``ValueError``
        if it leaves the float range."""
        return self._divide(var, self.coef, name)

    def scaled_noise(self, noise_var: float) -> float:
        """The noise variance in scaled units; ``ValueError`` if it leaves the float range."""
        return self._divide(noise_var, self.y, "noise_var")

    def _divide(self, value, unit: float, name: str):
        """``value / unit^2``, squared in numpy so that extreme units give inf or 0 (refused), not OverflowError."""
        with np.errstate(over="ignore", under="ignore"):
            scaled = np.asarray(value, dtype=np.float64) / np.float64(unit) ** 2
        if not np.all(np.isfinite(scaled) & (scaled > 0.0)):
            shown = f"{value:g}" if np.ndim(value) == 0 else f"{np.min(value):g}..{np.max(value):g}"
            raise ValueError(f"{name}={shown} is out of floating-point range "
                             f"relative to the data (X of size {self.x:g}, y of size {self.y:g}): rescale X, y or "
                             f"{name}")
        return float(scaled) if np.ndim(value) == 0 else scaled


# Where learning starts when nothing is given (docs/learning.md)
UNINFORMED_P0 = 0.5  # prior probability of a group (or coefficient) before anything is learned
UNINFORMED_NOISE = 0.1  # starting noise variance, as a fraction of the measurements' mean square


def uninformed_scale(X: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Starting ``(v0, noise_var)`` from measurements alone: the noise variance a tenth of ``mean(y^2)``, ``v0``
    such that a prior with p0 = 1/2 explains the rest of it (docs/learning.md)."""
    noise_var = uninformed_noise(y, "v0 and noise_var")
    return (float(np.mean(y * y)) - noise_var) / (UNINFORMED_P0 * float(np.mean(np.sum(X * X, axis=1)))), noise_var


def uninformed_noise(y: np.ndarray, give: str = "noise_var") -> float:
    """Starting noise variance from measurements alone: a tenth of ``mean(y^2)``. ValueError if y is all zero,
    advising to give the hyper-parameters named in ``give`` instead."""
    mean_y2 = float(np.mean(y * y))
    if not mean_y2 > 0.0:
        raise ValueError(f"the measurements are all zero: there is no scale to start learning from; give {give}")
    return UNINFORMED_NOISE * mean_y2
