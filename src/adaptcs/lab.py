"""The lab loop from the command line: every measurement and setting in one HDF5 state file.

``python -m adaptcs design init|next|add|estimate`` (see :mod:`adaptcs.cli`) call the functions here. Each
command reads the state, and the ones that change it (init, next, add) write a complete new file next to it
and rename it over the old one, under an exclusive lock: an interrupted or failed command leaves the state as
it was, and bad input files change nothing. No output file may be the state file, the same rows and values are
not added twice by mistake (``add --again`` for a real repeat), and a batch added by mistake is taken back with
``remove`` (kept in the file and logged, never deleted). The estimate depends only on the measurements told
(every command refits GSS-EP from scratch on all of them), never on the order of the commands; a camera's loop
(below) refits add by add, so there it depends on the adds as they were made, not on when rows were asked for.

With a basis (``init --basis haar --side 64``) the unknowns are the basis coefficients ``c`` of an image
``x = Psi^T c`` (:mod:`adaptcs.bases.images`): groups are the basis's 2 x 2 blocks, GSS-EP has a spike probability and
a slab variance per wavelet scale (learned unless given), and every row asked for, told or pooled is a pattern of
pixels (what the instrument shows), stored as such; the fit sees it as ``Psi a``. A single-pixel camera's loop (a
wavelet basis, strategy "pool" of basis images or "predict", every row told a basis image) is fitted with the
replay's model instead (:class:`adaptcs.models.WaveletTreeSpikeSlab` with the wavelet prediction, exact), so the lab
chooses the rows the replay would (``LabState.uses_tree``).

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
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np
import pandas as pd

from adaptcs import _validation as val
from adaptcs._io import (
    StateError,
    as_text,
    atomic_write,
    attrs_digest,
    check_regular_file,
    data_digest,
    locked,
    refuse_state_as_output,
    write_numbers,
    write_state_file,
)
from adaptcs.bases.images import BASES, WAVELETS, Basis, make_basis
from adaptcs.bases.prediction import single_coefficient_rows
from adaptcs.design import SequentialDesigner
from adaptcs.design.designer import ROW_CONSTRAINTS, STRATEGIES, Told
from adaptcs.models import GroupSpikeSlabEP, WaveletTreeSpikeSlab
from adaptcs.models._scaling import UNINFORMED_P0, uninformed_scale
from adaptcs.readers import read_groups, read_numbers, read_values

STATE_FORMAT = "adaptcs-design-state"
INIT_COMMAND = "python -m adaptcs design init"  # named by the errors of a missing state
STATE_VERSION = 4
# version 1: no basis attributes; versions 1 and 2: no checksums, no removed rows; versions 1-3: no tracked fit
READABLE_VERSIONS = (1, 2, 3, 4)
TRACKED = "tracked/"  # the datasets of the camera loop's tracked fit
HYPERPARAMETER_NAMES = ("p0", "v0", "noise_var")
REPEAT_RTOL = 1e-9  # a told row and value this close to one already in the fit is a repeat (lab.add)
NOISE_CAUTION_ROWS = 0.25  # a noise variance learned from fewer rows per unknown is flagged (FitSummary.noise_note)
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
    problems += _settings_problems(state.given, state.seed, state.row_norm, d if groups.ndim == 1 else 0,
                                   state.basis_name, state.side, state.level)
    if problems:
        raise StateError(f"{path}: the state does not fit together ({'; '.join(problems)}): the file is damaged; "
                         "nothing was changed")


def _settings_problems(given, seed, row_norm, d: int, basis_name: str, side: int, level: int) -> list[str]:
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
        problems.append(_too_many(d))
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


def _too_many(d: int) -> str:
    return (f"{d:,} unknowns is beyond the lab's {MAX_UNKNOWNS:,} (a {int(MAX_UNKNOWNS**0.5)} x "
            f"{int(MAX_UNKNOWNS**0.5)} image): every row would take {8 * d / 1e6:,.0f} MB and the state and the fit "
            "would not fit in memory")


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


# -- commands ----------------------------------------------------------------------------------------------------

def init(state_path, groups_path=None, *, basis=None, side=None, level=None, p0=None, v0=None, noise_var=None,
         strategy="design", row_constraint="sphere", row_norm=None, seed=0, pool_path=None, force=False) -> LabState:
    """Start a lab loop: groups (a file, or a basis's), the hyper-parameters fixed by the user (the others are
    learned), the strategy.

    Parameters
    ----------
    state_path : path
        The HDF5 state file to create.
    groups_path : path, optional
        CSV of group labels, one per coefficient (rows are then in coefficient space). Exactly one of
        ``groups_path`` and ``basis`` is given.
    basis : str, optional
        A name of :data:`adaptcs.bases.images.BASES`: the unknowns are the coefficients of a ``side x side`` image in
        that basis, in groups of the basis, with a prior per scale; rows are pixel patterns.
    side : int, optional
        Image side with ``basis`` (a power of two for wavelets).
    level : int, optional
        Wavelet depth (a camera scan with a ``k x k`` approximation has depth ``log2(side / k)``); default the
        basis's (a 4 x 4 approximation).
    p0, v0, noise_var : float, optional
        Fixed hyper-parameters (with a basis: the same for every scale); the others are learned. With a wavelet
        basis and strategy "pool" of basis images or "predict" the model is the replay's wavelet tree
        (:attr:`LabState.uses_tree`), which has no ``p0``: giving one keeps GSS-EP.
    strategy : {"design", "random", "pool", "predict"}
        "predict" (the wavelet prediction scan of basis images) needs a wavelet basis.
    row_constraint, row_norm, seed, pool_path, force
        As the command line's options.
    """
    if strategy not in STRATEGIES:
        raise StateError(f"strategy must be one of {STRATEGIES}; got {strategy!r}")
    if row_constraint not in ROW_CONSTRAINTS:
        raise StateError(f"row constraint must be one of {ROW_CONSTRAINTS}; got {row_constraint!r}")
    if (groups_path is None) == (basis is None):
        raise StateError("give exactly one of a groups file (--groups) and a basis (--basis and --side)")
    if strategy == "predict" and basis not in WAVELETS:
        raise StateError(f"strategy predict shows the images of a wavelet basis: give --basis {', '.join(WAVELETS)} "
                         "(and --side)")
    if level is not None and basis not in WAVELETS:
        raise StateError(f"--level is the depth of a wavelet basis; it needs --basis {' or '.join(WAVELETS)}")
    if basis is None:
        if side is not None:
            raise StateError("--side is the image side of a basis; it needs --basis")
        groups, basis_name, side = read_groups(groups_path), "", 0
    else:
        if basis not in BASES:
            raise StateError(f"basis must be one of {BASES}; got {basis!r}")
        if side is None:
            raise StateError(f"basis {basis!r} needs the image side (--side)")
        if isinstance(side, (int, np.integer)) and side * side > MAX_UNKNOWNS:  # before anything is allocated
            raise StateError(f"--side {side}: {_too_many(side * side)}")
        try:
            level = None if level is None else val.check_count(level, "level")
            groups, basis_name, side = make_basis(basis, int(side), level).groups(), basis, int(side)
        except ValueError as exc:
            raise StateError(f"basis {basis!r} at side {side}: {exc}") from None
    given = {}
    for name, value in (("p0", p0), ("v0", v0), ("noise_var", noise_var)):
        if value is not None:
            given[name] = val.check_positive_scalar(value, name)
    seed = val.check_count(seed, "seed", minimum=0)
    row_norm = None if row_norm is None else val.check_positive_scalar(row_norm, "row_norm")
    problems = _settings_problems(given, seed, row_norm, groups.shape[0], basis_name, side, level or 0)
    if problems:
        raise StateError(problems[0])
    pool = None
    if pool_path is not None:
        pool = read_numbers(pool_path, "candidate rows")
        try:
            val.check_measurement_scale(pool, np.zeros(0))
        except ValueError as exc:
            raise StateError(f"{pool_path}: {exc}") from None
        if pool.shape[1] != groups.shape[0]:
            raise StateError(f"{pool_path}: candidate rows have {pool.shape[1]} entries; the groups file has "
                             f"{groups.shape[0]} coefficients")
    if (strategy == "pool") != (pool is not None):
        raise StateError("strategy 'pool' needs --pool, and --pool needs strategy 'pool'")
    state = LabState(groups=groups, strategy=strategy, row_constraint=row_constraint, row_norm=row_norm,
                     seed=seed, given=given, pool=pool, basis_name=basis_name,
                     side=side, level=level or 0)
    try:  # the designer's own checks (a strategy that needs a basis, rows a basis cannot take)
        SequentialDesigner(state.estimator(), strategy=strategy, row_constraint=row_constraint, pool=pool,
                           basis=state.basis)
    except ValueError as exc:
        raise StateError(str(exc)) from None
    state.log.append({"command": "init", "time": _now(), "d": state.d, "groups": int(np.unique(groups).size),
                      "given": given, "learned": list(state.learned), "basis": basis_name, "side": side,
                      "level": level or 0, "model": type(state.estimator()).__name__})
    # the lock of add and next: --force never replaces a state while they write it
    with locked(state_path, creating=True, made_by=INIT_COMMAND):
        if Path(state_path).exists() and not force:
            raise StateError(f"{state_path} exists (it holds measurements); remove it or pass --force to start over")
        save_state(state_path, state)
    return state


@dataclass
class FitSummary:
    """What a command's fit says about the measurements so far."""

    n_rows: int
    converged: bool | None
    n_iter: int | None
    hyperparameters: dict
    warning: str = ""  # why the fit is not converged, and what to do (empty when it converged)
    model: str = "GroupSpikeSlabEP"
    n_unknowns: int = 0  # d, the coefficients measured

    def noise_note(self, learned) -> str:
        """A one-line caution when the noise variance is learned from fewer than :data:`NOISE_CAUTION_ROWS` rows per
        unknown ("" otherwise): the evidence cannot tell noise from the detail that so few rows leave unresolved,
        and takes much of that detail for noise (a simulated 32 x 32 image: 10^3-10^5 times the true variance,
        benchmarks/bench_lab_image.py); the instrument's own noise level cures it."""
        noise = self.hyperparameters.get("noise_var")
        if "noise_var" not in learned or noise is None or self.model != "GroupSpikeSlabEP" \
                or not self.n_rows < NOISE_CAUTION_ROWS * self.n_unknowns:
            return ""
        return (f"caution: noise_var={noise:.3g} is learned from {self.n_rows} rows for {self.n_unknowns} unknowns; "
                "with so few, the evidence takes unresolved detail for noise (often by orders of magnitude). If you "
                "know your instrument's noise variance, give it: design init --noise-var <it> --force, then add "
                "the measurements again")

    def describe(self, learned) -> str:
        """One line for people: rows measured, converged or not, and the learned values."""
        if self.n_rows == 0:
            return "no measurements yet"
        values = ", ".join(f"{name}={_format(value)}" + (" (learned)" if name in learned else "")
                           for name, value in self.hyperparameters.items())
        status = "tracked (a few EM iterations per add; 'estimate' fits to convergence)" \
            if self.converged is None else "converged" if self.converged else "NOT converged"
        run = "EP run" if self.model == "GroupSpikeSlabEP" else f"{self.model} fit"
        return f"fit on {self.n_rows} rows: {status} ({self.n_iter} iterations in the last {run}); {values}"


