"""The row lab's state: every measurement and setting of `python -m adaptcs lab --instrument rows` (or camera) in
one HDF5 file.

State file layout (format ``adaptcs-design-state``, version 4; versions 1 and 2, without checksums, still open
with a note and gain them when a command next changes the state; version 3 has no tracked fit)::

    attrs: format, format_version, strategy, row_constraint, row_norm (NaN: sqrt(d)), seed,
           given (JSON: the hyper-parameters fixed by the user; the others are learned), estimator (JSON),
           basis ("" or a name of adaptcs.bases.images.BASES), side (0 without a basis), level (the wavelet depth;
           0 or absent: the basis's default),
           data_sha256 (of every dataset's name, type, shape and bytes), attrs_sha256 (of the other attributes)
    groups      (d,)     int    group label of every coefficient
    X           (n, d)   float  every row measured, in the order told (pixels with a basis)
    y           (n,)     float  the measured values
    added_by    (n,)     int    which ``add`` told the row (0, 1, ...)
    was_asked   (n,)     bool   whether the row is one that ``next`` asked for
    asked       (m, d)   float  every row ``next`` ever asked for
    asked_by    (m,)     int    which ``next`` asked it
    measured    (m,)     bool   whether that asked row has been added since
    removed_X   (r, d)   float  rows taken back by ``remove`` (kept, never deleted)
    removed_y   (r,)     float  their values
    removed_by  (r,)     int    the ``add`` that had told them
    pool        (p, d)   float  candidate rows (strategy "pool" only)
    log         (k,)     bytes  one JSON line (UTF-8) per command that changed the state
    tracked/*            a camera loop's tracked fit as ``next`` left it (optional; version 4): one dataset per
                         name of ``WaveletTreeSpikeSlab.FITTED_ATTRIBUTES`` (scalars of shape (1,)), with the
                         attributes tracked_rows (it was fitted on X[:tracked_rows]), tracked_scalars (JSON: the
                         names that are scalars) and tracked_sha256 (of those rows and values). The next command
                         tells only the adds after it instead of every add again; where the rows no longer match
                         (``remove``), it is not used.

Every dataset carries a Fletcher-32 checksum (HDF5 filter), the file uses HDF5's checksummed metadata and every
text attribute is a fixed-length string (stored in the checksummed object header, never in the global heap,
which has no checksum): a flipped bit is an error naming the file, never a different estimate or a read that
never ends (benchmarks/bench_flip_sweep.py flips every byte). A state whose parts do not fit together
(lengths, widths, labels) is refused by every command and never written back.
"""


from __future__ import annotations

import copy
import datetime
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np

from adaptcs._io import (
    StateError,
    as_text,
    attrs_digest,
    check_regular_file,
    data_digest,
    write_state_file,
)
from adaptcs._names import ROW_LAB_FORMAT
from adaptcs.bases.images import BASES, WAVELETS, Basis, make_basis
from adaptcs.bases.prediction import single_coefficient_rows
from adaptcs.design import SequentialDesigner
from adaptcs.design.designer import ROW_CONSTRAINTS, STRATEGIES
from adaptcs.models import GroupSpikeSlabEP, WaveletTreeSpikeSlab
from adaptcs.models._scaling import UNINFORMED_P0, uninformed_scale

STATE_FORMAT = ROW_LAB_FORMAT
INIT_COMMAND = "python -m adaptcs lab --instrument rows init"  # named by the errors of a missing state
STATE_VERSION = 4
# version 1: no basis attributes; versions 1 and 2: no checksums, no removed rows; versions 1-3: no tracked fit
READABLE_VERSIONS = (1, 2, 3, 4)
TRACKED = "tracked/"  # the datasets of the camera loop's tracked fit
HYPERPARAMETER_NAMES = ("p0", "v0", "noise_var")
TREE_LEARNED = ("p_on", "p_off", "v0", "noise_var")  # what the tree's EM learns unless given (v0, noise_var)
TREE_HYPERPARAMETER_NAMES = TREE_LEARNED + ("beta", "kappa")  # beta, kappa: the prediction's gain and spread
DATASETS = ("groups", "X", "y", "added_by", "was_asked", "asked", "asked_by", "measured")
REMOVED = ("removed_X", "removed_y", "removed_by")  # rows taken back (version 3)
MAX_SEED = 2**63 - 1  # seeds are stored as HDF5 int64
GIVEN_RANGE = (1e-100, 1e100)  # a given p0, v0 or noise variance outside it overflows in the fit
MAX_UNKNOWNS = 2**20  # 1024 x 1024 pixels: a row is 8 MB; a state and a fit beyond it do not fit in memory

