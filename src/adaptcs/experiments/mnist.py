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
from dataclasses import dataclass, field, replace

import numpy as np

from adaptcs.data.mnist import (
    SIDE,
    MnistData,
    block_groups,
    group_prior_knowledge,
    load_mnist,
    official_files,
    similarity_groups,
)
from adaptcs.data.synthetic import EXPERIMENT_INDEX, GroupSparseProblem, problem_rng
from adaptcs.experiments.base import Experiment
from adaptcs.experiments.case import Case
from adaptcs.measurement import measure
from adaptcs.models.registry import PriorInfo

DIGITS = tuple(range(10))
PRIOR_KINDS = ("none", "prior", "prior_random")
GROUP_KINDS = ("similarity", "blocks")
N_RECONSTRUCT = 100
N_GROUPING = 100


MNIST_OPTIONS = ("source", "cache_dir", "path", "groups")  # the config's mnist block (config/README.md)


@dataclass(frozen=True)
class MnistExperiment(Experiment):
    """Parameters of an MNIST experiment (the paper's values by default).

    Attributes
    ----------
    options : dict
        The config's ``mnist`` block: ``source``, ``cache_dir``, ``path`` (:func:`adaptcs.data.mnist.load_mnist`)
        and ``groups`` ("similarity" or "blocks").
    """

    config_keys = ("digits",)
    calibration = "grouping images of the digit (never reconstructed), measured as in E4"

    name: str
    n_initial: int
    n_steps: int = 0
    prior_kinds: tuple = ("none",)
    strategies: tuple = ("random",)
    figures: tuple = ("errors",)
    checkpoint_rows: tuple = ()
    noise_var: float = 1.0
    group_size: int = 4
    options: dict = field(default_factory=dict)

    @property
    def key(self) -> int:
        """Seeds its problems (E4-E6: 4-6)."""
        return EXPERIMENT_INDEX[self.name]

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

    def settings_note(self, settings) -> str:
        """The prior knowledge, where the settings differ in it (E6)."""
        if not any("prior_knowledge" in self.settings[i] for i in settings):
            return ""
        return ("the settings differ in group-specific prior knowledge: none (p0 from the image), prior (p0 doubled "
                "for the 25 groups most active in the grouping images and halved for the 25 least) and prior_random "
                "(doubled or halved for 50 random groups)")

    def with_options(self, options: dict) -> MnistExperiment:
        """This experiment on the MNIST images the options name (ValueError for an unknown option)."""
        unknown = set(options) - set(MNIST_OPTIONS)
        if unknown:
            raise ValueError(f"unknown MNIST option(s): {sorted(unknown)}")
        return replace(self, options=dict(options))

    def configured(self, entry: dict, config: dict) -> MnistExperiment:
        """With the config's ``mnist`` block; an ``mnist.path`` that cannot work is refused here."""
        options = dict(config.get("mnist", {}))
        if options.get("source") == "path":
            if "path" not in options:
                raise ValueError("mnist.source is 'path' but mnist.path (the folder with the official MNIST IDX "
                                 "files) is not given")
            try:
                official_files(options["path"])
            except FileNotFoundError as exc:
                raise ValueError(f"mnist.path: {exc}") from None
        return self.with_options(options)

    def setting_indices(self, entry: dict) -> list[int]:
        """The settings of the entry's ``digits`` (all prior kinds; all ten digits by default)."""
        return self.digit_settings(entry.get("digits", DIGITS))

    def digit_settings(self, digits) -> list[int]:
        """The settings of the given digits (all prior kinds)."""
        return [i for i, s in enumerate(self.settings) if s["digit"] in set(digits)]

    def check_replicates(self, replicates: int, settings) -> None:
        """At most :data:`N_RECONSTRUCT` images per digit."""
        if replicates > N_RECONSTRUCT:
            raise ValueError(f"replicates must be at most {N_RECONSTRUCT} (images per digit)")

    def checkpoints(self, setting: int, n_steps: int) -> tuple:
        """Numbers of rows whose reconstructions are kept (the images figure): the experiment's checkpoint rows that
        a loop of ``n_steps`` reaches, and always its last number of rows (where design has paid off most)."""
        if not self.checkpoint_rows:
            return ()
        final = self.n_initial + n_steps
        return tuple(sorted({c for c in self.checkpoint_rows if c <= final} | {final}))

    def image_side(self, setting: int) -> int:
        """28."""
        return SIDE

    def data(self) -> MnistData:
        """The MNIST images of the options (loaded once per process)."""
        return cached_mnist(self.options.get("source", "embedded"), self.options.get("cache_dir"),
                            self.options.get("path"))

    def case(self, setting: int, replicate: int) -> Case:
        """The problem of (setting, replicate) on the options' images."""
        return mnist_case(self.name, setting, replicate, data=self.data(),
                          groups=self.options.get("groups", "similarity"), spec=self)

    def calibration_problems(self, setting: int) -> list:
        """:data:`N_CALIBRATION` grouping images of the setting's digit measured as in E4 (rows of their own)."""
        self.check_setting(setting)
        digit = self.settings[setting]["digit"]
        return calibration_problems(self.data(), digit, self.options.get("groups", "similarity"))


