"""Random measurement rows and the noisy measurements they take of a signal.

Shared by the data generators (the initial rows of every problem), the experiments and the design loop
(its ``random`` strategy), so none of them imports another for it.
"""

from __future__ import annotations

import numpy as np


def sphere_rows(rng: np.random.Generator, n: int, d: int, radius: float | None = None) -> np.ndarray:
    """``n`` rows drawn uniformly on the sphere of the given radius in R^d (default ``sqrt(d)``).

    Returns
    -------
    ndarray, shape (n, d)
    """
    radius = np.sqrt(d) if radius is None else radius
    Z = rng.standard_normal((n, d))
    return Z * (radius / np.linalg.norm(Z, axis=1, keepdims=True))


def measure(w: np.ndarray, n: int, noise_var: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``n`` random rows on the sphere of radius ``sqrt(d)`` and their measurements of ``w`` with Gaussian noise.

    Parameters
    ----------
    w : ndarray, shape (d,)
        The signal.
    n : int
        Number of rows.
    noise_var : float
        Variance of the noise added to each measurement (in the units of ``y`` squared).
    rng : numpy.random.Generator
        Draws the rows first, then the noise.

    Returns
    -------
    X : ndarray, shape (n, d)
    y : ndarray, shape (n,)
    """
    X = sphere_rows(rng, n, w.shape[0])
    return X, X @ w + rng.normal(0.0, np.sqrt(noise_var), size=n)