def _format(value) -> str:
    """A hyper-parameter for people: one number, or one per scale in brackets."""
    if np.ndim(value) == 0:
        return f"{value:.4g}"
    return "[" + " ".join(f"{v:.3g}" for v in value) + "] per scale"


def _fit_summary(designer: SequentialDesigner, converged_fit: bool = True) -> FitSummary:
    """The fit's summary: the converged fit's, or with ``converged_fit=False`` the one that chose the rows (a camera
    loop's tracked fit, ``converged`` None: fitting it to convergence only to print it would cost seconds)."""
    tracked = not converged_fit and designer.tracked_ is not None
    est = designer.tracked_ if tracked else designer.estimator_
    if est is None:
        return FitSummary(0, None, None, {})
    if designer.failure_:
        raise StateError(f"the fit on {designer.n_told_} measurements failed ({designer.failure_}); nothing was "
                         "changed")
    if isinstance(est, WaveletTreeSpikeSlab):  # per detail scale (v0 also the approximation's), one kappa
        values = {"p_on": est.p_on_.tolist(), "p_off": est.p_off_.tolist(), "v0": est.v0_.tolist(),
                  "beta": est.beta_[1:].tolist(), "kappa": float(est.kappa_)}
    elif est.scales is None:
        values = {"p0": float(np.mean(est.p0_)), "v0": float(est.v0_)}
    else:  # one value per scale (the approximation's p0 is 1)
        values = {"p0": [float(v) for v in est.p0_], "v0": [float(v) for v in est.v0_]}
    told = [entry for entry in designer.history_ if isinstance(entry, Told)]
    return FitSummary(designer.n_told_, None if tracked else bool(est.converged_), int(est.n_iter_),
                      {**values, "noise_var": float(est.noise_var_)}, told[-1].warning if told else "",
                      type(est).__name__, int(designer.X_.shape[1]))


