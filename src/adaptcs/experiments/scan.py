"""``kind: replay``: complete basis scans an instrument recorded, replayed in every acquisition order.

The workflow's side of ``python -m adaptcs replay`` (:mod:`adaptcs.replay`). A single-pixel camera that showed
every image of a basis gives one value per basis image; each scan (a file of those values) is a replicate, its
full-scan image (all values, synthesised) the truth. Each strategy replays its order on the recorded values,
choosing only among what was measured (:func:`adaptcs.design.basis_scan.replay_basis_scan`): ``design`` the
unmeasured basis images of largest posterior variance, ``topdown`` coarse to fine, ``predict`` the wavelet
prediction scan (Rousset et al. 2017), ``random`` a random order; every order measures the approximation first.
Reconstructions are scored at the fractions of the basis asked (default 10, 15 and 25 %). Nothing is simulated:
there is no noise draw and no oracle (hyper-parameters are learned). Methods: ``wavelet_tree`` (the hidden Markov
tree of the wavelet quadtree, exact on a scan) and the EP methods with a prior per scale (``gss_ep_scales``).
"""

from __future__ import annotations

import functools
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from adaptcs.bases.images import BASES, make_basis
from adaptcs.data.synthetic import GroupSparseProblem
from adaptcs.design.basis_scan import REPLAY_ORDERS, replay_basis_scan
from adaptcs.design.simulation import SequentialDesignResult
from adaptcs.experiments.base import Experiment, Plan
from adaptcs.experiments.case import Case
from adaptcs.models.registry import PriorInfo

SCAN_SUFFIXES = (".csv", ".txt", ".npy")
DEFAULT_FRACTIONS = (0.10, 0.15, 0.25)
DATA_KEYS = ("scans", "basis", "side", "level", "fractions", "batch_size")