E4 = MnistExperiment("E4", n_initial=288, figures=("errors", "images", "importance", "fit_times"))
E5 = MnistExperiment("E5", n_initial=128, n_steps=160, strategies=("design", "random"), figures=("curves", "images"),
                     checkpoint_rows=(128, 160, 192, 224, 288))
E6 = MnistExperiment("E6", n_initial=128, n_steps=160, prior_kinds=PRIOR_KINDS, figures=("curves",))
MNIST = {e.name: e for e in (E4, E5, E6)}


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
               n_initial: int | None = None, spec: MnistExperiment | None = None):
    """The problem of (experiment, setting, replicate) on ``data``; returns an experiments.Case."""
    spec = MNIST[experiment] if spec is None else spec
    spec.check_setting(setting_index)
    if not 0 <= replicate < N_RECONSTRUCT:
        raise ValueError(f"replicate must be in 0..{N_RECONSTRUCT - 1} (images per digit); got {replicate}")
    setting = spec.settings[setting_index]
    digit = setting["digit"]
    images, grouping = digit_images(data, digit)
    pixel_groups = digit_groups(grouping, digit, groups, spec.group_size)
    w = images[replicate]
    n = spec.n_initial if n_initial is None else n_initial
    # Rows and noise depend on (experiment, digit, image) only: E6's prior kinds see the same measurements.
    problem_seed = (spec.key, digit, replicate)
    rng = problem_rng(*problem_seed)
    X, y = measure(w, n, spec.noise_var, rng)
    prior = oracle_prior(w, pixel_groups, spec.noise_var)
    kind = setting.get("prior_knowledge", "none")
    if kind != "none":
        p0 = group_prior_knowledge(grouping, pixel_groups, prior.p0_group, kind,
                                   problem_rng(spec.key, digit, 1000 + replicate))
        prior = PriorInfo(p0_group=p0, p0_coef=prior.p0_coef, v0=prior.v0, noise_var=prior.noise_var)
    problem = GroupSparseProblem(w_true=w, groups=pixel_groups, X=X, y=y, noise_var=spec.noise_var)
    key = spec.key
    # Random rows come from a stream shared by E6's prior kinds, so they are compared on the same rows.
    return Case(problem, pixel_groups, prior, problem_seed, (key, digit, replicate, 1), (key, digit, replicate, 2))


N_CALIBRATION = 5  # grouping images of the digit a method may calibrate on (never an image that is reconstructed)
_CALIBRATION: dict[tuple, list] = {}


def calibration_problems(data: MnistData, digit: int, groups: str = "similarity") -> list:
    """``(X, y, w, groups)`` of :data:`N_CALIBRATION` grouping images of ``digit``, each measured with E4's
    ``n_initial`` rows and noise, rows of their own (computed once per process)."""
    key = (data.source, data.images.shape[0], digit, groups)
    if key not in _CALIBRATION:
        spec = MNIST["E4"]
        _images, grouping = digit_images(data, digit)
        pixel_groups = digit_groups(grouping, digit, groups, spec.group_size)
        problems = []
        for j, w in enumerate(grouping[:N_CALIBRATION]):
            rng = problem_rng(EXPERIMENT_INDEX["E4"], digit, 3000 + j)  # rows no experiment uses
            X, y = measure(w, spec.n_initial, spec.noise_var, rng)
            problems.append((X, y, w, pixel_groups))
        _CALIBRATION[key] = problems
    return _CALIBRATION[key]
