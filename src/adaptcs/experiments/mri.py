"""``kind: mri``: Cartesian k-space line design on simulated k-space of brain slices, one coil or a receive array
(docs/mri.md).

Slices are replicates, masks are strategies: ``design`` (the line of largest exact information gain, refit, repeat),
``low_to_high``, ``equispaced``, ``variable_density`` and ``jittered_density`` (random, drawn per slice from the
design stream), ``random`` (uniform random lines), ``offline_greedy`` (learned on the training slices, then
fixed) and ``oracle_greedy`` (knows the image: a greedy bound on the magnitude error in the brain). Every mask
starts from the same centre lines and is reconstructed by the same line model (methods ``lines_gaussian``,
``lines_phase``, ``lines_spike_slab``), scored
at the same line counts on the magnitude image inside the brain (relative error, PSNR with the reference's brain
maximum as peak, SSIM averaged over the brain).

The data are simulated (:mod:`adaptcs.mri.data`): the Colin27 T1 average (a recorded MRI volume) with a smooth
random phase, its k-space taken on a 0.5 mm grid and cropped, complex noise added; no raw scanner k-space. The
noise variance the models use is estimated from the readout edges of the centre lines (nothing from the truth), so
the hyper-parameters are learned ("learned" is the only protocol).

With ``data.coils`` the slices are simulated through a receive array (sigpy's birdcage sensitivities, noise
correlated between neighbouring coils): the coils are prewhitened with the noise covariance estimated from the
readout edges of the centre lines, the sensitivities are ESPIRiT's of those lines (or the simulation's), the method is
the coil line model (``lines_coils``) and the truth is the noise-free image as those sensitivities combine it.
"""

from __future__ import annotations

import functools
import re
import time
import zlib
from dataclasses import dataclass, field, replace

import numpy as np

from adaptcs.bases.separable import SeparableWavelet
from adaptcs.data.synthetic import GroupSparseProblem
from adaptcs.design.simulation import SequentialDesignResult
from adaptcs.experiments.base import Experiment, Plan
from adaptcs.experiments.case import Case
from adaptcs.metrics import magnitude_scores
from adaptcs.models.line_spike_slab import pair_profile
from adaptcs.models.registry import PriorInfo
from adaptcs.mri.coils import espirit_maps, least_squares_image, noise_covariance_from_readout_edges, prewhiten
from adaptcs.mri.data import PHASE_REGIMES, KSpaceSlice, colin27_kspace, colin27_slices
from adaptcs.mri.design import FIXED_MASKS, centre_lines, design_lines, fixed_mask, largest_gain
from adaptcs.mri.greedy import offline_greedy, oracle_choice
from adaptcs.mri.noise import noise_from_readout_edges
from adaptcs.mri.replay import colin27_magnitude_profile
from adaptcs.operators import CoilKSpaceLines, KSpaceLines

DATA_KEYS = ("source", "size", "wavelet", "level", "noise", "phase", "start", "counts", "coils", "maps")
MAPS = ("espirit", "simulated")  # the sensitivities the coil model is told
MAX_COILS = 32
DEFAULT_STRATEGIES = ("design", "low_to_high", "partial_fourier_6_8", "variable_density")
SOURCES = ("colin27",)