def next_rows(state_path, out_path, batch: int = 1) -> tuple[np.ndarray, FitSummary, dict]:
    """Ask for the next ``batch`` rows: write them to ``out_path`` (CSV, one row per line) and record them."""
    batch = val.check_count(batch, "batch")
    refuse_state_as_output(state_path, out_path, "--out")
    with locked(state_path, made_by=INIT_COMMAND):
        state = load_state(state_path)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the fit's convergence is reported in the summary instead
            designer = state.designer(batch)
            summary = _fit_summary(designer, converged_fit=False)
            try:
                rows = designer.ask()
            except (ValueError, RuntimeError) as exc:
                raise StateError(str(exc)) from None
        asked = designer.history_[-1]
        state.keep_tracked_fit(designer)
        call = state.n_asks
        state.asked = np.vstack([state.asked, rows])
        state.asked_by = np.concatenate([state.asked_by, np.full(rows.shape[0], call)])
        state.measured = np.concatenate([state.measured, np.zeros(rows.shape[0], dtype=bool)])
        info = {"command": "next", "time": _now(), "call": call, "rows": int(rows.shape[0]),
                "chosen_by": asked.chosen_by, "n_measured": designer.n_told_,
                "score": [float(s) for s in asked.scores], "bound": float(asked.bound),
                "converged": summary.converged, **summary.hyperparameters}
        state.log.append(info)
        write_numbers(out_path, rows)
        save_state(state_path, state)
    return rows, summary, info


