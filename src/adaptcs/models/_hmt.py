"""Hidden Markov trees over group states: the structure and exact sum-product.

A forest over the G groups (each group has at most one parent group) carries binary states ``z_g`` that are a
Markov chain down the tree: ``P(z_g | z_parent(g))`` for a group with a parent, ``P(z_g)`` for a root (written
as the transition from a virtual parent that is on, the convention of Crouse, Nowak & Baraniuk 1998 for the
coarsest wavelet details). With node potentials ``phi_g(z_g)`` (the evidence of each group's own data, in logs),
:func:`sum_product` gives the marginals ``q(z_g)``, the pairwise marginals ``q(z_parent(g), z_g)`` and the log
partition function ``log sum_z P(z) prod_g phi_g(z_g)`` by one upward and one downward pass, O(G).

Used by :class:`adaptcs.models.WaveletTreeSpikeSlab` (exact on basis scans) and by GSS-EP with ``parents``
(the tree kept exact inside EP: docs/model.md, "A tree over the scales").
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.special import expit, log_expit


@dataclass(frozen=True)
class GroupTree:
    """A forest over groups, with its groups ordered by depth.

    Attributes
    ----------
    parent : ndarray of intp, shape (G,)
        Parent group of every group, -1 for a root.
    depths : list of ndarray of intp
        The groups at depth 0 (the roots), 1, 2, ...
    """

    parent: np.ndarray
    depths: list
    # each depth as a slice where its groups are consecutive (as in a wavelet basis's coefficient order): views
    # instead of copies in sum_product, about twice as fast
    _index: list = field(init=False, repr=False, compare=False)
    # per depth, the range of group indices its parents lie in (scattering into it, not into all G groups)
    _parent_span: list = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        index = [slice(int(g[0]), int(g[-1]) + 1) if g.size and np.all(np.diff(g) == 1) else g for g in self.depths]
        object.__setattr__(self, "_index", index)
        span = [(0, 0) if depth == 0 or not g.size else (int(self.parent[g].min()), int(self.parent[g].max()) + 1)
                for depth, g in enumerate(self.depths)]
        object.__setattr__(self, "_parent_span", span)

    @classmethod
    def from_parents(cls, parent) -> GroupTree:
        """The forest of parent groups ``parent`` (shape (G,), -1 for roots); ValueError if it has a cycle."""
        parent = np.asarray(parent, dtype=np.intp)
        G = parent.shape[0]
        if np.any((parent < -1) | (parent >= G)) or np.any(parent == np.arange(G)):
            raise ValueError("parents must name another group or -1 (a root)")
        depth = np.where(parent < 0, 0, -1)
        for level in range(1, G + 1):
            pending = depth < 0
            if not pending.any():
                break
            ready = pending & (depth[np.maximum(parent, 0)] == level - 1)
            if not ready.any():
                raise ValueError("parents: the groups' parents form a cycle (not a tree)")
            depth[ready] = level
        return cls(parent, [np.flatnonzero(depth == k) for k in range(int(depth.max()) + 1)])

    @classmethod
    def of_coefficients(cls, coef_group: np.ndarray, coef_parent) -> GroupTree:
        """The tree of groups from one parent coefficient per coefficient (``coef_parent``, shape (d,), -1 for
        none): the parent group of a group is the group of its coefficients' parents, which must be one group
        (or none for all of them).

        Raises
        ------
        ValueError
            If ``coef_parent`` has the wrong shape or values, a group's coefficients have parents in different
            groups (or some have none), or the groups' parents form a cycle.
        """
        coef_parent = np.asarray(coef_parent)
        d = coef_group.shape[0]
        if coef_parent.shape != (d,) or not np.issubdtype(coef_parent.dtype, np.integer):
            raise ValueError(f"parents must be one integer per coefficient ({d}); got shape {coef_parent.shape} "
                             f"of {coef_parent.dtype}")
        if np.any((coef_parent < -1) | (coef_parent >= d)):
            raise ValueError(f"parents must be coefficient indices in 0..{d - 1} or -1 (none)")
        G = int(coef_group.max()) + 1
        parent_group = np.where(coef_parent >= 0, coef_group[np.maximum(coef_parent, 0)], -1)
        low = np.full(G, np.iinfo(np.int64).max)
        high = np.full(G, np.iinfo(np.int64).min)
        np.minimum.at(low, coef_group, parent_group)
        np.maximum.at(high, coef_group, parent_group)
        mixed = np.flatnonzero(low != high)
        if mixed.size:
            raise ValueError(f"parents: the coefficients of group {mixed[0]} (in sorted label order) have parents in "
                             "different groups; every group needs one parent group (or none)")
        return cls.from_parents(low)


@dataclass(frozen=True)
class TreeMarginals:
    """What :func:`sum_product` returns.

    Attributes
    ----------
    log_post : ndarray, shape (G, 2)
        ``log q(z_g = 0)``, ``log q(z_g = 1)``.
    pair : ndarray, shape (G, 2, 2)
        ``q(z_parent = a, z_g = b)`` at ``[g, a, b]`` for a group with a parent; for a root, zero.
    log_z : float
        ``log sum_z P(z) prod_g phi_g(z_g)``.
    """

    log_post: np.ndarray
    pair: np.ndarray
    log_z: float

    @property
    def logit(self) -> np.ndarray:
        """``log q(z_g = 1) - log q(z_g = 0)``, shape (G,) (+inf for a group that is surely on)."""
        with np.errstate(invalid="ignore"):
            return self.log_post[:, 1] - self.log_post[:, 0]

    @property
    def prob(self) -> np.ndarray:
        """``q(z_g = 1)``, shape (G,)."""
        return np.exp(self.log_post[:, 1])


def logaddexp(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``log(exp(a) + exp(b))`` elementwise for arrays of one shape whose entries are finite or ``-inf``, as
    ``np.logaddexp`` to within 5e-18 in absolute terms, but three to four times faster: numpy's own evaluates
    ``exp`` and ``log1p`` one element at a time (about 50 ns per element, numpy 2.4), most of a tree pass's time.
    The difference is clipped at 40 (``exp(-40)`` = 4e-18) so that ``exp`` never takes its slow path to
    subnormals. A NaN stays NaN."""
    high = np.maximum(a, b)
    with np.errstate(invalid="ignore"):  # -inf - -inf: both -inf, set below
        out = np.abs(a - b)
        np.minimum(out, _CLIP, out=out)
        np.negative(out, out=out)
        np.exp(out, out=out)
        np.log1p(out, out=out)
        out += high
    out[high == -np.inf] = -np.inf
    return out


