"""Reconstruction quality measures."""

from __future__ import annotations

import numpy as np


def relative_error(w_hat, w_true, norm_true: float | None = None) -> float:
    """``||w_hat - w_true||_2 / ||w_true||_2`` (the error metric of every experiment).

    Parameters
    ----------
    w_hat, w_true : array-like, shape (d,)
    norm_true : float, optional
        ``||w_true||_2`` if already known.
    """
    w_hat = np.asarray(w_hat, dtype=float)
    w_true = np.asarray(w_true, dtype=float)
    if w_hat.shape != w_true.shape:
        raise ValueError(f"w_hat has shape {w_hat.shape} but w_true has {w_true.shape}")
    norm_true = float(np.linalg.norm(w_true)) if norm_true is None else norm_true
    if norm_true == 0.0:
        raise ValueError("w_true is zero: the relative error is undefined")
    return float(np.linalg.norm(w_hat - w_true) / norm_true)