def add(state_path, rows_path, values_path, *, again: bool = False) -> dict:
    """Tell measured rows and their values (any rows, asked or not); checked before anything is changed.

    Rows with values that repeat measurements already in the fit (each row and its value equal to :data:`REPEAT_RTOL`,
    whatever the add, order or subset) are refused unless ``again`` says that they are real repeat measurements
    (adding a file twice by mistake, or re-printed, would count its measurements twice); rows or values whose
    scale is absurd against the rest are refused (:func:`adaptcs._validation.check_measurement_scale`).
    """
    with locked(state_path, made_by=INIT_COMMAND):
        state = load_state(state_path)
        rows = read_numbers(rows_path, "measured rows")
        if rows.shape[1] != state.d:
            raise StateError(f"{rows_path}: rows have {rows.shape[1]} entries; this state has {state.d} coefficients")
        values = read_values(values_path, rows.shape[0])
        try:
            val.check_measurement_scale(rows, values, state.X, state.y)
        except ValueError as exc:
            raise StateError(f"{rows_path}, {values_path}: {exc}") from None
        repeats = _repeated_measurements(state, rows, values)
        repeated = int(np.min(state.added_by[repeats[repeats >= 0]])) if np.any(repeats >= 0) else None
        if repeated is not None and not again:
            calls = sorted({int(c) for c in state.added_by[repeats[repeats >= 0]]})
            raise StateError(f"{rows_path} and {values_path}: {int(np.sum(repeats >= 0))} of the {rows.shape[0]} "
                             f"rows and values repeat measurements of add {', '.join(map(str, calls))} (equal to "
                             f"{REPEAT_RTOL:g}): adding them would count them twice; pass --again if they are real "
                             "repeat measurements")
        was_asked, pending = _match_asked(state.asked, ~state.measured, rows)
        call = state.n_adds
        state.X = np.vstack([state.X, rows])
        state.y = np.concatenate([state.y, values])
        state.added_by = np.concatenate([state.added_by, np.full(rows.shape[0], call)])
        state.was_asked = np.concatenate([state.was_asked, was_asked])
        state.measured = ~pending
        info = {"command": "add", "time": _now(), "call": call, "rows": int(rows.shape[0]),
                "asked": int(was_asked.sum()), "n_measured": int(state.X.shape[0]),
                "rows_file": str(rows_path), "values_file": str(values_path)}
        if repeated is not None:
            info["repeats"] = int(repeated)
        state.log.append(info)
        save_state(state_path, state)
    return info