log = logging.getLogger(__name__)


@dataclass
class LabState:
    """Everything the lab loop knows (see the module docstring for the file layout)."""

    groups: np.ndarray
    strategy: str = "design"
    row_constraint: str = "sphere"
    row_norm: float | None = None
    seed: int = 0
    given: dict = field(default_factory=dict)
    X: np.ndarray | None = None
    y: np.ndarray = field(default_factory=lambda: np.zeros(0))
    added_by: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    was_asked: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    asked: np.ndarray | None = None
    asked_by: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    measured: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    pool: np.ndarray | None = None
    log: list = field(default_factory=list)
    basis_name: str = ""
    side: int = 0
    level: int = 0  # wavelet depth (0: the basis's default)
    removed_X: np.ndarray | None = None
    removed_y: np.ndarray = field(default_factory=lambda: np.zeros(0))
    removed_by: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    tracked_fit: dict | None = None  # a camera loop's tracked fit (WaveletTreeSpikeSlab.FITTED_ATTRIBUTES)
    tracked_rows: int = 0  # ... fitted on X[:tracked_rows]
    tracked_sha256: str = ""  # ... of those rows and values (_rows_digest)
    _basis_rows: tuple = field(default=(None, None, False), init=False, repr=False, compare=False)  # uses_tree's

    def __post_init__(self):
        d = self.d
        self.X = np.zeros((0, d)) if self.X is None else self.X
        self.asked = np.zeros((0, d)) if self.asked is None else self.asked
        self.removed_X = np.zeros((0, d)) if self.removed_X is None else self.removed_X

    @property
    def d(self) -> int:
        """Number of coefficients."""
        return int(self.groups.shape[0])

    @property
    def n_asks(self) -> int:
        """How many times rows were asked for."""
        return sum(1 for entry in self.log if entry["command"] == "next")

    @property
    def n_adds(self) -> int:
        """How many times measurements were added."""
        return sum(1 for entry in self.log if entry["command"] == "add")

    @property
    def basis(self) -> Basis | None:
        """The sparsifying basis of the coefficients (None: the rows are in coefficient space)."""
        return make_basis(self.basis_name, self.side, self.level or None) if self.basis_name else None

    @property
    def uses_tree(self) -> bool:
        """Whether the fit is the replay's model (:class:`WaveletTreeSpikeSlab` whose "on" state follows the
        wavelet prediction): a wavelet basis, strategy "pool" (of basis images) or "predict", every row told a
        basis image, and no fixed ``p0`` (a GSS-EP parameter). Otherwise GSS-EP with a prior per scale."""
        if self.basis_name not in WAVELETS or self.strategy not in ("pool", "predict") or "p0" in self.given:
            return False
        # a command asks this several times and the analysis of a camera's pool (d x d) takes most of a `next`: kept
        # for the rows it was computed from (commands replace X and pool, never change them in place)
        X, pool, basis_images = self._basis_rows
        if X is not self.X or pool is not self.pool:
            rows = self.X if self.pool is None else np.vstack([self.pool, self.X])
            basis_images = not rows.shape[0] or bool(
                single_coefficient_rows(self.basis.row_coefficients(rows))[0].all())
            self._basis_rows = (self.X, self.pool, basis_images)
        return basis_images

    @property
    def learned(self) -> tuple[str, ...]:
        """The hyper-parameters learned from the measurements (those the user did not fix)."""
        names = TREE_HYPERPARAMETER_NAMES if self.uses_tree else HYPERPARAMETER_NAMES
        return tuple(name for name in names if self.given.get(name) is None)

    def estimator(self) -> GroupSpikeSlabEP | WaveletTreeSpikeSlab:
        """The model of the measurements (see :attr:`uses_tree`) with the given hyper-parameters; the others
        learned (GSS-EP starting from the measurements' scale)."""
        if self.uses_tree:
            learn = tuple(name for name in TREE_LEARNED if self.given.get(name) is None)
            return WaveletTreeSpikeSlab(self.basis, prediction=True, v0=self.given.get("v0"),
                                        noise_var=self.given.get("noise_var"), learn=learn)
        start = {"p0": UNINFORMED_P0, "v0": 1.0, "noise_var": 1.0}
        if self.learned and self.X.shape[0]:
            start["v0"], start["noise_var"] = uninformed_scale(self.X, self.y)
        values = {name: self.given.get(name) if self.given.get(name) is not None else start[name]
                  for name in HYPERPARAMETER_NAMES}
        scales = None if not self.basis_name else self.basis.scales()  # a p0 and a v0 per scale
        return GroupSpikeSlabEP(self.groups, p0=values["p0"], v0=values["v0"], noise_var=values["noise_var"],
                                scales=scales, learn=self.learned)

    def designer(self, batch_size: int = 1) -> SequentialDesigner:
        """A designer told every measurement so far; seeded by (seed, number of asks).

        GSS-EP is fitted once, from scratch, on everything, and taken on to its convergence test where it stops short
        (:meth:`SequentialDesigner.converge`). A camera's loop (:attr:`uses_tree` with a pool) is told
        add by add, in order: the interactive designer's path, whose tracked fits choose the rows as the replay
        does (:func:`adaptcs.design.basis_scan.replay_basis_scan`; a fit from scratch on everything chooses
        differently). That costs one short fit per add; the tracked fit that ``next`` leaves in the state
        (:meth:`keep_tracked_fit`) saves the next command those of the adds before it.
        """
        designer = SequentialDesigner(self.estimator(), strategy=self.strategy, row_norm=self.row_norm,
                                      batch_size=batch_size, pool=self.pool, row_constraint=self.row_constraint,
                                      rng=np.random.default_rng([self.seed, self.n_asks]), basis=self.basis)
        if self.uses_tree and self.pool is not None:
            told, tracked = self.saved_tracked_fit()
            if tracked is not None:  # where the last command left the loop: only the adds since are told
                designer.tell_fitted(self.X[:told], self.y[:told], tracked)
            for call in np.unique(self.added_by[told:]):  # adds are numbered in the order they were made
                mine = self.added_by == call
                designer.tell(self.X[mine], self.y[mine])
        elif self.X.shape[0]:
            designer.tell(self.X, self.y)  # pool rows among them are spent
            designer.converge()  # the fit the user reads: on to its convergence test where it stopped short
        return designer

    def keep_tracked_fit(self, designer: SequentialDesigner) -> None:
        """Keep the camera loop's tracked fit of ``designer`` (told every row of this state) for the next command,
        saved with the state; none is kept if the designer has none."""
        est = designer.tracked_
        if est is None or designer.n_told_ != self.X.shape[0]:
            self.drop_tracked_fit()
            return
        self.tracked_fit = {name: copy.deepcopy(getattr(est, name)) for name in est.FITTED_ATTRIBUTES}
        self.tracked_rows = int(self.X.shape[0])
        self.tracked_sha256 = _rows_digest(self.X, self.y)

    def drop_tracked_fit(self) -> None:
        """Keep no tracked fit."""
        self.tracked_fit, self.tracked_rows, self.tracked_sha256 = None, 0, ""

    def saved_tracked_fit(self) -> tuple[int, WaveletTreeSpikeSlab | None]:
        """(rows, fit): the tracked fit kept by :meth:`keep_tracked_fit` on the first ``rows`` rows, warm-started as
        the designer's own, where it still applies (a camera loop whose first rows and values are still the ones it
        was fitted on, ending with an add); else (0, None)."""
        rows = self.tracked_rows
        if self.tracked_fit is None or not (self.uses_tree and self.pool is not None) \
                or not 0 < rows <= self.X.shape[0] \
                or (rows < self.X.shape[0] and self.added_by[rows] == self.added_by[rows - 1]) \
                or _rows_digest(self.X[:rows], self.y[:rows]) != self.tracked_sha256:
            return 0, None
        est = self.estimator().set_params(warm_start=True)
        for name, value in self.tracked_fit.items():
            setattr(est, name, copy.deepcopy(value))
        return rows, est