_CLIP = 40.0


def sum_product(tree: GroupTree, log_phi: np.ndarray, log_trans: np.ndarray) -> TreeMarginals:
    """Exact marginals of ``P(z) prod_g phi_g(z_g)`` on a forest, by an upward and a downward pass.

    Parameters
    ----------
    tree : GroupTree
    log_phi : ndarray, shape (G, 2)
        ``log phi_g(0)``, ``log phi_g(1)``.
    log_trans : ndarray, shape (G, 2, 2)
        ``log P(z_g = b | z_parent = a)`` at ``[g, a, b]``; for a root, row ``a = 1`` is ``log P(z_g)`` (a virtual
        parent that is on). ``-inf`` entries (a group that is always on, say) are allowed.

    Returns
    -------
    TreeMarginals
    """
    G = log_phi.shape[0]
    parent = tree.parent
    # one contiguous array per state, not the columns of a (G, 2) array: the passes gather and scatter them a level
    # at a time (the transitions are read once per pass and stay views)
    beta = [np.array(log_phi[:, b], dtype=np.float64) for b in (0, 1)]  # upward: log phi of the subtree below g
    trans = [[log_trans[:, a, b] for b in (0, 1)] for a in (0, 1)]
    message = [np.zeros(G), np.zeros(G)]  # log sum_b P(z_g = b | z_parent = a) beta_g(b), for each parent state a
    with np.errstate(invalid="ignore"):  # -inf + -inf stays -inf; nothing here is inf - inf
        for level, (low, high) in zip(reversed(tree._index[1:]), reversed(tree._parent_span[1:]), strict=True):
            below = parent[level] - low
            for a in (0, 1):
                message[a][level] = logaddexp(trans[a][0][level] + beta[0][level], trans[a][1][level] + beta[1][level])
                beta[a][low:high] += np.bincount(below, message[a][level], minlength=high - low)
        roots = tree._index[0]
        root_joint = [trans[1][b][roots] + beta[b][roots] for b in (0, 1)]
        log_z_roots = logaddexp(*root_joint)
        log_post = [np.zeros(G), np.zeros(G)]
        for b in (0, 1):
            log_post[b][roots] = root_joint[b] - log_z_roots
        pair = np.zeros((G, 2, 2))
        for level in tree._index[1:]:
            # log q(z_parent = a, z_g = b) = log q(z_parent = a) + log P(b | a) + beta_g(b) - message_g(a), where
            # message_g(a) is finite: each row of a transition has a positive entry
            above = [log_post[a][parent[level]] - message[a][level] for a in (0, 1)]
            joint = [[above[a] + trans[a][b][level] + beta[b][level] for b in (0, 1)] for a in (0, 1)]
            for a in (0, 1):
                for b in (0, 1):
                    pair[level, a, b] = np.exp(joint[a][b])
            for b in (0, 1):
                log_post[b][level] = logaddexp(joint[0][b], joint[1][b])
    return TreeMarginals(np.stack(log_post, axis=1), pair, float(np.sum(log_z_roots)))


