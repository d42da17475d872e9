"""From an estimator's ``p0``, ``v0`` and ``scales`` to the prior classes EP works with.

Without ``scales`` the prior has one class: ``p0_g = expit(level + offset_g)`` for every group and one slab
variance ``v0``. With ``scales`` (one label per coefficient, e.g. :meth:`adaptcs.bases.images.Basis.scales`; 0 = the
approximation) every label has its own spike probability and slab variance (docs/model.md, "Priors per scale"):

* label 0 is always on: its groups have ``p0 = 1``, a Gaussian prior ``N(0, v0_0)``;
* ``scale_learning="each"``: every other label is a prior class and a slab class of its own, so learning finds one
  ``p0`` and one ``v0`` per label (type-II ML, the per-scale EM of docs/learning.md);
* ``scale_learning="profile"``: the given per-label values are a fixed profile; learning moves a common level of
  the log-odds (the offsets between labels are kept) and a common multiplier of the slab variances.

With ``parents`` as well (one parent coefficient per coefficient, e.g.
:meth:`adaptcs.bases.images.WaveletBasis.parents`)
the groups' states are a hidden Markov tree (docs/model.md, "A tree over the scales"): every label other than 0 has
a spike probability given that the parent group is on (``p0``; also that of a root) and one given that it is off
(``p0_off``), learned per label; ``scale_learning`` then concerns the slab variances only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import expit, logit

from adaptcs import _validation as val
from adaptcs.models._hmt import GroupTree, TreePrior

SCALE_LEARNING = ("each", "profile")


@dataclass(frozen=True)
class PriorClasses:
    """The prior structure of one fit (see :class:`adaptcs.models._ep.EPProblem` for the meaning of the classes).

    Attributes
    ----------
    p0_group : ndarray, shape (G,)
        The given prior probability of every group (1 for a group that is always on).
    offsets : ndarray, shape (G,)
        Fixed prior log-odds offsets.
    level : ndarray, shape (K_p,)
        The given levels of the prior classes.
    group_class : ndarray of int, shape (G,)
        Prior class of every group, -1 for always on.
    v0 : ndarray, shape (K_v,)
        The given slab variances of the slab classes.
    coef_slab : ndarray of int, shape (d,)
        Slab class of every coefficient.
    slab_profile : ndarray, shape (d,)
        Fixed factors of the slab variances.
    scale_labels : ndarray of int, shape (S,) or None
        The distinct scale labels, sorted (None without ``scales``).
    group_scale : ndarray of int, shape (G,) or None
        Index of every group's label in ``scale_labels``.
    coef_scale : ndarray of int, shape (d,) or None
        Index of every coefficient's label in ``scale_labels``.
    tree : TreePrior or None
        With ``parents``: the tree over the groups (the levels are then its transitions' log-odds).
    transitions : ndarray, shape (2, S), or None
        With ``parents``: the given spike probabilities of a group whose parent is on (row 0) and off (row 1), per
        scale label (1 for label 0).
    """

    p0_group: np.ndarray
    offsets: np.ndarray
    level: np.ndarray
    group_class: np.ndarray
    v0: np.ndarray
    coef_slab: np.ndarray
    slab_profile: np.ndarray
    scale_labels: np.ndarray | None = None
    group_scale: np.ndarray | None = None
    coef_scale: np.ndarray | None = None
    tree: TreePrior | None = None
    transitions: np.ndarray | None = None

    def per_scale(self, per_group: np.ndarray | None = None, per_coef: np.ndarray | None = None) -> np.ndarray:
        """One value per scale label, shape (S,), read off a per-group or a per-coefficient array (constant on
        each label)."""
        values, index = (per_group, self.group_scale) if per_group is not None else (per_coef, self.coef_scale)
        first = np.zeros(self.scale_labels.shape[0], dtype=np.intp)
        first[index[::-1]] = np.arange(index.shape[0])[::-1]  # the first position of every label
        return np.asarray(values, dtype=np.float64)[first]


def check_scales(scales, coef_group: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Validate scale labels: non-negative integers, one per coefficient, the same within each group.

    Returns
    -------
    labels : ndarray of int, shape (S,)
        The distinct labels, sorted.
    coef_scale : ndarray of intp, shape (d,)
        Index of every coefficient's label in ``labels``.
    """
    arr = np.asarray(scales)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"scales must have one label per coefficient; got shape {arr.shape}")
    if not (np.issubdtype(arr.dtype, np.integer) or (np.issubdtype(arr.dtype, np.floating)
                                                     and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)))):
        raise ValueError("scales must be integer labels (0 = the approximation, which is always on)")
    arr = arr.astype(np.int64)
    if np.any(arr < 0):
        raise ValueError(f"scales must be non-negative integers (0 = the approximation); got {arr.min()}")
    labels, coef_scale = np.unique(arr, return_inverse=True)
    if coef_group is not None:
        if coef_group.shape[0] != arr.shape[0]:
            raise ValueError(f"scales has {arr.shape[0]} labels, X has {coef_group.shape[0]} columns")
        G = int(coef_group.max()) + 1
        low = np.full(G, np.iinfo(np.int64).max)
        high = np.full(G, -1)
        np.minimum.at(low, coef_group, arr)
        np.maximum.at(high, coef_group, arr)
        mixed = np.flatnonzero(low != high)
        if mixed.size:
            raise ValueError(f"scales: every group must lie in one scale; group {mixed[0]} (in sorted label order) "
                             f"mixes scales {low[mixed[0]]} and {high[mixed[0]]}")
    return labels, coef_scale.astype(np.intp)