def _rows_digest(X: np.ndarray, y: np.ndarray) -> str:
    """SHA-256 of rows and values (their shapes and bytes)."""
    return data_digest({"X": X, "y": y})


# -- files -------------------------------------------------------------------------------------------------------


def _state_arrays(state: LabState) -> dict:
    arrays = {name: np.asarray(getattr(state, name)) for name in DATASETS + REMOVED}
    arrays["was_asked"], arrays["measured"] = arrays["was_asked"].astype(bool), arrays["measured"].astype(bool)
    if state.pool is not None:
        arrays["pool"] = np.asarray(state.pool)
    lines = [json.dumps(entry, sort_keys=True).encode() for entry in state.log]
    arrays["log"] = np.array(lines, dtype=bytes) if lines else np.zeros(0, dtype="S1")
    return arrays


def save_state(path, state: LabState) -> Path:
    """Write the whole state (with checksums) to a new file, flush it, and rename it over ``path``."""
    model = state.estimator()
    estimator = {name: value for name, value in model.get_params().items()
                 if name not in ("groups", "scales", "basis")}  # the basis's, saved as basis, side and level
    attrs = {"format": STATE_FORMAT, "strategy": state.strategy, "row_constraint": state.row_constraint,
             "given": json.dumps(state.given, sort_keys=True), "basis": state.basis_name,
             "estimator": json.dumps({"class": type(model).__name__, **estimator}, sort_keys=True, default=str),
             "format_version": STATE_VERSION, "row_norm": np.nan if state.row_norm is None else state.row_norm,
             "seed": state.seed, "side": state.side, "level": state.level}
    arrays = _state_arrays(state)
    if state.tracked_fit is not None:
        scalars = sorted(name for name, value in state.tracked_fit.items() if np.ndim(value) == 0)
        attrs.update({"tracked_rows": state.tracked_rows, "tracked_scalars": json.dumps(scalars),
                      "tracked_sha256": state.tracked_sha256})
        arrays.update({TRACKED + name: np.atleast_1d(np.asarray(value)) for name, value in state.tracked_fit.items()})
    return write_state_file(path, attrs, arrays)


