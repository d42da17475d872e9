"""Synthetic group-sparse signals and their measurements (experiment E1).

All randomness comes from a ``numpy.random.Generator`` passed in, so a problem is a pure function of its
seed; :func:`problem_rng` derives that generator from stable integers (experiment, setting, replicate)
so that every method sees exactly the same signal, rows and noise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from adaptcs import _validation as val
from adaptcs.measurement import measure

LAYOUTS = ("round_robin", "contiguous")


@dataclass
class GroupSparseProblem:
    """One regression problem ``y = X w_true + noise``.

    Attributes
    ----------
    w_true : ndarray, shape (d,)
        The signal.
    groups : ndarray of int, shape (d,)
        True group of each coefficient (0..G-1).
    X : ndarray, shape (n, d)
        Measurement rows.
    y : ndarray, shape (n,)
        Noisy measurements.
    noise_var : float
        Variance of the Gaussian noise that was added.
    """

    w_true: np.ndarray
    groups: np.ndarray
    X: np.ndarray
    y: np.ndarray
    noise_var: float


def problem_rng(*key: int) -> np.random.Generator:
    """A generator seeded from stable non-negative integers, e.g. (experiment, setting, replicate)."""
    if not key or any(isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0 for k in key):
        raise ValueError(f"key must be one or more non-negative integers; got {key!r}")
    return np.random.default_rng(np.random.SeedSequence([int(k) for k in key]))


EXPERIMENT_INDEX = {"E1": 1, "E2": 2, "E3": 3, "E4": 4, "E5": 5, "E6": 6}


def experiment_rng(experiment: str, setting: int, replicate: int) -> np.random.Generator:
    """The generator of one problem: a function of (experiment, setting, replicate) only, never of the method.

    ``experiment`` is an experiment of docs/experiments.md ("E1" ... "E6"); ``setting`` indexes the experiment's
    settings (e.g. the noise fraction of E2); ``replicate`` the signal.
    """
    if experiment not in EXPERIMENT_INDEX:
        raise ValueError(f"experiment must be one of {sorted(EXPERIMENT_INDEX)}; got {experiment!r}")
    return problem_rng(EXPERIMENT_INDEX[experiment], setting, replicate)


def group_labels(d: int, n_groups: int, layout: str = "round_robin") -> np.ndarray:
    """Group of each coefficient for ``n_groups`` equal groups.

    ``round_robin`` (the paper's E1): group g holds coefficients g, g + G, g + 2G, ...
    ``contiguous``: group g holds the block ``g * d/G ... (g + 1) * d/G - 1``.

    Returns
    -------
    ndarray of int, shape (d,)
    """
    d = val.check_count(d, "d")
    n_groups = val.check_count(n_groups, "n_groups")
    if d % n_groups:
        raise ValueError(f"n_groups ({n_groups}) must divide d ({d})")
    if layout == "round_robin":
        return np.arange(d) % n_groups
    if layout == "contiguous":
        return np.arange(d) // (d // n_groups)
    raise ValueError(f"layout must be one of {LAYOUTS}; got {layout!r}")


def group_sparse_signal(rng: np.random.Generator, groups: np.ndarray, n_active: int,
                        amplitude: float = 1.0) -> np.ndarray:
    """Signal whose ``n_active`` randomly chosen groups are active with Uniform[-a, a] coefficients.

    Returns
    -------
    ndarray, shape (d,)
    """
    n_groups = int(groups.max()) + 1
    n_active = val.check_count(n_active, "n_active")
    if n_active > n_groups:
        raise ValueError(f"n_active ({n_active}) exceeds the number of groups ({n_groups})")
    active = np.zeros(n_groups, dtype=bool)
    active[rng.choice(n_groups, size=n_active, replace=False)] = True
    on = active[groups]
    w = np.zeros(groups.shape[0])
    w[on] = rng.uniform(-amplitude, amplitude, size=int(on.sum()))
    return w


def make_e1_problem(rng: np.random.Generator, *, d: int = 512, n_groups: int = 128, n_active: int = 4,
                    n: int = 64, noise_var: float = 1.0, layout: str = "round_robin") -> GroupSparseProblem:
    """A problem of experiment E1: group-sparse signal, rows on the sphere of radius sqrt(d), Gaussian noise.

    Defaults are the paper's: d = 512, 128 groups of 4 (round-robin), 4 active groups with
    Uniform[-1, 1] coefficients, n = 64 rows, noise variance 1.
    """
    noise_var = val.check_positive_scalar(noise_var, "noise_var")
    groups = group_labels(d, n_groups, layout)
    w = group_sparse_signal(rng, groups, n_active)
    X, y = measure(w, val.check_count(n, "n"), noise_var, rng)
    return GroupSparseProblem(w_true=w, groups=groups, X=X, y=y, noise_var=noise_var)


def permute_group_labels(rng: np.random.Generator, groups: np.ndarray, fraction: float) -> np.ndarray:
    """Noisy grouping (experiment E2): randomly permute a fraction of the entries of the label vector.

    ``round(fraction * d)`` positions are chosen at random and their labels shuffled among themselves;
    the other labels are kept. With ``fraction = 1`` the grouping carries no information.

    Returns
    -------
    ndarray, shape (d,)
        A new label vector (the input is not modified).
    """
    fraction = val.check_fraction(fraction, "fraction", low_open=False)
    groups = np.asarray(groups)
    noisy = groups.copy()
    positions = rng.choice(groups.shape[0], size=round(fraction * groups.shape[0]), replace=False)
    noisy[positions] = groups[rng.permutation(positions)]
    return noisy