class TreePrior:
    """A hidden Markov tree prior on group states with one pair of transition probabilities per prior class
    (a wavelet scale, say), parametrised by their log-odds (the "levels" of a GSS-EP prior with a tree).

    A group of class k is on with probability ``p_on[k]`` when its parent is on (or it is a root) and ``p_off[k]``
    when its parent is off; a group of class -1 is always on. The levels are
    ``(logit p_on[0], ..., logit p_on[K-1], logit p_off[0], ..., logit p_off[K-1])``.

    Parameters
    ----------
    tree : GroupTree
    group_class : ndarray of int, shape (G,)
        Class 0..K-1 of every group, -1 for a group that is always on.
    """

    def __init__(self, tree: GroupTree, group_class: np.ndarray):
        self.tree = tree
        self.group_class = np.asarray(group_class, dtype=np.intp)
        self.n_classes = int(self.group_class.max(initial=-1)) + 1
        self.n_levels = 2 * self.n_classes
        self.always_on = self.group_class < 0
        has_parent = tree.parent >= 0
        self._child = has_parent & ~self.always_on  # groups whose transition from a parent is learned
        self._root = ~has_parent & ~self.always_on

    def log_trans(self, level: np.ndarray) -> np.ndarray:
        """``log P(z_g = b | z_parent = a)`` at ``[g, a, b]``, shape (G, 2, 2)."""
        k = np.maximum(self.group_class, 0)
        on, off = level[:self.n_classes][k], level[self.n_classes:][k]
        log_trans = np.empty((k.shape[0], 2, 2))
        log_trans[:, 1, 1], log_trans[:, 1, 0] = log_expit(on), log_expit(-on)
        log_trans[:, 0, 1], log_trans[:, 0, 0] = log_expit(off), log_expit(-off)
        log_trans[self.always_on, :, 1], log_trans[self.always_on, :, 0] = 0.0, -np.inf
        return log_trans

    def marginals(self, level: np.ndarray, log_phi: np.ndarray) -> TreeMarginals:
        """:func:`sum_product` at ``level`` with node potentials ``log_phi`` (shape (G, 2))."""
        return sum_product(self.tree, log_phi, self.log_trans(level))

    def prior_logit(self, level: np.ndarray) -> np.ndarray:
        """Prior log-odds of every group (its marginal under the tree, no evidence), shape (G,)."""
        return self.marginals(level, np.zeros((self.group_class.shape[0], 2))).logit

    def expected_transitions(self, marginals: TreeMarginals) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per class, the expected numbers of (parent on or root, group on), (parent on or root), (parent off,
        group on) and (parent off) under ``marginals``; each shape (K,)."""
        K, k = self.n_classes, self.group_class
        prob = marginals.prob
        child, root = self._child, self._root
        def per_class(mask, weights=None):
            return np.bincount(k[mask], weights, minlength=K)

        on_on = per_class(child, marginals.pair[child, 1, 1]) + per_class(root, prob[root])
        on = per_class(child, marginals.pair[child, 1].sum(axis=1)) + per_class(root)
        off_on = per_class(child, marginals.pair[child, 0, 1])
        off = per_class(child, marginals.pair[child, 0].sum(axis=1))
        return on_on, on, off_on, off

    def em_levels(self, marginals: TreeMarginals, level: np.ndarray, bounds: tuple[float, float]) -> np.ndarray:
        """EM's update of the levels: expected transitions over expected parents in each state, kept inside
        ``bounds`` (probabilities); a transition no group can take keeps its level. Shape (2K,)."""
        on_on, on, off_on, off = self.expected_transitions(marginals)
        counts, events = np.concatenate([on, off]), np.concatenate([on_on, off_on])
        with np.errstate(divide="ignore", invalid="ignore"):
            prob = np.clip(events / counts, *bounds)
        return np.where(counts > 1e-12, np.log(prob) - np.log1p(-prob), level)

    def level_gradient(self, marginals: TreeMarginals, level: np.ndarray) -> np.ndarray:
        """Gradient of ``log sum_z P(z) prod_g phi_g(z_g)`` in the levels at the ``marginals`` of those
        potentials: ``sum_g E[z_parent (z_g - p_on)]`` and ``sum_g E[(1 - z_parent) (z_g - p_off)]`` per class.
        Shape (2K,)."""
        on_on, on, off_on, off = self.expected_transitions(marginals)
        K = self.n_classes
        p_on, p_off = expit(level[:K]), expit(level[K:])
        return np.concatenate([on_on - p_on * on, off_on - p_off * off])