def load_state(path) -> LabState:
    """Read and check a state file (StateError if it is not one, is damaged or does not fit together)."""
    path = Path(path)
    check_regular_file(path, INIT_COMMAND)
    try:
        with h5py.File(path, "r", locking=False) as f:
            if as_text(f.attrs.get("format", "")) != STATE_FORMAT:
                raise StateError(f"{path}: not an adaptcs design state file")
            version = int(_attr(f, "format_version", path))
            if version not in READABLE_VERSIONS:
                raise StateError(f"{path}: state format version {version} is not supported (this "
                                 f"adaptcs reads versions {READABLE_VERSIONS})")
            checked = version >= 3
            if checked and as_text(f.attrs.get("attrs_sha256", "")) != attrs_digest(f.attrs):
                raise StateError(f"{path}: the state's attributes do not match their checksum (the file is damaged); "
                                 "nothing was read or changed")
            names = DATASETS + (REMOVED if checked else ()) + (("pool",) if "pool" in f else ()) + ("log",)
            if version >= 4 and "tracked" in f:
                names += tuple(TRACKED + name for name in f["tracked"])
            arrays = {name: _dataset(f, name, path) for name in names}
            if checked and as_text(f.attrs.get("data_sha256", "")) != data_digest(arrays):
                raise StateError(f"{path}: the state's data do not match their checksum (the file is damaged); nothing "
                                 "was read or changed")
            if not checked:
                log.warning("%s: written by an older adaptcs (state version %d, without checksums); it gains them "
                            "the next time a command changes it", path, version)
            row_norm = float(_attr(f, "row_norm", path))
            lines = arrays.pop("log")
            tracked = _tracked_fit(f, {name[len(TRACKED):]: arrays.pop(name) for name in names
                                       if name.startswith(TRACKED)}, path)
            for name in ("was_asked", "measured"):
                if arrays[name].dtype.kind in "biu":  # flags (HDF5 has no boolean type of its own)
                    arrays[name] = arrays[name].astype(bool)
            state = LabState(
                groups=arrays.pop("groups"), strategy=as_text(_attr(f, "strategy", path)),
                row_constraint=as_text(_attr(f, "row_constraint", path)),
                row_norm=None if np.isnan(row_norm) else row_norm, seed=int(_attr(f, "seed", path)),
                given=json.loads(_attr(f, "given", path)), pool=arrays.pop("pool", None),
                log=[json.loads(line.decode() if isinstance(line, bytes) else line) for line in lines],
                basis_name=as_text(f.attrs.get("basis", "")), side=int(f.attrs.get("side", 0)),
                level=int(f.attrs.get("level", 0)), **tracked, **arrays)
    except StateError:
        raise
    except OSError as exc:
        raise StateError(f"{path}: cannot read the state file (it may be damaged): {exc}") from None
    except (KeyError, ValueError, TypeError, IndexError, RuntimeError) as exc:  # h5py's and json's on damaged bytes
        raise StateError(f"{path}: the state file is damaged ({type(exc).__name__}: {exc}); nothing was "
                         "changed") from None
    _check_consistent(state, path)
    return state