def _repeated_measurements(state: LabState, rows: np.ndarray, values: np.ndarray) -> np.ndarray:
    """For each new row, the index of a measurement in the fit with the same row and value to :data:`REPEAT_RTOL`
    (relative to the row's norm and the value's size), -1 if none. Values are compared first: measured values of
    different rows rarely agree to 1e-9, so few rows are compared."""
    found = np.full(rows.shape[0], -1, dtype=np.intp)
    if not state.y.size:
        return found
    for i, (row, value) in enumerate(zip(rows, values, strict=True)):
        scale = np.maximum(np.abs(state.y), abs(value))
        close = np.flatnonzero(np.abs(state.y - value) <= REPEAT_RTOL * np.where(scale > 0, scale, 1.0))
        if close.size:
            gap = np.linalg.norm(state.X[close] - row, axis=1)
            same = close[gap <= REPEAT_RTOL * max(float(np.linalg.norm(row)), np.finfo(float).tiny)]
            if same.size:
                found[i] = same[0]
    return found


def remove(state_path, batch: int) -> dict:
    """Take back the measurements of one ``add`` (numbered from 0 in the order of the adds): they leave the fit but
    stay in the state file (``removed_X``, ``removed_y``, ``removed_by``), and the log records the removal."""
    batch = val.check_count(batch, "batch", minimum=0)
    with locked(state_path, made_by=INIT_COMMAND):
        state = load_state(state_path)
        if batch >= state.n_adds:
            raise StateError(f"{state_path}: there is no add {batch} (adds are numbered 0..{state.n_adds - 1})"
                             if state.n_adds else f"{state_path}: nothing has been added yet")
        take = state.added_by == batch
        if not take.any():
            raise StateError(f"{state_path}: the measurements of add {batch} were already removed")
        state.removed_X = np.vstack([state.removed_X, state.X[take]])
        state.removed_y = np.concatenate([state.removed_y, state.y[take]])
        state.removed_by = np.concatenate([state.removed_by, state.added_by[take]])
        if take[:state.tracked_rows].any():  # the kept tracked fit was fitted on them
            state.drop_tracked_fit()
        state.X, state.y, state.added_by = state.X[~take], state.y[~take], state.added_by[~take]
        state.was_asked, pending = _match_asked(state.asked, np.ones(state.asked.shape[0], dtype=bool), state.X)
        state.measured = ~pending
        info = {"command": "remove", "time": _now(), "batch": batch, "rows": int(np.count_nonzero(take)),
                "n_measured": int(state.X.shape[0])}
        state.log.append(info)
        save_state(state_path, state)
    return info


def _match_asked(asked: np.ndarray, pending: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Match ``rows`` in order to the ``pending`` asked rows (each asked row matches one measured row): which rows
    were asked for, and which asked rows are still pending afterwards."""
    pending = pending.copy()
    was_asked = np.zeros(rows.shape[0], dtype=bool)
    for i, row in enumerate(rows):
        hit = np.flatnonzero(pending & (asked == row).all(axis=1))
        if hit.size:
            was_asked[i], pending[hit[0]] = True, False
    return was_asked, pending


def estimate(state_path, out_path, image_path=None) -> tuple[pd.DataFrame, FitSummary]:
    """The posterior from every measurement: per coefficient its group, mean, standard deviation and the
    probability that its group is active (the wavelet tree: that its own state is on); written to ``out_path`` (CSV
    with a header). With a basis,
    ``image_path`` also gets the posterior mean image ``Psi^T E[c]`` (CSV, ``side`` lines of ``side`` pixels)."""
    refuse_state_as_output(state_path, out_path, "--out")
    refuse_state_as_output(state_path, image_path, "--image")
    if image_path is not None and Path(image_path).resolve() == Path(out_path).resolve():
        raise StateError(f"{image_path}: --image and --out name the same file; give two files")
    state = load_state(state_path)
    if image_path is not None and not state.basis_name:
        raise StateError(f"{state_path} has no basis: its coefficients are not an image (--image needs a state made "
                         "with init --basis)")
    if state.X.shape[0] == 0:
        raise StateError(f"{state_path} has no measurements yet (add some with 'python -m adaptcs design add')")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # reported in the summary
        designer = state.designer()
        summary = _fit_summary(designer)
    est = designer.estimator_
    group_prob = est.coef_prob_ if isinstance(est, WaveletTreeSpikeSlab) else \
        est.group_prob_[np.searchsorted(est.group_labels_, state.groups)]
    table = pd.DataFrame({"coefficient": np.arange(state.d), "group": state.groups, "mean": est.coef_,
                          "std": np.sqrt(est.coef_var_), "group_prob": group_prob})
    atomic_write(out_path, lambda tmp: table.to_csv(tmp, index=False, float_format="%.10g"))
    if image_path is not None:
        write_numbers(image_path, designer.reconstruction().reshape(state.side, state.side))
    return table, summary
