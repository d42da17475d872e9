"""Experiments on the user's own signals: a folder of images or a ``.npy`` of signals, with groups from a file,
from similarity over a second folder of images (as E4 grows them), or fixed blocks.

Each signal is measured as in E5: ``n_initial`` random rows on the sphere of radius sqrt(d) with Gaussian noise,
then ``n_steps`` rows chosen by the strategy, refitting after each. The signals are the truth the errors are
measured against; the methods never see them (except the oracle hyper-parameters, which need exactly sparse
signals: prefer ``hyperparameters: [learned]`` for real data).

Images: PNG (or anything scikit-image reads), converted to grey (transparency composited on white), cropped to
their central square if they are not square, resized with scikit-image to ``side x side`` (anti-aliased), scaled
to [0, 1] by the image type's range (a float image outside [0, 1] mapped linearly onto it), flattened row-major;
each change is logged, and a file that cannot be decoded, an animation or an all-black image is an error naming
the file, raised when the config is read. Files are taken in sorted name order; replicate r is the r-th file.
``.npy``: an array of shape (m, d), replicate r is row r.

With ``basis`` (images only) the images are reconstructed in that orthonormal basis as in E7: the rows measure
pixels, the methods fit the basis coefficients in the basis's groups (``gss_ep_scales``: a prior per scale), the
strategies ``topdown`` (basis images coarse to fine) and, for wavelets, ``predict`` are available, and there is
no oracle.
"""

from __future__ import annotations

import functools
import logging
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from adaptcs.bases.images import BASES, make_basis
from adaptcs.data.mnist import block_groups, similarity_groups
from adaptcs.data.synthetic import GroupSparseProblem, problem_rng
from adaptcs.experiments.base import Experiment
from adaptcs.experiments.case import Case
from adaptcs.measurement import measure
from adaptcs.models.registry import PriorInfo

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".gif")
GROUP_KINDS = ("blocks", "file", "similarity")
DEFAULTS = {"noise_var": 1e-4, "n_initial": 32}


log = logging.getLogger(__name__)

