"""Experiment E7 (beyond the paper): images measured in pixels, reconstructed in an orthonormal wavelet basis.

Images are not sparse in pixels but compressible in a wavelet basis ``Psi``: measurements ``y = X x + noise``
of an image ``x = Psi^T c`` are fitted on the coefficients ``c`` with the effective rows ``X Psi^T``
(:mod:`adaptcs.bases.images`; groups are 2 x 2 blocks within a subband). Every strategy starts from the same
``d / 16`` random rows (on the sphere of radius ``sqrt(d)``) and adds ``d / 256`` rows per step, 48 steps by
default (to ``n = d / 4``):

- ``design``: the leading eigenvectors of the posterior covariance of ``c``, measured as ``Psi^T a``;
- ``random``: more random rows;
- ``topdown``: rows that measure the wavelet coefficients one by one, coarse scales first, at norm ``sqrt(d)``
  (the non-adaptive design Seeger & Nickisch, ICML 2008, found hard to beat);
- ``pca``: the leading principal components of training images (never an image that is reconstructed), at
  norm ``sqrt(d)``.

Settings are (image source, side): ``natural`` images are scikit-image's bundled photographs (offline),
square centre crops resized to ``side x side`` with anti-aliasing, grey values in [0, 1]; their PCA is
learned from random square crops of scikit-image's other bundled images. ``mnist`` images are E4-E6's
digit 3 images (28 x 28) resized to ``side x side``; their PCA is learned from the grouping halves of all ten
digits (none is reconstructed). The images are not exactly sparse in any basis, so there is no oracle:
hyper-parameters are learned from the measurements. The same training images give ``gss_ep_profile`` its prior
knowledge: the relative slab variances of the scales (:func:`training_profile`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace

import numpy as np

from adaptcs.bases.images import BASES, make_basis, scale_profile
from adaptcs.data.synthetic import GroupSparseProblem, problem_rng
from adaptcs.experiments.base import Experiment
from adaptcs.experiments.case import Case
from adaptcs.experiments.mnist import cached_mnist, digit_images
from adaptcs.measurement import sphere_rows
from adaptcs.models.registry import PriorInfo

KEY = 7  # seeds E7's problems (E1-E6 use 1-6)
SOURCES = ("natural", "mnist")
SIDES = (32, 64)
# scikit-image's bundled photographs (no download): the images to reconstruct, in replicate order ...
NATURAL_IMAGES = ("camera", "astronaut", "coffee", "chelsea", "rocket", "coins", "moon", "clock")
# ... and the ones whose crops train the PCA rows (never reconstructed)
NATURAL_TRAINING = ("brick", "grass", "gravel", "immunohistochemistry", "retina", "page", "text",
                    "hubble_deep_field", "horse", "microaneurysms")
N_PCA_CROPS = 2000
MNIST_DIGIT = 3
STRATEGIES = ("design", "random", "topdown", "pca", "predict")  # topdown, pca: rows fixed in advance (fixed_rows)
WAVELET_OPTIONS = ("source", "cache_dir", "path", "groups", "basis")  # the config's mnist block and the basis


@dataclass(frozen=True)
class WaveletExperiment(Experiment):
    """E7's definition: settings (image source x side) and the measurement protocol.

    Attributes
    ----------
    basis : str
        One of :data:`adaptcs.bases.images.BASES` (default Haar, 4 x 4 approximation).
    noise_var : float
        Variance of the Gaussian measurement noise (pixel values are in [0, 1]; rows have norm sqrt(d)).
    n_steps : int
        Design steps; each adds ``batch_size(setting)`` rows.
    options : dict
        The config's ``mnist`` block (for the MNIST settings) and, when given, ``basis``.
    """

    config_keys = ("settings", "basis")
    has_oracle = False  # images are not exactly sparse in any basis
    has_training_images = True  # the PCA rows' training images give gss_ep_profile its profile of the scales

    name: str = "E7"
    basis_name: str = "haar"
    noise_var: float = 1e-2
    n_steps: int = 48
    settings: tuple = tuple({"images": source, "side": side} for side in SIDES for source in SOURCES)
    strategies: tuple = STRATEGIES
    figures: tuple = ("curves", "images")
    options: dict = field(default_factory=dict)

    key = KEY

    @property
    def d(self) -> int:
        """Coefficients of the smallest setting (the bound every setting's rows must respect)."""
        return min(s["side"] for s in self.settings) ** 2

    def with_options(self, options: dict) -> WaveletExperiment:
        """With the MNIST options and the basis the options name (ValueError for an unknown option or basis)."""
        unknown = set(options) - set(WAVELET_OPTIONS)
        if unknown:
            raise ValueError(f"unknown E7 option(s): {sorted(unknown)}")
        return replace(self, basis_name=check_basis(options.get("basis", "haar")), options=dict(options))

    def configured(self, entry: dict, config: dict) -> WaveletExperiment:
        """With the config's ``mnist`` block and the entry's ``basis``."""
        return self.with_options(dict(config.get("mnist", {})) | ({"basis": entry["basis"]} if "basis" in entry
                                                                   else {}))

    def check_replicates(self, replicates: int, settings) -> None:
        """At most the images every selected setting has."""
        available = min(n_replicates(self.settings[s]) for s in settings)
        if replicates > available:
            raise ValueError(f"replicates is {replicates}; its settings {list(settings)} have {available} images "
                             "each")

    @staticmethod
    def n_initial(setting: dict) -> int:
        """Random rows before the loop: d / 16."""
        return setting["side"] ** 2 // 16

    def batch_size(self, setting: int) -> int:
        """Rows per step: d / 256."""
        return max(1, self.settings[setting]["side"] ** 2 // 256)

    def max_steps(self) -> int:
        """Most steps every setting allows (its rows then at most its d)."""
        return min((s["side"] ** 2 - self.n_initial(s)) // self.batch_size(i) for i, s in enumerate(self.settings))

    def steps_limit(self) -> str:
        """Why :meth:`max_steps` is the limit."""
        return "d / 16 initial rows + n_steps steps of d / 256 rows must not exceed d"

    def checkpoints(self, setting: int, n_steps: int) -> tuple:
        """Rows at which reconstructions are kept: the start and a quarter, half and all of the loop."""
        n0, k = self.n_initial(self.settings[setting]), self.batch_size(setting)
        return tuple(sorted({n0 + k * ((n_steps * q) // 4) for q in (0, 1, 2, 4)}))

    def image_side(self, setting: int) -> int:
        """The setting's side."""
        return self.settings[setting]["side"]

    def basis(self, setting: int):
        """The orthonormal basis of the setting's images."""
        return make_basis(self.basis_name, self.settings[setting]["side"])

    def fixed_rows(self, setting: int, strategy: str, n_rows: int) -> np.ndarray:
        """The rows of ``topdown`` and ``pca`` (pixels, norm sqrt(d))."""
        self.check_setting(setting)
        return sequence_rows(strategy, self.settings[setting], self.basis(setting), n_rows, self.options)

    def case(self, setting: int, replicate: int) -> Case:
        """The problem of (setting, replicate) (its basis is :meth:`basis`)."""
        return wavelet_case(setting, replicate, spec=self, data_options=self.options)[0]


E7 = WaveletExperiment()


def check_basis(name: str) -> str:
    """``name`` if it is one of :data:`adaptcs.bases.images.BASES` (ValueError otherwise)."""
    if name not in BASES:
        raise ValueError(f"E7 basis must be one of {BASES}; got {name!r}")
    return name


@functools.lru_cache(maxsize=8)
def natural_images(side: int) -> np.ndarray:
    """The natural images to reconstruct, (len(NATURAL_IMAGES), side^2) grey values in [0, 1]."""
    return np.asarray([_resized(_square(_grey(name)), side) for name in NATURAL_IMAGES])


@functools.lru_cache(maxsize=8)
def mnist_images(side: int, source: str = "embedded", cache_dir: str | None = None,
                 path: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(digit-3 images to reconstruct (100, side^2), PCA training images (1000, side^2)), resized from 28 x 28."""
    data = cached_mnist(source, cache_dir, path)
    reconstruct, _ = digit_images(data, MNIST_DIGIT)
    training = np.concatenate([digit_images(data, digit)[1] for digit in range(10)])
    resize = functools.partial(_resized_batch, side=side, source_side=28)
    return resize(reconstruct), resize(training)


def training_images(source: str, side: int, data_options: tuple = ()) -> np.ndarray:
    """The images that train the PCA rows and the profile of the scales, (m, side^2); never reconstructed."""
    return _natural_crops(side) if source == "natural" else mnist_images(side, **dict(data_options))[1]


@functools.lru_cache(maxsize=8)
def training_profile(source: str, side: int, basis_name: str, data_options: tuple = ()) -> np.ndarray:
    """Relative slab variances per scale label of the training images' coefficients
    (:func:`adaptcs.bases.images.scale_profile`), the prior knowledge of ``gss_ep_profile``."""
    profile = scale_profile(make_basis(basis_name, side), training_images(source, side, data_options))
    profile.setflags(write=False)
    return profile


@functools.lru_cache(maxsize=8)
def pca_rows(source: str, side: int, k: int, data_options: tuple = ()) -> np.ndarray:
    """The ``k`` leading principal components of the training images of ``source``, scaled to norm sqrt(d)."""
    from sklearn.decomposition import PCA

    training = training_images(source, side, data_options)
    if k > min(training.shape):
        raise ValueError(f"E7 pca: {k} rows asked for; the {training.shape[0]} training images of {source} give at "
                         f"most {min(training.shape)} components")
    pca = PCA(n_components=k, svd_solver="randomized" if k < training.shape[1] // 2 else "full", random_state=0)
    pca.fit(training)
    return pca.components_ * np.sqrt(side * side)


@functools.lru_cache(maxsize=2)
def _natural_crops(side: int) -> np.ndarray:
    """Random square crops (a quarter to all of the shorter side) of the training photographs, resized."""
    from skimage.transform import resize

    rng = problem_rng(KEY, 900, side)
    # shorter side 4 x side first: a crop then needs a small anti-aliased resize, not one of a megapixel image
    sources = []
    for name in NATURAL_TRAINING:
        image = _grey(name)
        scale = 4 * side / min(image.shape)
        if scale < 1:
            image = resize(image, (round(image.shape[0] * scale), round(image.shape[1] * scale)), anti_aliasing=True)
        sources.append(image)
    crops = []
    for i in range(N_PCA_CROPS):
        image = sources[i % len(sources)]
        h, w = image.shape
        size = int(rng.integers(min(h, w) // 4, min(h, w) + 1))
        top, left = int(rng.integers(0, h - size + 1)), int(rng.integers(0, w - size + 1))
        crops.append(_resized(image[top:top + size, left:left + size], side))
    crops = np.asarray(crops)
    crops.setflags(write=False)  # cached: shared by the PCA rows and the profile
    return crops


@functools.lru_cache(maxsize=32)
def _grey(name: str) -> np.ndarray:
    """A bundled scikit-image picture as grey values in [0, 1]."""
    import skimage.data
    from skimage.color import rgb2gray, rgba2rgb
    from skimage.util import img_as_float

    image = img_as_float(getattr(skimage.data, name)())
    if image.ndim == 3 and image.shape[2] == 4:
        image = rgba2rgb(image)
    return rgb2gray(image) if image.ndim == 3 else image


def _square(image: np.ndarray) -> np.ndarray:
    h, w = image.shape
    s = min(h, w)
    return image[(h - s) // 2:(h - s) // 2 + s, (w - s) // 2:(w - s) // 2 + s]


def _resized(image: np.ndarray, side: int) -> np.ndarray:
    from skimage.transform import resize

    return np.clip(resize(image, (side, side), anti_aliasing=True), 0.0, 1.0).ravel()


def _resized_batch(images: np.ndarray, side: int, source_side: int) -> np.ndarray:
    return np.asarray([_resized(x.reshape(source_side, source_side), side) for x in images])


def images_of(setting: dict, data_options: dict | None = None) -> np.ndarray:
    """The images to reconstruct of a setting, (m, side^2)."""
    if setting["images"] == "natural":
        return natural_images(setting["side"])
    return mnist_images(setting["side"], **_mnist_options(data_options))[0]


def _mnist_options(data_options: dict | None) -> dict:
    options = dict(data_options or {})
    return {k: options[k] for k in ("source", "cache_dir", "path") if k in options}


def _data_key(setting: dict, data_options: dict | None) -> tuple:
    """The data options that decide a setting's training images, hashable (none for natural images)."""
    return tuple(sorted(_mnist_options(data_options).items())) if setting["images"] == "mnist" else ()


def n_replicates(setting: dict) -> int:
    """Images available in a setting."""
    return len(NATURAL_IMAGES) if setting["images"] == "natural" else 100


def wavelet_case(setting_index: int, replicate: int, *, spec: WaveletExperiment = E7, data_options=None):
    """The problem of (setting, replicate): the image, its basis, groups and initial random rows.

    Returns
    -------
    (Case, Basis)
        The case's problem holds the image (pixels) and the initial pixel rows; its ``groups`` and the case's
        ``fit_groups`` are the basis coefficients' groups.
    """
    spec.check_setting(setting_index)
    setting = spec.settings[setting_index]
    images = images_of(setting, data_options)
    if not 0 <= replicate < images.shape[0]:
        raise ValueError(f"E7 {setting['images']} images: replicate must be in 0..{images.shape[0] - 1}; got "
                         f"{replicate}")
    basis = spec.basis(setting_index)
    x = images[replicate]
    problem_seed = (KEY, setting_index, replicate)
    rng = problem_rng(*problem_seed)
    X = sphere_rows(rng, spec.n_initial(setting), basis.d)
    y = X @ x + rng.normal(0.0, np.sqrt(spec.noise_var), size=X.shape[0])
    groups = basis.groups()
    # no oracle (the images are not exactly sparse): only the noise variance, which an instrument can calibrate
    profile = training_profile(setting["images"], setting["side"], spec.basis_name,
                               _data_key(setting, data_options))
    prior = PriorInfo(p0_group=np.nan, p0_coef=np.nan, v0=np.nan, noise_var=spec.noise_var, scales=basis.scales(),
                      scale_profile=profile)
    problem = GroupSparseProblem(w_true=x, groups=groups, X=X, y=y, noise_var=spec.noise_var)
    return Case(problem, groups, prior, problem_seed, (KEY, setting_index, replicate, 1),
                (KEY, setting_index, replicate, 2)), basis


def sequence_rows(strategy: str, setting: dict, basis, n_rows: int, data_options=None) -> np.ndarray:
    """The fixed rows of a non-adaptive strategy (pixels, norm sqrt(d)), shape (n_rows, d)."""
    if strategy == "topdown":
        return basis.coarse_to_fine(n_rows)
    if strategy == "pca":
        return pca_rows(setting["images"], setting["side"], n_rows, _data_key(setting, data_options))
    raise ValueError(f"E7 supplies rows for topdown and pca; got {strategy!r}")