@dataclass(frozen=True)
class MRILinesExperiment(Experiment):
    """A ``kind: mri`` experiment of the workflow config (config/README.md, "MRI k-space lines").

    Attributes
    ----------
    name : str
    size : int
        Slices are ``size x size`` pixels over a 256 mm field of view; phase encodes (lines) along the first axis.
    wavelet, level : str, int
        The separable orthonormal wavelet (:class:`adaptcs.bases.separable.SeparableWavelet`).
    noise : float
        Standard deviation of the complex k-space noise, as a fraction of the image's 99th magnitude percentile.
    phase : str
        The simulated phase regime (:data:`adaptcs.mri.data.PHASE_REGIMES`; default "spin_echo").
    start : int
        Centre lines every mask starts with (default size / 16).
    counts : tuple of int
        Line counts at which every mask is scored (default size / 8 and size / 4: R = 8 and R = 4).
    coils : int
        Coils of the simulated receive array; 0 (the default): one coil, no array.
    maps : str
        With coils, the sensitivities the coil model is told: "espirit" (of the centre lines, the default) or
        "simulated" (the simulation's own).
    options : dict
        ``kind: mri`` and the ``data`` block as the config gave it (recorded in result files).
    """

    config_keys = ("kind", "data")
    has_oracle = False  # a real anatomy is not exactly sparse; the noise is estimated, the prior learned
    has_training_images = True  # the slab-variance profile comes from the training slices
    kspace_lines = True
    measurement_words = "k-space lines"
    error_words = "relative error of the magnitude in the brain"

    name: str
    size: int = 128
    wavelet: str = "db4"
    level: int = 4
    noise: float = 0.02
    phase: str = "spin_echo"
    start: int | None = None
    counts: tuple = ()
    coils: int = 0
    maps: str = "espirit"
    strategies: tuple = DEFAULT_STRATEGIES
    figures: tuple = ("curves", "images")
    options: dict = field(default_factory=dict)

    @classmethod
    def from_config(cls, name: str, entry: dict, config: dict) -> MRILinesExperiment:
        """From the config entry's ``data`` block (checked at once)."""
        try:
            return cls.from_options(name, {"kind": "mri", **entry.get("data", {})})
        except ValueError as exc:
            raise ValueError(f"experiments.{name}.data: {exc}") from None

    @classmethod
    def from_options(cls, name: str, options: dict) -> MRILinesExperiment:
        """From the options recorded in result files: ``kind: mri`` and the ``data`` block."""
        if re.fullmatch(r"E\d+", name):
            raise ValueError("names E<number> are kept for built-in experiments; give an MRI experiment another name")
        given = {"kind": "mri", **options}
        options = {k: v for k, v in options.items() if k != "kind"}
        unknown = set(options) - set(DATA_KEYS)
        if unknown:
            raise ValueError(f"{name}: unknown data option(s) {sorted(unknown)}; kind mri takes {list(DATA_KEYS)}")
        if options.get("source", "colin27") not in SOURCES:
            raise ValueError(f"{name}: data.source must be one of {SOURCES} (a k-space of your own: python -m "
                             f"adaptcs mri); got {options['source']!r}")
        size = _integer(name, options, "size", 128)
        level = _integer(name, options, "level", 4)
        noise = float(options.get("noise", 0.02))
        if not noise > 0.0:
            raise ValueError(f"{name}: data.noise must be positive; got {noise}")
        phase = options.get("phase", "spin_echo")
        if phase not in PHASE_REGIMES:
            raise ValueError(f"{name}: data.phase must be one of {PHASE_REGIMES}; got {phase!r}")
        try:
            SeparableWavelet((size, size), options.get("wavelet", "db4"), level)
        except ValueError as exc:
            raise ValueError(f"{name}: data.wavelet at size {size}: {exc}") from None
        if size % 2 or size > 512:
            raise ValueError(f"{name}: data.size must be even and at most 512; got {size}")
        start = _integer(name, options, "start", max(1, size // 16))
        counts = tuple(sorted({int(c) for c in options.get("counts", (size // 8, size // 4))}))
        if not counts or counts[0] < start or counts[-1] > size or start < 1:
            raise ValueError(f"{name}: data.counts must lie in start..size ({start}..{size}); got {list(counts)}")
        coils = _integer(name, options, "coils", 0)
        maps = options.get("maps", "espirit")
        if "coils" in options and not 2 <= coils <= MAX_COILS:
            raise ValueError(f"{name}: data.coils must lie in 2..{MAX_COILS} (leave it out for one coil); got {coils}")
        if "maps" in options and not coils:
            raise ValueError(f"{name}: data.maps is the sensitivities of a receive array; give data.coils too")
        if maps not in MAPS:
            raise ValueError(f"{name}: data.maps must be one of {MAPS}; got {maps!r}")
        if coils and maps == "espirit" and start < 4:
            raise ValueError(f"{name}: ESPIRiT calibrates on the centre lines: data.start must be at least 4 with "
                             f"data.coils (or data.maps: simulated); got {start}")
        return cls(name=name, size=size, wavelet=options.get("wavelet", "db4"), level=level, noise=noise,
                   phase=phase, start=start, counts=counts, coils=coils, maps=maps, options=given)

    # --- the protocol ------------------------------------------------------------------------------------------

    @property
    def key(self) -> int:
        """A stable number for the experiment's name (seeds the random masks)."""
        return 3000 + zlib.crc32(self.name.encode()) % 1_000_000

    @property
    def settings(self) -> tuple:
        """One setting: the grid, the wavelet, the noise (and the phase regime unless it is the default, the coils
        and their maps if there are coils)."""
        setting = {"size": self.size, "wavelet": self.wavelet, "level": self.level, "noise": self.noise}
        if self.phase != "spin_echo":  # the default's settings read as they did before the regimes existed
            setting["phase"] = self.phase
        if self.coils:
            setting.update(coils=self.coils, maps=self.maps)
        return (setting,)

    @property
    def refused_strategies(self) -> tuple:
        """The greedy orders score lines of one coil: not run on a receive array."""
        return ("offline_greedy", "oracle_greedy") if self.coils else ()

    @property
    def d(self) -> int:
        """Pixels per slice."""
        return self.size * self.size

    @property
    def n_steps(self) -> int:
        """Lines added after the centre ones (to the last count)."""
        return self.counts[-1] - self.start

    def check_n_steps(self, n_steps: int | None) -> int:
        """:attr:`n_steps`; the length is set by ``data.counts``, so any other value is refused."""
        if n_steps is not None and n_steps != self.n_steps:
            raise ValueError(f"{self.name}: an MRI experiment runs to its last line count ({self.n_steps} lines after "
                             "the centre ones); set data.counts instead of n_steps")
        return self.n_steps

    def checkpoints(self, setting: int, n_steps: int) -> tuple:
        """The line counts scored."""
        return self.counts

    def image_side(self, setting: int) -> int:
        return self.size

    def basis(self, setting: int) -> SeparableWavelet:
        return SeparableWavelet((self.size, self.size), self.wavelet, self.level)

    def check_replicates(self, replicates: int, settings) -> None:
        """One replicate per test slice."""
        available = colin27_slices("test")[0].shape[0]
        if replicates > available:
            raise ValueError(f"replicates is {replicates}; the Colin27 test set has {available} slices")

    def plan(self, setting: int, n_steps: int, strategy: str) -> Plan:
        self.check_setting(setting)
        return Plan(n_steps=n_steps, batch_size=1, checkpoints=self.counts, basis=self.basis(setting),
                    image_side=self.size)

    # --- problems ----------------------------------------------------------------------------------------------

    def acquisition(self, replicate: int) -> KSpaceSlice:
        """Test slice ``replicate``, simulated (:func:`adaptcs.mri.data.colin27_kspace`); with coils, as the coil
        model sees it (:func:`_coil_view`)."""
        slices = _acquisitions(self.size, self.noise, "test", self.phase, self.coils or None)
        if not 0 <= replicate < len(slices):
            raise ValueError(f"{self.name}: replicate must be in 0..{len(slices) - 1} (one per test slice)")
        if not self.coils:
            return slices[replicate]
        return _coil_view(self.size, self.noise, self.phase, self.coils, self.start, self.maps, replicate)

    def case(self, setting: int, replicate: int) -> Case:
        """Slice ``replicate``: the truth is the magnitude of the noise-free reference divided by its brain maximum
        (so PSNR's peak is 1); the models are told the basis, the training profile and the noise variance estimated
        from the readout edges of the centre lines."""
        self.check_setting(setting)
        acq = self.acquisition(replicate)
        peak = float(np.abs(acq.reference)[acq.mask].max())
        truth = (np.abs(acq.reference) / peak).ravel()
        # one coil: its noise from the readout edges; coils: prewhitened by the edges' covariance, so variance 1
        noise_var = 1.0 if self.coils else noise_from_readout_edges(acq.kspace[centre_lines(self.size, self.start)])
        problem = GroupSparseProblem(w_true=truth, groups=np.zeros(self.d, dtype=np.int64), X=np.zeros((0, self.d)),
                                     y=np.zeros(0), noise_var=acq.noise_var)
        basis = self.basis(setting)
        prior = PriorInfo(p0_group=np.nan, p0_coef=np.nan, v0=np.nan, noise_var=noise_var, basis=basis,
                          scale_profile=self.prior_profile(), y_profile=colin27_magnitude_profile(basis),
                          sensitivities=acq.sensitivities if self.coils else None)
        seed = (self.key, setting, replicate)
        return Case(problem, problem.groups, prior, seed, (*seed, 1), (*seed, 2),
                    region=self.region(setting, replicate))

    def prior_profile(self) -> np.ndarray:
        """Slab variances per pair of scales from the training slices' noise-free references (never a test slice):
        :func:`adaptcs.models.line_spike_slab.pair_profile`."""
        return _profile(self.size, self.wavelet, self.level, self.noise, self.phase)

    def make_estimator(self, method: str, case: Case, method_params: dict, hyperparameters: str):
        """The line model, told only what :meth:`case` says (learning starts from it: there is no oracle)."""
        from adaptcs.models.registry import make_estimator

        return make_estimator(method, case.fit_groups, case.prior, hyperparameters="learned", **method_params)

    def region(self, setting: int, replicate: int) -> np.ndarray:
        """The brain: where errors, PSNR and SSIM are taken."""
        return self.acquisition(replicate).mask.ravel()

    def strategy_description(self, strategy: str) -> str:
        """Lines, not rows: what ``design`` and ``random`` choose here."""
        own = {"design": "designed lines (largest exact information gain under the line model's posterior)",
               "random": "centre k-space lines and uniformly random ones"}
        return own.get(strategy) or super().strategy_description(strategy)

    def checkpoint_label(self, count: int, d: int) -> str:
        """The acceleration: phase encodes over lines measured."""
        return f"R = {self.size / count:.3g}"

    def replicate_label(self, replicate: int) -> str:
        """The simulated slice: its z in the Colin27 volume."""
        return f"Colin27 z = {colin27_slices('test')[1][replicate]}, simulated"

    def operator(self, setting: int, replicate: int | None = None) -> KSpaceLines:
        """What is measured: the phase-encode lines of the slice, the ``start`` centre lines first; with coils, of
        every coil of slice ``replicate`` (its sensitivities)."""
        if not self.coils:
            return KSpaceLines(self.basis(setting), n_first=self.start)
        if replicate is None:
            raise ValueError(f"{self.name}: the lines of a receive array are those of one slice: give its replicate")
        return CoilKSpaceLines(self.basis(setting), self.acquisition(replicate).sensitivities, n_first=self.start)

    def run_case(self, estimator, case: Case, replicate: int, plan: Plan, strategy: str, rng, callback=None,
                 resume_file=None):
        """Measure slice ``replicate`` with ``strategy``'s lines; score every count in ``plan.checkpoints``.
        ``resume_file`` is not used: a slice stopped part-way runs again from its start."""
        acq = self.acquisition(replicate)
        operator = self.operator(0, replicate)
        counts = tuple(plan.checkpoints)
        first = np.sort(operator.first())
        fits, seconds, select = {}, {}, {}  # seconds, select: CPU to each count, fitting and choosing
        if strategy in ("design", "oracle_greedy"):
            choose = functools.partial(largest_gain, operator=operator) if strategy == "design" else \
                oracle_choice(acq.kspace, acq.reference, acq.mask)
            timed = _TimedChoice(choose)
            started = time.process_time()
            run = design_lines(acq.kspace, estimator, start=first, budget=counts[-1], checkpoints=counts,
                               choose=timed, operator=operator, progress=None if callback is None else
                               lambda m, fit: callback(m - self.start, m, float("nan")))
            ended = time.process_time()
            for count in counts:
                chosen = count - self.start  # choices made before the fit at ``count`` lines was read
                reached = timed.started[chosen] if count < counts[-1] else ended
                fits[count], select[count] = run.fits[count], float(np.sum(timed.seconds[:chosen]))
                seconds[count] = reached - started - select[count]
        else:
            order = self._offline_order(estimator, counts[-1]) if strategy == "offline_greedy" else None
            total = 0.0
            for count in counts:
                lines = self.fixed_lines(strategy, count, rng, order)
                fits[count] = estimator.fit(operator.read(acq.kspace, lines), lines).snapshot()
                total += fits[count].cpu_seconds_
                seconds[count], select[count] = total, 0.0
        return _result(fits, seconds, select, counts, acq, case)

    def fixed_lines(self, strategy: str, count: int, rng: np.random.Generator, order=None) -> np.ndarray:
        """The lines of a mask that does not look at the data, ``count`` of them (``rng`` for random masks, drawn
        per count; ``order`` the offline greedy order)."""
        ny, start = self.size, self.start
        if strategy in FIXED_MASKS:
            return fixed_mask(strategy, ny, count, start, rng)
        if strategy == "random":
            rest = np.setdiff1d(np.arange(ny), centre_lines(ny, start))
            return np.sort(np.concatenate([centre_lines(ny, start), rng.choice(rest, count - start, replace=False)]))
        if strategy == "offline_greedy":
            return np.sort(order[:count])
        raise ValueError(f"{self.name}: no lines for strategy {strategy!r}")

    def _offline_order(self, estimator, budget: int) -> np.ndarray:
        """The offline greedy order of the training slices under a clone of ``estimator`` (the noise of each slice
        from its own readout edges), computed once per process."""
        params = {k: v for k, v in estimator.get_params().items() if k not in ("basis", "noise_var", "profile")}
        key = (self.size, self.wavelet, self.level, self.noise, self.phase, self.start, budget,
               repr(sorted(params.items())))
        if key not in _OFFLINE_ORDERS:
            training = _acquisitions(self.size, self.noise, "train", self.phase)
            first = centre_lines(self.size, self.start)
            noises = iter([noise_from_readout_edges(a.kspace[first]) for a in training])
            _OFFLINE_ORDERS[key] = offline_greedy(
                [(a.kspace, a.reference) for a in training],
                lambda: type(estimator)(**{**estimator.get_params(), "noise_var": next(noises)}), start=self.start,
                budget=budget)
        return _OFFLINE_ORDERS[key]


_OFFLINE_ORDERS: dict = {}


class _TimedChoice:
    """A ``choose`` for :func:`design_lines` that records when every choice started and its CPU time."""

    def __init__(self, choose):
        self.choose, self.started, self.seconds = choose, [], []

    def __call__(self, model, candidates):
        self.started.append(time.process_time())
        out = self.choose(model, candidates)
        self.seconds.append(time.process_time() - self.started[-1])
        return out


def _integer(name: str, options: dict, key: str, default: int) -> int:
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name}: data.{key} must be an integer; got {value!r}")
    return int(value)


@functools.lru_cache(maxsize=4)
def _acquisitions(size: int, noise: float, which: str, phase: str = "spin_echo", coils: int | None = None) -> tuple:
    return tuple(colin27_kspace(size, which=which, noise=noise, phase=phase, coils=coils))


@functools.lru_cache(maxsize=16)
def _coil_view(size: int, noise: float, phase: str, coils: int, start: int, maps: str, replicate: int) -> KSpaceSlice:
    """Test slice ``replicate`` of a simulated receive array as the coil model sees it: the coils prewhitened by the
    noise covariance of the readout edges of the ``start`` centre lines (nothing from the simulation's covariance),
    the sensitivities ``m`` ESPIRiT's of those lines or the simulation's
    (prewhitened alike), the reference the image the coil model estimates from the noise-free whitened coil images
    ``(L^{-1} s)_c x``: their least-squares combination ``sum_c conj(m_c) (L^{-1} s)_c x / sum_c |m_c|^2`` (0 where
    no map sees the pixel; the simulation's ``x`` itself with its own maps)."""
    acq = _acquisitions(size, noise, "test", phase, coils)[replicate]
    first = centre_lines(size, start)
    covariance = noise_covariance_from_readout_edges(acq.kspace[:, first])
    kspace, true_maps = prewhiten(acq.kspace, covariance), prewhiten(acq.sensitivities, covariance)
    sensitivities = true_maps if maps == "simulated" else espirit_maps(kspace, start)
    reference = least_squares_image(true_maps * acq.reference, sensitivities)
    return replace(acq, kspace=kspace, reference=reference, sensitivities=sensitivities, noise_var=1.0,
                   noise_covariance=covariance)


@functools.lru_cache(maxsize=4)
def _profile(size: int, wavelet: str, level: int, noise: float, phase: str = "spin_echo") -> np.ndarray:
    basis = SeparableWavelet((size, size), wavelet, level)
    return pair_profile(basis, [a.reference for a in _acquisitions(size, noise, "train", phase)])


def _result(fits: dict, seconds: dict, select: dict, counts, acq: KSpaceSlice, case: Case) -> SequentialDesignResult:
    """The fits read at each count as the job runner records a design loop (magnitude images over the brain
    maximum; errors inside the brain; CPU seconds between counts, fitting and choosing apart)."""
    peak = float(np.abs(acq.reference)[acq.mask].max())
    images = np.stack([np.abs(fits[c].image_).ravel() / peak for c in counts])
    truth = case.problem.w_true.reshape(acq.mask.shape)
    errors = np.array([magnitude_scores(im.reshape(acq.mask.shape), truth, acq.mask)[0] for im in images])
    ordered = [fits[c] for c in counts]  # snapshots of the line model (fitted attributes)
    last = ordered[-1]
    basis = case.prior.basis
    if last.v0_.shape[0] == basis.level + 1:  # values per y-scale (the phase-aware model)
        counts_per_class = np.bincount(basis.scale_y, minlength=last.v0_.shape[0])
    else:  # per pair of scales, the coarsest pair always on
        counts_per_class = np.bincount(basis.scale_pair().ravel(), minlength=last.v0_.shape[0])
    n = np.asarray(counts, dtype=np.int64)
    return SequentialDesignResult(
        n_measurements=n, errors=errors, fit_seconds=np.diff([seconds[c] for c in counts], prepend=0.0),
        select_seconds=np.diff([select[c] for c in counts], prepend=0.0),
        coef=images[-1].copy(), X=np.zeros((0, images.shape[1])), y=np.zeros(0), group_prob=None,
        checkpoint_n=n, checkpoint_coef=images,
        converged=np.array([int(f.converged_) for f in ordered], dtype=np.int8),
        n_iter=np.array([f.n_iter_ for f in ordered], dtype=np.int64),
        residual=np.array([f.fixed_point_residual_ for f in ordered]), finite=np.all(np.isfinite(images), axis=1),
        blocks_not_converged=np.array([f.columns_not_converged_ for f in ordered], dtype=np.int64),
        hyperparameters={"p0": float(np.average(last.p0_[1:], weights=counts_per_class[1:])),
                         "v0": float(np.average(last.v0_, weights=counts_per_class)),
                         "noise_var": float(case.prior.noise_var)})
