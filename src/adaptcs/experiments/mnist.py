"""The MNIST experiments E4-E6 (the paper's section 5.2) as functions of (setting, replicate).

A setting is a digit (and, in E6, a kind of group-specific prior knowledge); a replicate is one of the
100 images of that digit to reconstruct. For each digit 200 images are drawn once (seeded by the digit, the
same for every replicate, experiment setting and method): the first 100 are reconstructed, the other 100 only
build the groups (similarity-grown groups of 4, or fixed 2 x 2 blocks) and E6's prior knowledge.
Hyper-parameters are the paper's per-image oracle (docs/experiments.md): p0 = fraction of groups with any
non-zero pixel, v0 = (mean |w_j| over non-zero pixels)^2, ss_ep's p0 = fraction of non-zero pixels.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from adaptcs.data.mnist import SIDE, MnistData, block_groups, group_prior_knowledge, load_mnist, similarity_groups
from adaptcs.data.synthetic import EXPERIMENT_INDEX, GroupSparseProblem, problem_rng
from adaptcs.experiments.case import Case
from adaptcs.measurement import measure
from adaptcs.models.group_lasso import GroupLasso, group_penalty
from adaptcs.models.registry import PriorInfo

DIGITS = tuple(range(10))
PRIOR_KINDS = ("none", "prior", "prior_random")
GROUP_KINDS = ("similarity", "blocks")
N_RECONSTRUCT = 100
N_GROUPING = 100


@dataclass(frozen=True)
class MnistExperiment:
    """Parameters of an MNIST experiment (the paper's values by default)."""

    name: str
    n_initial: int
    n_steps: int = 0
    prior_kinds: tuple = ("none",)
    strategies: tuple = ("random",)
    figures: tuple = ("errors",)
    checkpoints: tuple = ()
    noise_var: float = 1.0
    group_size: int = 4

    @property
    def d(self) -> int:
        """Pixels per image (28 x 28)."""
        return SIDE * SIDE

    @property
    def settings(self) -> tuple:
        """One setting per (digit, prior knowledge); E4 and E5 have one per digit."""
        if self.prior_kinds == ("none",):
            return tuple({"digit": digit} for digit in DIGITS)
        return tuple({"digit": digit, "prior_knowledge": kind} for digit in DIGITS for kind in self.prior_kinds)

    def kept_rows(self, n_steps: int) -> tuple:
        """Numbers of rows whose reconstructions are kept (the images figure): the experiment's checkpoints that a
        loop of ``n_steps`` reaches, and always its last number of rows (where design has paid off most)."""
        if not self.checkpoints:
            return ()
        final = self.n_initial + n_steps
        return tuple(sorted({c for c in self.checkpoints if c <= final} | {final}))

    def setting_indices(self, digits) -> list[int]:
        """The settings of the given digits (all prior kinds)."""
        return [i for i, s in enumerate(self.settings) if s["digit"] in set(digits)]


MNIST = {
    "E4": MnistExperiment("E4", n_initial=288, figures=("errors", "images", "importance", "fit_times")),
    "E5": MnistExperiment("E5", n_initial=128, n_steps=160, strategies=("design", "random"),
                          figures=("curves", "images"), checkpoints=(128, 160, 192, 224, 288)),
    "E6": MnistExperiment("E6", n_initial=128, n_steps=160, prior_kinds=PRIOR_KINDS, figures=("curves",)),
}


@functools.lru_cache(maxsize=4)
def cached_mnist(source: str, cache_dir: str | None, path: str | None) -> MnistData:
    """:func:`adaptcs.data.mnist.load_mnist`, loaded once per process."""
    return load_mnist(source, cache_dir=cache_dir, path=path)


def digit_images(data: MnistData, digit: int) -> tuple[np.ndarray, np.ndarray]:
    """(images to reconstruct (100, 784), grouping images (100, 784)) of a digit, drawn once per digit."""
    pool = np.flatnonzero(data.labels == digit)
    need = N_RECONSTRUCT + N_GROUPING
    if pool.size < need:
        raise ValueError(f"MNIST ({data.source}) has {pool.size} images of digit {digit}; {need} are needed")
    chosen = problem_rng(EXPERIMENT_INDEX["E4"], 100 + digit).choice(pool, size=need, replace=False)
    return data.images[chosen[:N_RECONSTRUCT]], data.images[chosen[N_RECONSTRUCT:]]


def digit_groups(grouping: np.ndarray, digit: int, kind: str, group_size: int = 4) -> np.ndarray:
    """Groups of the 784 pixels for a digit: grown by similarity over its grouping images, or 2 x 2 blocks."""
    if kind == "blocks":
        return block_groups(SIDE, int(np.sqrt(group_size)))
    if kind == "similarity":
        return similarity_groups(grouping, group_size, problem_rng(EXPERIMENT_INDEX["E4"], 100 + digit, 1))
    raise ValueError(f"groups must be one of {GROUP_KINDS}; got {kind!r}")


def oracle_prior(w: np.ndarray, groups: np.ndarray, noise_var: float) -> PriorInfo:
    """The paper's per-image hyper-parameters (an oracle: they are computed from the true image)."""
    nonzero = w != 0
    if not nonzero.any():
        raise ValueError("the image has no non-zero pixel")
    G = int(groups.max()) + 1
    active_groups = np.bincount(groups, weights=nonzero, minlength=G) > 0
    return PriorInfo(p0_group=float(active_groups.mean()), p0_coef=float(nonzero.mean()),
                     v0=float(np.mean(np.abs(w[nonzero])) ** 2), noise_var=noise_var)


def mnist_case(experiment: str, setting_index: int, replicate: int, *, data: MnistData, groups: str = "similarity",
               n_initial: int | None = None):
    """The problem of (experiment, setting, replicate) on ``data``; returns an experiments.Case."""
    spec = MNIST[experiment]
    if not 0 <= setting_index < len(spec.settings):
        raise ValueError(f"setting_index must be in 0..{len(spec.settings) - 1} for {experiment}; got {setting_index}")
    if not 0 <= replicate < N_RECONSTRUCT:
        raise ValueError(f"replicate must be in 0..{N_RECONSTRUCT - 1} (images per digit); got {replicate}")
    setting = spec.settings[setting_index]
    digit = setting["digit"]
    images, grouping = digit_images(data, digit)
    pixel_groups = digit_groups(grouping, digit, groups, spec.group_size)
    w = images[replicate]
    n = spec.n_initial if n_initial is None else n_initial
    # Rows and noise depend on (experiment, digit, image) only: E6's prior kinds see the same measurements.
    problem_seed = (EXPERIMENT_INDEX[experiment], digit, replicate)
    rng = problem_rng(*problem_seed)
    X, y = measure(w, n, spec.noise_var, rng)
    prior = oracle_prior(w, pixel_groups, spec.noise_var)
    kind = setting.get("prior_knowledge", "none")
    if kind != "none":
        p0 = group_prior_knowledge(grouping, pixel_groups, prior.p0_group, kind,
                                   problem_rng(EXPERIMENT_INDEX[experiment], digit, 1000 + replicate))
        prior = PriorInfo(p0_group=p0, p0_coef=prior.p0_coef, v0=prior.v0, noise_var=prior.noise_var)
    problem = GroupSparseProblem(w_true=w, groups=pixel_groups, X=X, y=y, noise_var=spec.noise_var)
    key = EXPERIMENT_INDEX[experiment]
    # Random rows come from a stream shared by E6's prior kinds, so they are compared on the same rows.
    return Case(problem, pixel_groups, prior, problem_seed, (key, digit, replicate, 1), (key, digit, replicate, 2))


# G-LASSO's bound k per digit (the paper chose the best k for each digit): the grid is these multiples of the
# median group penalty sum_g sqrt(d_g) |w_g| of the calibration images, scored by the mean relative error of
# their reconstructions from E4's measurements (n_initial rows, same noise, rows of their own).
G_LASSO_K_FACTORS = (0.5, 0.7, 1.0, 1.4)
N_CALIBRATION = 5  # grouping images of the digit used (never an image that is reconstructed)
_G_LASSO_K: dict[tuple, tuple[float, dict]] = {}
G_LASSO_K_NOTE = "on E4-E6 chosen per digit on grouping images (the choice is recorded in each run file)"


def g_lasso_k(data: MnistData, digit: int, groups: str = "similarity") -> tuple[float, dict]:
    """The paper protocol's G-LASSO bound for ``digit``, chosen on grouping images (computed once per process).

    Returns
    -------
    (k, scores)
        The chosen bound and ``{k: mean relative error}`` over the grid, for the record.
    """
    key = (data.source, data.images.shape[0], digit, groups)
    if key not in _G_LASSO_K:
        spec = MNIST["E4"]
        _images, grouping = digit_images(data, digit)
        pixel_groups = digit_groups(grouping, digit, groups, spec.group_size)
        members = [np.flatnonzero(pixel_groups == g) for g in range(int(pixel_groups.max()) + 1)]
        calibration = grouping[:N_CALIBRATION]
        scale = float(np.median([group_penalty(w, members) for w in calibration]))
        grid = [factor * scale for factor in G_LASSO_K_FACTORS]
        errors = np.zeros(len(grid))
        for j, w in enumerate(calibration):
            rng = problem_rng(EXPERIMENT_INDEX["E4"], digit, 3000 + j)  # rows no experiment uses
            X, y = measure(w, spec.n_initial, spec.noise_var, rng)
            for i, k in enumerate(grid):
                coef = GroupLasso(pixel_groups, k=k).fit(X, y).coef_
                errors[i] += np.linalg.norm(coef - w) / np.linalg.norm(w) / len(calibration)
        _G_LASSO_K[key] = (float(grid[int(np.argmin(errors))]), {round(k, 3): round(float(e), 4)
                                                                 for k, e in zip(grid, errors, strict=True)})
    return _G_LASSO_K[key]