def _tracked_fit(f, arrays: dict, path) -> dict:
    """LabState's tracked-fit fields from the ``tracked/`` datasets and their attributes ({}: no tracked fit)."""
    if not arrays:
        return {}
    scalars = json.loads(_attr(f, "tracked_scalars", path))
    if not set(scalars) <= set(arrays) or any(arrays[name].shape != (1,) for name in scalars):
        raise StateError(f"{path}: the tracked fit's scalars do not fit together (the file is damaged)")
    fit = {name: arrays[name][0].item() if name in scalars else arrays[name] for name in arrays}
    return {"tracked_fit": fit, "tracked_rows": int(_attr(f, "tracked_rows", path)),
            "tracked_sha256": as_text(_attr(f, "tracked_sha256", path))}


def _attr(f, name: str, path):
    if name not in f.attrs:
        raise StateError(f"{path}: the state lacks its attribute {name!r} (the file is damaged)")
    return f.attrs[name]


def _dataset(f, name: str, path) -> np.ndarray:
    if name not in f:
        raise StateError(f"{path}: the state lacks its dataset {name!r} (the file is damaged)")
    try:
        return f[name][()]
    except OSError as exc:
        raise StateError(f"{path}: the dataset {name!r} fails its checksum or cannot be read (the file is damaged: "
                         f"{exc}); nothing was changed") from None