def check_per_scale(value, n_scales: int, name: str) -> np.ndarray:
    """A scalar or one finite positive value per scale label; shape (n_scales,)."""
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim == 0:
        arr = np.full(n_scales, float(arr))
    elif arr.shape != (n_scales,):
        raise ValueError(f"{name} must be a scalar or have one value per scale label ({n_scales}); got shape "
                         f"{arr.shape}")
    if not np.all(np.isfinite(arr) & (arr > 0.0)):
        raise ValueError(f"{name} must be finite and > 0")
    return arr


def prior_classes(p0, v0, coef_group: np.ndarray, n_groups: int, *, scales=None, scale_learning: str = "each",
                  learning: bool = False, parents=None, p0_off=None) -> PriorClasses:
    """The prior classes of a fit.

    Parameters
    ----------
    p0 : float or array-like
        Without ``scales``: one value or one per group; with ``scales``: one value or one per scale label (the
        value of label 0 is not used: it is always on).
    v0 : float or array-like
        Without ``scales``: one value; with ``scales``: one value or one per scale label.
    coef_group : ndarray of int, shape (d,)
    n_groups : int
    scales : array-like of int, shape (d,), optional
    scale_learning : {"each", "profile"}
    learning : bool
        Whether anything is learned (without ``scales``, a learned fit keeps per-group p0 as offsets of one level,
        a fit with given values puts them all in the offsets).
    parents : array-like of int, shape (d,), optional
        Parent coefficient of every coefficient (-1: none); needs ``scales``. ``p0`` is then the spike probability
        of a group whose parent group is on (or of a root), ``p0_off`` that of a group whose parent is off
        (default: ``p0``), one value or one per scale label each.
    """
    d = coef_group.shape[0]
    zeros_d = np.zeros(d, dtype=np.intp)
    if scales is None:
        p0_group = val.check_probability(p0, n_groups, "p0")
        if learning:  # p0_g = expit(level + offsets_g): the level is learned, the offsets (prior knowledge) kept
            level = float(logit(np.mean(p0_group)))
            offsets = logit(p0_group) - level if np.ndim(p0) else np.zeros_like(p0_group)
        else:
            level, offsets = 0.0, logit(p0_group)
        return PriorClasses(p0_group, offsets, np.array([level]), np.zeros(n_groups, dtype=np.intp),
                            np.array([float(v0)]), zeros_d, np.ones(d))

    labels, coef_scale = check_scales(scales, coef_group)
    S = labels.shape[0]
    p0_scale = val.check_probability(p0, S, "p0 (one per scale label)")
    v0_scale = check_per_scale(v0, S, "v0")
    group_scale = np.zeros(n_groups, dtype=np.intp)
    group_scale[coef_group] = coef_scale
    on = labels[group_scale] == 0
    p0_group = np.where(on, 1.0, p0_scale[group_scale])
    detail = np.flatnonzero(labels != 0)  # the labels with a prior class of their own
    if parents is not None:
        return _tree_classes(p0_scale, v0_scale, p0_off, coef_group, parents, labels, group_scale, coef_scale,
                             detail, scale_learning)
    if scale_learning == "each":
        class_of_scale = np.full(S, -1, dtype=np.intp)
        class_of_scale[detail] = np.arange(detail.shape[0])
        group_class = class_of_scale[group_scale]
        return PriorClasses(p0_group, np.zeros(n_groups), logit(p0_scale[detail]), group_class, v0_scale,
                            coef_scale, np.ones(d), labels, group_scale, coef_scale)
    _check_scale_learning(scale_learning)
    group_class = np.where(on, -1, 0).astype(np.intp)
    if np.all(on):
        level, offsets = np.zeros(0), np.zeros(n_groups)
    else:
        common = float(logit(np.mean(p0_group[~on])))
        level, offsets = np.array([common]), np.where(on, 0.0, logit(np.where(on, 0.5, p0_group)) - common)
    reference = float(np.max(v0_scale))
    return PriorClasses(p0_group, offsets, level, group_class, np.array([reference]), zeros_d,
                        v0_scale[coef_scale] / reference, labels, group_scale, coef_scale)


def _check_scale_learning(scale_learning: str) -> None:
    if scale_learning not in SCALE_LEARNING:
        raise ValueError(f"scale_learning must be one of {SCALE_LEARNING}; got {scale_learning!r}")


def _tree_classes(p0_scale, v0_scale, p0_off, coef_group, parents, labels, group_scale, coef_scale, detail,
                  scale_learning) -> PriorClasses:
    """The prior classes of a tree prior (:func:`prior_classes` with ``parents``): one class per detail label for
    the transitions, the slab variances per label ("each") or as a profile."""
    S, n_groups, d = labels.shape[0], group_scale.shape[0], coef_group.shape[0]
    p0_off_scale = p0_scale if p0_off is None else val.check_probability(p0_off, S, "p0_off (one per scale label)")
    class_of_scale = np.full(S, -1, dtype=np.intp)
    class_of_scale[detail] = np.arange(detail.shape[0])
    group_class = class_of_scale[group_scale]
    tree = TreePrior(GroupTree.of_coefficients(coef_group, parents), group_class)
    level = np.concatenate([logit(p0_scale[detail]), logit(p0_off_scale[detail])])
    p0_group = expit(tree.prior_logit(level))
    _check_scale_learning(scale_learning)
    if scale_learning == "each":
        v0, coef_slab, profile = v0_scale, coef_scale, np.ones(d)
    else:
        reference = float(np.max(v0_scale))
        v0, coef_slab, profile = np.array([reference]), np.zeros(d, dtype=np.intp), v0_scale[coef_scale] / reference
    transitions = np.where(labels == 0, 1.0, np.stack([p0_scale, p0_off_scale]))
    return PriorClasses(p0_group, np.zeros(n_groups), level, group_class, v0, coef_slab, profile, labels,
                        group_scale, coef_scale, tree, transitions)