@dataclass(frozen=True)
class ReplayExperiment(Experiment):
    """A ``kind: replay`` experiment of the workflow config (config/README.md, "Replaying basis scans").

    Attributes
    ----------
    name : str
    scans : tuple of str
        Files of recorded values, one value per basis image in the basis's coefficient order (NaN or an empty
        line where an image was not shown); a replicate each, in this order.
    basis_name : str
        One of :data:`adaptcs.bases.images.BASES` (``predict`` needs a wavelet).
    side : int
        The images are ``side x side`` pixels (d = side^2 values per scan).
    fractions : tuple of float
        Fractions of the d basis images at which reconstructions are scored.
    scan_batch : int or None
        Basis images added per refit (default d / 256).
    options : dict
        ``kind: replay`` and the ``data`` block as the config gave it (recorded in result files).
    """

    config_keys = ("kind", "data")
    has_oracle = False  # recorded values of a real image: nothing is exactly sparse
    curves_in_db = True  # a camera's image is read in dB; every point of its curves is a kept reconstruction
    basis_scans = True

    name: str
    scans: tuple = ()
    basis_name: str = "haar"
    side: int = 64
    level: int | None = None
    fractions: tuple = DEFAULT_FRACTIONS
    scan_batch: int | None = None
    strategies: tuple = REPLAY_ORDERS
    figures: tuple = ("curves", "images")
    options: dict = field(default_factory=dict)

    @classmethod
    def from_config(cls, name: str, entry: dict, config: dict) -> ReplayExperiment:
        """From the config entry: its ``data`` block, checked at once (every scan is read)."""
        try:
            experiment = cls.from_options(name, {"kind": "replay", **entry["data"]})
            for replicate in range(len(experiment.scans)):
                experiment.scan_values(replicate)
        except (ValueError, OSError) as exc:
            raise ValueError(f"experiments.{name}.data: {exc}") from None
        return experiment

    @classmethod
    def from_options(cls, name: str, options: dict) -> ReplayExperiment:
        """From the options recorded in result files: ``kind: replay`` and the ``data`` block."""
        if re.fullmatch(r"E\d+", name):
            raise ValueError("names E<number> are kept for built-in experiments; give a replay another name")
        given = {"kind": "replay", **options}
        options = {k: v for k, v in options.items() if k != "kind"}
        unknown = set(options) - set(DATA_KEYS)
        if unknown:
            raise ValueError(f"{name}: unknown data option(s) {sorted(unknown)}; a replay takes {list(DATA_KEYS)}")
        if "scans" not in options or not isinstance(options.get("side"), int) or isinstance(options["side"], bool):
            raise ValueError(f"{name}: a replay needs data.scans (a file of recorded values, or a folder of them) and "
                             "data.side (the images' side in pixels)")
        basis_name = options.get("basis", "haar")
        if basis_name not in BASES:
            raise ValueError(f"{name}: data.basis must be one of {BASES}; got {basis_name!r}")
        level = options.get("level")
        if level is not None and (isinstance(level, bool) or not isinstance(level, int)):
            raise ValueError(f"{name}: data.level must be an integer (the wavelet depth); got {level!r}")
        try:
            make_basis(basis_name, options["side"], level)
        except ValueError as exc:
            raise ValueError(f"{name}: data.basis {basis_name!r} at side {options['side']}: {exc}") from None
        fractions = tuple(float(f) for f in options.get("fractions", DEFAULT_FRACTIONS))
        if not fractions or any(not 0.0 < f <= 1.0 for f in fractions) or list(fractions) != sorted(set(fractions)):
            raise ValueError(f"{name}: data.fractions must be increasing fractions in (0, 1]; got {list(fractions)}")
        batch = options.get("batch_size")
        if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 1):
            raise ValueError(f"{name}: data.batch_size must be a positive integer; got {batch!r}")
        strategies = REPLAY_ORDERS if basis_name != "dct" else tuple(o for o in REPLAY_ORDERS if o != "predict")
        return cls(name=name, scans=scan_files(options["scans"]), basis_name=basis_name, side=options["side"],
                   level=level, fractions=fractions, scan_batch=batch, strategies=strategies, options=given)

    # --- the protocol ------------------------------------------------------------------------------------------

    @property
    def d(self) -> int:
        """Basis images (coefficients) per scan."""
        return self.side * self.side

    @property
    def key(self) -> int:
        """A stable number for the experiment's name (seeds the random order)."""
        return 2000 + zlib.crc32(self.name.encode()) % 1_000_000

    @property
    def settings(self) -> tuple:
        """One setting: the basis and the side (and the depth, where given)."""
        setting = {"basis": self.basis_name, "side": self.side}
        return (setting | {"level": self.level} if self.level is not None else setting,)

    @property
    def n_initial(self) -> int:
        """The approximation subband, which every order measures first."""
        return int(np.sum(self.basis(0).scales() == 0))

    def batch_size(self, setting: int) -> int:
        """Basis images per refit: ``data.batch_size`` or d / 256."""
        return self.scan_batch if self.scan_batch is not None else max(1, self.d // 256)

    def checkpoint_counts(self) -> tuple:
        """Basis images measured at each scored reconstruction (the fractions of d, rounded down)."""
        return tuple(sorted({max(1, int(f * self.d)) for f in self.fractions}))

    @property
    def n_steps(self) -> int:
        """Refits from the approximation to the last fraction (a replay's length is its fractions)."""
        return max(0, -(-(self.checkpoint_counts()[-1] - self.n_initial) // self.batch_size(0)))

    def check_n_steps(self, n_steps: int | None) -> int:
        """:attr:`n_steps`; a replay's length is set by ``data.fractions``, so any other value is refused."""
        if n_steps is not None and n_steps != self.n_steps:
            raise ValueError(f"{self.name}: a replay runs to its last fraction ({self.n_steps} steps); set "
                             "data.fractions instead of n_steps")
        return self.n_steps

    def checkpoints(self, setting: int, n_steps: int) -> tuple:
        """:meth:`checkpoint_counts`."""
        return self.checkpoint_counts()

    def image_side(self, setting: int) -> int:
        """The side of the scanned images."""
        return self.side

    def basis(self, setting: int):
        """The scanned basis."""
        return make_basis(self.basis_name, self.side, self.level)

    def check_replicates(self, replicates: int, settings) -> None:
        """One replicate per scan."""
        if replicates > len(self.scans):
            raise ValueError(f"replicates is {replicates}; its data has {len(self.scans)} scan(s)")

    # --- problems ----------------------------------------------------------------------------------------------

    def scan_values(self, replicate: int) -> np.ndarray:
        """The recorded values of scan ``replicate`` in the basis's coefficient order, shape (d,) (NaN: not
        measured), in units where the full-scan image spans [0, 1] (PSNR's peak is then the image's range)."""
        if not 0 <= replicate < len(self.scans):
            raise ValueError(f"{self.name}: replicate must be in 0..{len(self.scans) - 1} (one per scan); got "
                             f"{replicate}")
        values = _normalized_scan(self.scans[replicate], self.basis(0))
        measured = int(np.sum(~np.isnan(values)))
        if measured < self.checkpoint_counts()[-1]:
            raise ValueError(f"{self.scans[replicate]}: {measured} of {self.d} basis images were measured; the "
                             f"fraction {self.fractions[-1]} needs {self.checkpoint_counts()[-1]}")
        return values.copy()

    def case(self, setting: int, replicate: int) -> Case:
        """Scan ``replicate``: the truth is the full-scan image (every measured value, synthesised; unmeasured
        coefficients 0); the initial rows are the approximation's basis images and their recorded values."""
        self.check_setting(setting)
        basis = self.basis(0)
        values = self.scan_values(replicate)
        image = basis.synthesize(np.nan_to_num(values, nan=0.0))
        first = np.flatnonzero((basis.scales() == 0) & ~np.isnan(values))
        X0 = basis.row_patterns(np.eye(basis.d)[first])  # the patterns shown (unit norm if orthonormal)
        problem = GroupSparseProblem(w_true=image, groups=basis.groups(), X=X0, y=values[first], noise_var=np.nan)
        prior = PriorInfo(p0_group=np.nan, p0_coef=np.nan, v0=np.nan, noise_var=np.nan, scales=basis.scales(),
                          basis=basis)
        seed = (self.key, 0, replicate)
        return Case(problem, basis.groups(), prior, seed, (*seed, 1), (*seed, 2))

    def plan(self, setting: int, n_steps: int, strategy: str) -> Plan:
        """The replay's batches and scored counts (every order chooses among the recorded values: no rows are
        supplied in advance)."""
        self.check_setting(setting)
        return Plan(n_steps=n_steps, batch_size=self.batch_size(setting), checkpoints=self.checkpoint_counts(),
                    basis=self.basis(setting), image_side=self.side)

    def run_case(self, estimator, case: Case, replicate: int, plan: Plan, strategy: str, rng, callback=None,
                 resume_file=None):
        """Replay ``strategy``'s order on the recorded values (no simulated measurement). ``resume_file`` is not
        used: a replay stopped part-way runs again from its start."""
        basis = self.basis(0)
        values = self.scan_values(replicate)
        fractions = [n / basis.d for n in plan.checkpoints]
        try:
            replay = replay_basis_scan(estimator, basis, values, strategy, fractions, batch_size=plan.batch_size,
                                       rng=rng)
        except (np.linalg.LinAlgError, FloatingPointError) as exc:  # numerical: recorded, like a design loop's
            return failed_result(np.asarray(plan.checkpoints), basis.d, f"{type(exc).__name__}: {exc}")
        return replay_result(replay, basis, case.problem.w_true)


@functools.lru_cache(maxsize=16)
def _normalized_scan(path: str, basis) -> np.ndarray:
    """A scan file's values, checked, rescaled so that its full-scan image spans [0, 1]: every value divided by the
    image's range, and the approximation shifted by the analysis of its minimum (a constant image has only
    approximation coefficients)."""
    from adaptcs.readers import read_vector
    from adaptcs.replay import scan_values

    try:
        values = scan_values(basis, read_vector(path))
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    if np.isinf(values).any() or np.all(np.isnan(values)):
        raise ValueError(f"{path}: values must be finite, at least one measured (NaN or an empty line: not measured)")
    image = basis.synthesize(np.nan_to_num(values, nan=0.0))
    low, span = float(image.min()), float(image.max() - image.min())
    if not span > 0.0:
        raise ValueError(f"{path}: the full-scan image is constant; there is nothing to reconstruct")
    return (values - basis.analyze(np.full(basis.d, low))) / span


def scan_files(scans) -> tuple:
    """The scan files of ``data.scans``: a file, a list of files, or a folder (its .csv, .txt and .npy files,
    sorted by name)."""
    paths = [Path(s) for s in scans] if isinstance(scans, (list, tuple)) else [Path(scans)]
    files = []
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.suffix.lower() in SCAN_SUFFIXES)
            if not found:
                raise ValueError(f"{path}: no scans ({', '.join(SCAN_SUFFIXES)})")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise ValueError(f"{path}: no such scan file or folder")
    return tuple(str(f) for f in files)


def failed_result(counts: np.ndarray, d: int, failure: str) -> SequentialDesignResult:
    """A replay whose fit failed: every scored reconstruction missing (NaN), the failure recorded."""
    k = counts.shape[0]
    return SequentialDesignResult(
        n_measurements=counts.astype(np.int64), errors=np.full(k, np.nan), fit_seconds=np.full(k, np.nan),
        coef=np.full(d, np.nan), X=np.zeros((0, d)), y=np.zeros(0), group_prob=None,
        checkpoint_n=np.zeros(0, dtype=np.int64), checkpoint_coef=np.zeros((0, d)),
        converged=np.full(k, -1, dtype=np.int8), n_iter=np.full(k, -1, dtype=np.int64), residual=np.full(k, np.nan),
        finite=np.zeros(k, bool), failure=failure)


def replay_result(replay, basis, full_image: np.ndarray) -> SequentialDesignResult:
    """A replay as the job runner records a design loop: one entry per scored reconstruction (pixels)."""
    images = basis.synthesize(replay.coef) if replay.coef.size else np.zeros((0, basis.d))
    images = np.atleast_2d(images)
    errors = np.linalg.norm(images - full_image, axis=1) / np.linalg.norm(full_image)
    finite = np.all(np.isfinite(images), axis=1)
    noise = replay.noise_var[-1] if replay.noise_var.size else np.nan
    return SequentialDesignResult(
        n_measurements=replay.n.copy(), errors=errors, fit_seconds=np.diff(replay.cpu_seconds, prepend=0.0),
        coef=images[-1].copy(), X=np.zeros((0, basis.d)), y=np.zeros(0),  # rows: replay.measured says which
        group_prob=replay.group_prob, checkpoint_n=replay.n.copy(), checkpoint_coef=images,
        converged=replay.converged.copy(), n_iter=replay.n_iter.copy(), residual=replay.residual.copy(), finite=finite,
        hyperparameters={"noise_var": float(noise)} if np.isfinite(noise) else {})