def _check_consistent(state: LabState, path) -> None:
    """StateError unless the parts of ``state`` fit together (widths, lengths, labels, settings)."""
    problems = []
    groups = state.groups
    if groups.ndim != 1 or groups.dtype.kind not in "iu" or groups.size == 0 or groups.min() < 0:
        problems.append("the group labels are not non-negative integers, one per coefficient")
    d = state.d
    for rows_name, columns in (("X", ("y", "added_by", "was_asked")), ("asked", ("asked_by", "measured")),
                               ("removed_X", ("removed_y", "removed_by"))):
        rows = getattr(state, rows_name)
        if rows.ndim != 2 or rows.shape[1] != d:
            problems.append(f"{rows_name} has shape {rows.shape}, not (rows, {d})")
            continue
        for name in columns:
            if np.shape(getattr(state, name)) != (rows.shape[0],):
                problems.append(f"{name} has shape {np.shape(getattr(state, name))}, not ({rows.shape[0]},)")
    if state.pool is not None and (state.pool.ndim != 2 or state.pool.shape[1] != d):
        problems.append(f"pool has shape {state.pool.shape}, not (rows, {d})")
    for name in ("X", "y", "asked", "removed_X", "removed_y") + (("pool",) if state.pool is not None else ()):
        value = getattr(state, name)
        if value.dtype.kind != "f" or not np.all(np.isfinite(value)):
            problems.append(f"{name} holds values that are not finite numbers")
    for name in ("added_by", "asked_by", "removed_by"):
        if getattr(state, name).dtype.kind not in "iu":
            problems.append(f"{name} is not integer")
    if state.was_asked.dtype != bool or state.measured.dtype != bool:
        problems.append("was_asked or measured is not a set of flags")
    if not problems and int(np.sum(state.was_asked)) != int(np.sum(state.measured)):
        problems.append("the rows marked as asked do not match the asked rows marked as measured")
    if state.strategy not in STRATEGIES or state.row_constraint not in ROW_CONSTRAINTS:
        problems.append(f"unknown strategy {state.strategy!r} or row constraint {state.row_constraint!r}")
    if state.tracked_fit is not None and (set(state.tracked_fit) != set(WaveletTreeSpikeSlab.FITTED_ATTRIBUTES)
                                          or np.shape(state.tracked_fit["coef_"]) != (d,)
                                          or not 0 < state.tracked_rows <= state.X.shape[0]):
        problems.append("the tracked fit is not one of this state's coefficients and rows")
    if not all(isinstance(entry, dict) and "command" in entry for entry in state.log):
        problems.append("the log has entries that are not commands")
    problems += settings_problems(state.given, state.seed, state.row_norm, d if groups.ndim == 1 else 0,
                                   state.basis_name, state.side, state.level)
    if problems:
        raise StateError(f"{path}: the state does not fit together ({'; '.join(problems)}): the file is damaged; "
                         "nothing was changed")


def settings_problems(given, seed, row_norm, d: int, basis_name: str, side: int, level: int) -> list[str]:
    """What is wrong with a state's settings (init's arguments, or what an old file holds): [] if nothing."""
    problems = []
    if not isinstance(given, dict):
        return [f"the given hyper-parameters must be a mapping of {HYPERPARAMETER_NAMES} to numbers; got {given!r}"]
    for name, value in given.items():
        if name not in HYPERPARAMETER_NAMES:
            problems.append(f"{name!r} is not a hyper-parameter (one of {HYPERPARAMETER_NAMES})")
        elif isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not GIVEN_RANGE[0] <= value <= GIVEN_RANGE[1]:
            problems.append(f"{name} must be a number in {GIVEN_RANGE[0]:g}..{GIVEN_RANGE[1]:g} (outside it the fit "
                            f"overflows); got {value!r}")
        elif name == "p0" and value >= 1.0:
            problems.append(f"p0 must be below 1; got {value!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed <= MAX_SEED:
        problems.append(f"seed must be an integer in 0..{MAX_SEED}; got {seed!r}")
    if row_norm is not None and not (np.isfinite(row_norm) and GIVEN_RANGE[0] <= row_norm <= GIVEN_RANGE[1]):
        problems.append(f"row_norm must be a number in {GIVEN_RANGE[0]:g}..{GIVEN_RANGE[1]:g}; got {row_norm!r}")
    if d > MAX_UNKNOWNS:
        problems.append(too_many(d))
    if basis_name:
        if basis_name not in BASES:
            problems.append(f"basis must be one of {BASES}; got {basis_name!r}")
        elif not isinstance(side, (int, np.integer)) or not 2 <= side or side * side != d:
            problems.append(f"a {basis_name} basis of side {side!r} does not have the {d} coefficients of the groups")
        else:
            try:
                make_basis(basis_name, int(side), int(level) or None)
            except ValueError as exc:
                problems.append(f"basis {basis_name!r} at side {side}, level {level}: {exc}")
    return problems


def too_many(d: int) -> str:
    return (f"{d:,} unknowns is beyond the lab's {MAX_UNKNOWNS:,} (a {int(MAX_UNKNOWNS**0.5)} x "
            f"{int(MAX_UNKNOWNS**0.5)} image): every row would take {8 * d / 1e6:,.0f} MB and the state and the fit "
            "would not fit in memory")


def now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