@dataclass(frozen=True)
class UserExperiment(Experiment):
    """A ``kind: user`` experiment of the workflow config (see config/README.md).

    Attributes
    ----------
    name : str
    images : str or None
        Folder of images to reconstruct.
    signals : str or None
        ``.npy`` file of signals, shape (m, d).
    side : int or None
        Images are resized to ``side x side`` (required with ``images``).
    groups : dict
        ``{"blocks": b}`` (b x b pixel blocks of an image; or runs of b coefficients of a signal),
        ``{"file": path}`` (CSV, one non-negative integer label per coefficient) or
        ``{"similarity": folder, "size": k}`` (groups of k pixels grown by similarity over those images).
    noise_var : float
        Variance of the simulated measurement noise (in the units of the signal).
    n_initial : int
        Random rows before the design loop.
    n_steps : int
        Rows added by the design loop unless the experiment's ``n_steps`` says otherwise.
    checkpoint_rows : tuple of int
        Numbers of rows at which reconstructions are kept (for the images figure); default four points.
    basis_name : str or None
        One of :data:`adaptcs.bases.images.BASES`: the images' coefficients in it are fitted (None: the pixels).
    options : dict
        ``kind: user`` and the ``data`` block as the config gave it (recorded in result files).
    """

    config_keys = ("kind", "data")

    name: str
    images: str | None = None
    signals: str | None = None
    side: int | None = None
    groups: dict = field(default_factory=lambda: {"blocks": 2})
    noise_var: float = DEFAULTS["noise_var"]
    n_initial: int = DEFAULTS["n_initial"]
    n_steps: int = 32
    checkpoint_rows: tuple = ()
    basis_name: str | None = None
    strategies: tuple = ("design", "random")
    settings: tuple = ({},)
    options: dict = field(default_factory=dict)

    @classmethod
    def from_config(cls, name: str, entry: dict, config: dict) -> UserExperiment:
        """From the config entry: its ``data`` block, checked at once (the files are read)."""
        try:
            experiment = cls.from_options(name, {"kind": "user", **entry["data"]})
        except ValueError as exc:
            raise ValueError(f"experiments.{name}: {exc}") from None
        try:
            experiment.signals_array()
            experiment.groups_array()
        except (ValueError, OSError) as exc:
            raise ValueError(f"experiments.{name}.data: {exc}") from None
        return experiment

    @classmethod
    def from_options(cls, name: str, options: dict) -> UserExperiment:
        """From the options recorded in result files: ``kind: user`` and the ``data`` block of the config entry
        (ValueError naming the key for anything wrong)."""
        if re.fullmatch(r"E\d+", name):
            raise ValueError("names E<number> are kept for built-in experiments; give a user experiment another name")
        given = {"kind": "user", **options}
        options = {k: v for k, v in options.items() if k != "kind"}
        unknown = set(options) - {"images", "signals", "side", "groups", "noise_var", "n_initial", "checkpoints",
                                  "basis"}
        if unknown:
            raise ValueError(f"{name}: unknown data option(s) {sorted(unknown)}")
        if ("images" in options) == ("signals" in options):
            raise ValueError(f"{name}: give exactly one of data.images (a folder of images) and data.signals (.npy)")
        if "images" in options and not isinstance(options.get("side"), int):
            raise ValueError(f"{name}: data.side (images are resized to side x side pixels) is required with images")
        basis = options.get("basis")
        if basis is not None:
            if basis not in BASES or "images" not in options:
                raise ValueError(f"{name}: data.basis must be one of {BASES} and needs data.images; got {basis!r}")
            if "groups" in options:
                raise ValueError(f"{name}: with data.basis the groups are the basis's (2 x 2 blocks of a subband); "
                                 "leave out data.groups")
            try:
                make_basis(basis, options["side"])
            except ValueError as exc:
                raise ValueError(f"{name}: data.basis {basis!r} at side {options['side']}: {exc}") from None
        groups = dict(options.get("groups", {"blocks": 2}))
        kinds = [k for k in GROUP_KINDS if k in groups]
        if len(kinds) != 1 or set(groups) - {kinds[0], "size"} or ("size" in groups) != (kinds[0] == "similarity"):
            raise ValueError(f"{name}: data.groups must be one of {{blocks: b}}, {{file: path}} or "
                             f"{{similarity: folder, size: k}}; got {groups}")
        spec = cls(name=name, images=options.get("images"), signals=options.get("signals"), side=options.get("side"),
                   groups=groups, noise_var=float(options.get("noise_var", DEFAULTS["noise_var"])),
                   n_initial=int(options.get("n_initial", DEFAULTS["n_initial"])),
                   checkpoint_rows=tuple(int(c) for c in options.get("checkpoints", ())), basis_name=basis,
                   strategies=("design", "random") if basis is None else ("design", "random", "topdown", "predict"),
                   options=given)
        if spec.noise_var <= 0 or spec.n_initial < 1:
            raise ValueError(f"{name}: data.noise_var must be > 0 and data.n_initial >= 1")
        return spec

    @property
    def is_image(self) -> bool:
        """Whether the signals are images (a folder) rather than a ``.npy`` of signals."""
        return self.images is not None

    @property
    def d(self) -> int:
        """Coefficients per signal."""
        return self.side * self.side if self.is_image else int(load_signals_npy(self.signals).shape[1])

    @property
    def key(self) -> int:
        """A stable number for the experiment's name (seeds its problems; E1-E6 use 0-5)."""
        return 1000 + zlib.crc32(self.name.encode()) % 1_000_000

    @property
    def figures(self) -> tuple:
        """The figure kinds made for this experiment."""
        return ("curves", "images") if self.is_image else ("curves", "example")

    def checkpoints(self, setting: int, n_steps: int) -> tuple:
        """The given checkpoints, or the initial rows and three points along a loop of ``n_steps`` rows."""
        if self.checkpoint_rows:
            return self.checkpoint_rows
        return tuple(sorted({self.n_initial + (n_steps * q) // 4 for q in (0, 1, 2, 4)}))

    def image_side(self, setting: int) -> int | None:
        """``side`` for images, None for a ``.npy`` of signals."""
        return self.side if self.is_image else None

    def basis(self, setting: int):
        """The basis the images are reconstructed in (None: pixels or the signals' own values)."""
        return None if self.basis_name is None else make_basis(self.basis_name, self.side)

    def fixed_rows(self, setting: int, strategy: str, n_rows: int) -> np.ndarray:
        """``topdown`` with a basis: its images, coarse scales first (pixels, norm sqrt(d))."""
        if strategy == "topdown" and self.basis_name is not None:
            return self.basis(setting).coarse_to_fine(n_rows)
        return super().fixed_rows(setting, strategy, n_rows)

    def check_replicates(self, replicates: int, settings) -> None:
        """At most one replicate per signal."""
        n_signals = self.signals_array().shape[0]
        if replicates > n_signals:
            raise ValueError(f"replicates is {replicates}; its data has {n_signals} signals")

    def case(self, setting: int, replicate: int) -> Case:
        """E5's protocol on the signal ``replicate``."""
        self.check_setting(setting)
        return user_case(self, replicate)

    def check_oracle(self, case: Case | None = None) -> None:
        """Refuse the oracle for images in a basis (their coefficients are not exactly sparse) and for a signal
        that is not exactly group-sparse (see :func:`check_oracle`)."""
        if self.basis_name is not None:
            raise ValueError(f"{self.name}: images in a basis are not exactly sparse, so there is no oracle: use "
                             "hyperparameters: [learned]")
        if case is not None:
            check_oracle(self, case)

    def signals_array(self) -> np.ndarray:
        """All signals, shape (m, d)."""
        return load_images(self.images, self.side) if self.is_image else load_signals_npy(self.signals)

    def groups_array(self) -> np.ndarray:
        """Group label of every coefficient, shape (d,)."""
        if self.basis_name is not None:
            return self.basis(0).groups()
        d = self.d
        if "blocks" in self.groups:
            b = int(self.groups["blocks"])
            if self.is_image:
                return block_groups(self.side, b)
            if d % b:
                raise ValueError(f"{self.name}: groups.blocks ({b}) must divide the signal length ({d})")
            return np.arange(d) // b
        if "file" in self.groups:
            labels = np.loadtxt(self.groups["file"], delimiter=",", ndmin=1).ravel()
            if labels.shape[0] != d or not np.all(labels == np.round(labels)) or labels.min() < 0:
                raise ValueError(f"{self.groups['file']}: must hold {d} non-negative integer group labels "
                                 f"(one per coefficient); got {labels.shape[0]} values")
            return labels.astype(np.int64)
        if not self.is_image:
            raise ValueError(f"{self.name}: groups by similarity need images")
        grouping = load_images(self.groups["similarity"], self.side)
        return similarity_groups(grouping, int(self.groups["size"]), problem_rng(self.key, 0, 1))


@functools.lru_cache(maxsize=8)
def load_images(folder: str, side: int) -> np.ndarray:
    """Every image of ``folder`` (sorted by name) as grey values in [0, 1], resized to ``side x side``; (m, side^2).

    Each file is read by :func:`read_grey_image`: what it cannot use is an error naming the file, and what it
    changes (transparency, a crop to a square, a float range) it logs.
    """
    from skimage.transform import resize

    path = Path(folder)
    if not path.is_dir():
        raise ValueError(f"{folder}: no such folder of images")
    files = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise ValueError(f"{folder}: no images ({', '.join(IMAGE_SUFFIXES)})")
    images = []
    for file in files:
        image = np.clip(resize(read_grey_image(file), (side, side), anti_aliasing=True), 0.0, 1.0)
        if not np.any(image > 0.0):
            raise ValueError(f"{file}: the image is all black at {side} x {side} pixels: there is nothing to "
                             "reconstruct, and a relative error against it is undefined")
        images.append(image.ravel())
    return np.asarray(images)


def read_grey_image(file: Path) -> np.ndarray:
    """One still image as a square grey array in [0, 1].

    Grey, grey with alpha, RGB and RGBA are accepted; transparency is composited on white (logged); a
    non-square image is cropped to its central square (logged, never stretched); a float image outside [0, 1]
    is mapped linearly onto it (logged). A file that cannot be decoded, an animation and any other layout are
    errors naming the file.
    """
    from skimage.color import rgb2gray
    from skimage.io import imread
    from skimage.util import img_as_float

    try:
        raw = imread(file)
    except Exception as exc:  # noqa: BLE001 (the decoders raise many kinds; each means an unusable file)
        raise ValueError(f"{file}: cannot be read as an image ({type(exc).__name__}: {exc})") from None
    if raw.ndim == 4 and raw.shape[0] == 1:  # a still GIF reads as one frame
        raw = raw[0]
    if raw.ndim == 4 or (raw.ndim == 3 and raw.shape[-1] not in (2, 3, 4)):
        raise ValueError(f"{file}: has {raw.shape[0]} frames (an animation or a stack); give one still image")
    if raw.ndim not in (2, 3) or min(raw.shape[:2]) < 1:
        raise ValueError(f"{file}: not a grey or colour image (array of shape {raw.shape})")
    if raw.dtype.kind == "f":
        image = raw.astype(float)
        if not np.all(np.isfinite(image)):
            raise ValueError(f"{file}: has pixels that are not finite numbers")
        low, high = float(image.min()), float(image.max())
        if low < 0.0 or high > 1.0:
            image = (image - low) / (high - low) if high > low else np.zeros_like(image)
            log.warning("%s: float pixels in [%g, %g], outside [0, 1]: mapped linearly onto [0, 1]", file, low, high)
    else:
        image = img_as_float(raw)
    if image.ndim == 3:
        if image.shape[2] in (2, 4):  # with transparency: composite on white, as scikit-image's rgba2rgb does
            alpha = image[..., -1:]
            if np.any(alpha < 1.0):
                log.warning("%s: transparent pixels composited on a white background", file)
            image = image[..., :-1] * alpha + (1.0 - alpha)
        image = image[..., 0] if image.shape[2] == 1 else rgb2gray(image)
    rows, cols = image.shape
    if rows != cols:
        size = min(rows, cols)
        top, left = (rows - size) // 2, (cols - size) // 2
        image = image[top:top + size, left:left + size]
        log.warning("%s: %d x %d pixels, not square: cropped to its central %d x %d square", file, rows, cols, size,
                    size)
    return image


@functools.lru_cache(maxsize=8)
def load_signals_npy(path: str) -> np.ndarray:
    """A ``.npy`` of signals, shape (m, d), finite."""
    signals = np.load(path, allow_pickle=False)
    if signals.ndim != 2 or not np.all(np.isfinite(signals)):
        raise ValueError(f"{path}: signals must be a finite array of shape (number of signals, d); got shape "
                         f"{signals.shape}")
    return signals.astype(float)


def user_case(spec: UserExperiment, replicate: int):
    """The problem of one signal: E5's protocol (random initial rows, noise) on the user's signal."""
    signals = spec.signals_array()
    if not 0 <= replicate < signals.shape[0]:
        raise ValueError(f"{spec.name}: replicate must be in 0..{signals.shape[0] - 1} (one per signal); got "
                         f"{replicate}")
    groups = spec.groups_array()
    if groups.shape[0] != signals.shape[1]:
        raise ValueError(f"{spec.name}: {groups.shape[0]} group labels for signals of {signals.shape[1]} values")
    w = signals[replicate]
    problem_seed = (spec.key, 0, replicate)
    X, y = measure(w, spec.n_initial, spec.noise_var, problem_rng(*problem_seed))
    if spec.basis_name is not None:  # as E7: no oracle, a prior per scale of the basis
        prior = PriorInfo(p0_group=np.nan, p0_coef=np.nan, v0=np.nan, noise_var=spec.noise_var,
                          scales=spec.basis(0).scales())
    else:  # the oracle (from the true signal, as in E4-E6), only defined for exactly sparse signals (check_oracle)
        nonzero = w != 0
        active = np.bincount(np.unique(groups, return_inverse=True)[1], weights=nonzero) > 0
        prior = PriorInfo(p0_group=float(active.mean()), p0_coef=float(nonzero.mean()),
                          v0=float(np.mean(np.abs(w[nonzero])) ** 2) if nonzero.any() else np.nan,
                          noise_var=spec.noise_var)
    problem = GroupSparseProblem(w_true=w, groups=groups, X=X, y=y, noise_var=spec.noise_var)
    return Case(problem, groups, prior, problem_seed, (spec.key, 0, replicate, 1), (spec.key, 0, replicate, 2))

def check_oracle(spec: UserExperiment, case) -> None:
    """Refuse oracle hyper-parameters for a signal that is not exactly group-sparse (or is zero): the paper's
    oracle p0 (the fraction of active groups) would be 1 or 0."""
    if not 0.0 < case.prior.p0_group < 1.0:
        raise ValueError(f"{spec.name}: the oracle hyper-parameters need exactly group-sparse signals (some groups "
                         f"all zero, some not); signal {case.problem_seed[2]} has {case.prior.p0_group:.0%} of its "
                         "groups active. Use hyperparameters: [learned]")
