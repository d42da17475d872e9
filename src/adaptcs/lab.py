"""The lab loop from the command line: every measurement and setting in one HDF5 state file.

``python -m adaptcs design init|next|add|estimate`` (see :mod:`adaptcs.cli`) call the functions here. Each
command reads the state, and the ones that change it (init, next, add) write a complete new file next to it
and rename it over the old one, under an exclusive lock: an interrupted or failed command leaves the state as
it was, and bad input files change nothing. The estimate depends only on the measurements told (every command
refits GSS-EP from scratch on all of them), never on the order of the commands.

With a basis (``init --basis haar --side 64``) the unknowns are the basis coefficients ``c`` of an image
``x = Psi^T c`` (:mod:`adaptcs.basis`): groups are the basis's 2 x 2 blocks, GSS-EP has a spike probability and
a slab variance per wavelet scale (learned unless given), and every row asked for, told or pooled is a pattern of
pixels (what the instrument shows), stored as such; the fit sees it as ``Psi a``.

State file layout (format ``adaptcs-design-state``, version 2; version 1 files, without a basis, still open)::

    attrs: format, format_version, strategy, row_constraint, row_norm (NaN: sqrt(d)), seed,
           given (JSON: the hyper-parameters fixed by the user; the others are learned), estimator (JSON),
           basis ("" or a name of adaptcs.basis.BASES), side (0 without a basis)
    groups      (d,)     int    group label of every coefficient
    X           (n, d)   float  every row measured, in the order told (pixels with a basis)
    y           (n,)     float  the measured values
    added_by    (n,)     int    which ``add`` told the row (0, 1, ...)
    was_asked   (n,)     bool   whether the row is one that ``next`` asked for
    asked       (m, d)   float  every row ``next`` ever asked for
    asked_by    (m,)     int    which ``next`` asked it
    measured    (m,)     bool   whether that asked row has been added since
    pool        (p, d)   float  candidate rows (strategy "pool" only)
    log         (k,)     str    one JSON line per command that changed the state
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np
import pandas as pd

from adaptcs import _validation as val
from adaptcs._io import atomic_write
from adaptcs.basis import BASES, WAVELETS, Basis, make_basis
from adaptcs.design import SequentialDesigner
from adaptcs.design.designer import ROW_CONSTRAINTS, STRATEGIES
from adaptcs.experiments import UNINFORMED_P0, uninformed_scale
from adaptcs.models import GroupSpikeSlabEP

STATE_FORMAT = "adaptcs-design-state"
STATE_VERSION = 2
READABLE_VERSIONS = (1, 2)  # version 1: no basis attributes
HYPERPARAMETER_NAMES = ("p0", "v0", "noise_var")


class StateError(ValueError):
    """A state or input file that cannot be used (the message says which and why)."""


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

    def __post_init__(self):
        d = self.d
        self.X = np.zeros((0, d)) if self.X is None else self.X
        self.asked = np.zeros((0, d)) if self.asked is None else self.asked

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
        return make_basis(self.basis_name, self.side) if self.basis_name else None

    @property
    def learned(self) -> tuple[str, ...]:
        """The hyper-parameters learned from the measurements (those the user did not fix)."""
        return tuple(name for name in HYPERPARAMETER_NAMES if self.given.get(name) is None)

    def estimator(self) -> GroupSpikeSlabEP:
        """GSS-EP with the given hyper-parameters, and the others learned starting from the measurements' scale."""
        start = {"p0": UNINFORMED_P0, "v0": 1.0, "noise_var": 1.0}
        if self.learned and self.X.shape[0]:
            start["v0"], start["noise_var"] = uninformed_scale(self.X, self.y)
        values = {name: self.given.get(name) if self.given.get(name) is not None else start[name]
                  for name in HYPERPARAMETER_NAMES}
        scales = None if not self.basis_name else self.basis.scales()  # a p0 and a v0 per scale
        return GroupSpikeSlabEP(self.groups, p0=values["p0"], v0=values["v0"], noise_var=values["noise_var"],
                                scales=scales, learn=self.learned)

    def designer(self, batch_size: int = 1) -> SequentialDesigner:
        """A designer told every measurement so far (one fit, from scratch); seeded by (seed, number of asks)."""
        designer = SequentialDesigner(self.estimator(), strategy=self.strategy, row_norm=self.row_norm,
                                      batch_size=batch_size, pool=self.pool, row_constraint=self.row_constraint,
                                      rng=np.random.default_rng([self.seed, self.n_asks]), basis=self.basis)
        if self.X.shape[0]:
            designer.tell(self.X, self.y)  # pool rows among them are spent
        return designer


# -- files -------------------------------------------------------------------------------------------------------

def read_numbers(path, what: str) -> np.ndarray:
    """A CSV of numbers (comma separated, one record per line, ``#`` comments allowed) as a 2-D float array."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # numpy warns (not raises) on an empty file
            values = np.loadtxt(path, delimiter=",", ndmin=2, dtype=float)
    except FileNotFoundError:
        raise StateError(f"{path}: no such file ({what})") from None
    except (ValueError, UserWarning) as exc:
        raise StateError(f"{path}: {what} must be numbers separated by commas, one record per line: {exc}") from None
    if values.size == 0:
        raise StateError(f"{path}: {what} is empty")
    if not np.all(np.isfinite(values)):
        bad = np.argwhere(~np.isfinite(values))[0]
        raise StateError(f"{path}: {what} has a non-finite value (NaN or infinity) on line {bad[0] + 1}, column "
                         f"{bad[1] + 1}")
    return values


def read_groups(path) -> np.ndarray:
    """Group labels, one integer per coefficient: one per line, or all on one line separated by commas."""
    values = read_numbers(path, "group labels").ravel()
    if not np.all(values == np.round(values)) or values.min() < 0:
        raise StateError(f"{path}: group labels must be non-negative integers")
    return values.astype(np.int64)


def read_values(path, n_rows: int) -> np.ndarray:
    """Measured values: one per line (or all on one line), as many as there are rows."""
    values = read_numbers(path, "measured values")
    if values.shape[0] > 1 and values.shape[1] > 1:
        raise StateError(f"{path}: measured values must be one column (or one line); got {values.shape[0]} lines of "
                         f"{values.shape[1]}")
    values = values.ravel()
    if values.shape[0] != n_rows:
        raise StateError(f"{path}: {values.shape[0]} measured values for {n_rows} rows; they must match one to one")
    return values


def write_csv(path, array: np.ndarray) -> Path:
    """Numbers with full precision (17 significant digits: they read back exactly), atomically."""
    return atomic_write(path, lambda tmp: np.savetxt(tmp, np.atleast_2d(array), delimiter=",", fmt="%.17g"))


@contextlib.contextmanager
def locked(path):
    """An exclusive lock on ``path`` (through a ``.lock`` file next to it) for a read-modify-write."""
    lock_path = Path(path).with_name(f".{Path(path).name}.lock")
    with open(lock_path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def save_state(path, state: LabState) -> Path:
    """Write the whole state to a new file and rename it over ``path``."""

    def write(tmp):
        with h5py.File(tmp, "w", locking=False) as f:
            f.attrs["format"] = STATE_FORMAT
            f.attrs["format_version"] = STATE_VERSION
            f.attrs["strategy"] = state.strategy
            f.attrs["row_constraint"] = state.row_constraint
            f.attrs["row_norm"] = np.nan if state.row_norm is None else state.row_norm
            f.attrs["seed"] = state.seed
            f.attrs["given"] = json.dumps(state.given, sort_keys=True)
            f.attrs["basis"] = state.basis_name
            f.attrs["side"] = state.side
            estimator = state.estimator().get_params()
            estimator.pop("groups")
            estimator.pop("scales")  # the basis's, saved as basis and side
            f.attrs["estimator"] = json.dumps({"class": "GroupSpikeSlabEP", **estimator}, sort_keys=True, default=str)
            f["groups"] = state.groups
            for name in ("X", "y", "added_by", "was_asked", "asked", "asked_by", "measured"):
                f[name] = getattr(state, name)
            if state.pool is not None:
                f["pool"] = state.pool
            f["log"] = np.array([json.dumps(entry, sort_keys=True) for entry in state.log], dtype=h5py.string_dtype())

    return atomic_write(path, write)


def load_state(path) -> LabState:
    """Read a state file (StateError if it is not one)."""
    path = Path(path)
    if not path.exists():
        raise StateError(f"{path}: no such state file (make one with 'python -m adaptcs design init')")
    try:
        with h5py.File(path, "r", locking=False) as f:
            if f.attrs.get("format") != STATE_FORMAT:
                raise StateError(f"{path}: not an adaptcs design state file")
            if int(f.attrs["format_version"]) not in READABLE_VERSIONS:
                raise StateError(f"{path}: state format version {f.attrs['format_version']} is not supported (this "
                                 f"adaptcs reads versions {READABLE_VERSIONS})")
            row_norm = float(f.attrs["row_norm"])
            return LabState(
                groups=f["groups"][()], strategy=str(f.attrs["strategy"]),
                row_constraint=str(f.attrs["row_constraint"]),
                row_norm=None if np.isnan(row_norm) else row_norm, seed=int(f.attrs["seed"]),
                given=json.loads(f.attrs["given"]), X=f["X"][()], y=f["y"][()], added_by=f["added_by"][()],
                was_asked=f["was_asked"][()].astype(bool), asked=f["asked"][()], asked_by=f["asked_by"][()],
                measured=f["measured"][()].astype(bool),
                pool=f["pool"][()] if "pool" in f else None,
                log=[json.loads(line) for line in f["log"].asstr()[()]],
                basis_name=str(f.attrs.get("basis", "")), side=int(f.attrs.get("side", 0)))
    except OSError as exc:
        raise StateError(f"{path}: cannot read the state file: {exc}") from None


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


# -- commands ----------------------------------------------------------------------------------------------------

def init(state_path, groups_path=None, *, basis=None, side=None, p0=None, v0=None, noise_var=None,
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
        A name of :data:`adaptcs.basis.BASES`: the unknowns are the coefficients of a ``side x side`` image in
        that basis, in groups of the basis, with a prior per scale; rows are pixel patterns.
    side : int, optional
        Image side with ``basis`` (a power of two for wavelets).
    p0, v0, noise_var : float, optional
        Fixed hyper-parameters (with a basis: the same for every scale); the others are learned.
    strategy : {"design", "random", "pool", "predict"}
        "predict" (the wavelet prediction scan of basis images) needs a wavelet basis.
    row_constraint, row_norm, seed, pool_path, force
        As the command line's options.
    """
    if Path(state_path).exists() and not force:
        raise StateError(f"{state_path} exists (it holds measurements); remove it or pass --force to start over")
    if strategy not in STRATEGIES:
        raise StateError(f"strategy must be one of {STRATEGIES}; got {strategy!r}")
    if row_constraint not in ROW_CONSTRAINTS:
        raise StateError(f"row constraint must be one of {ROW_CONSTRAINTS}; got {row_constraint!r}")
    if (groups_path is None) == (basis is None):
        raise StateError("give exactly one of a groups file (--groups) and a basis (--basis and --side)")
    if strategy == "predict" and basis not in WAVELETS:
        raise StateError("strategy predict shows the images of a wavelet basis: give --basis haar, db2 or db4 "
                         "(and --side)")
    if basis is None:
        if side is not None:
            raise StateError("--side is the image side of a basis; it needs --basis")
        groups, basis_name, side = read_groups(groups_path), "", 0
    else:
        if basis not in BASES:
            raise StateError(f"basis must be one of {BASES}; got {basis!r}")
        if side is None:
            raise StateError(f"basis {basis!r} needs the image side (--side)")
        try:
            groups, basis_name, side = make_basis(basis, int(side)).groups(), basis, int(side)
        except ValueError as exc:
            raise StateError(f"basis {basis!r} at side {side}: {exc}") from None
    given = {}
    for name, value in (("p0", p0), ("v0", v0), ("noise_var", noise_var)):
        if value is not None:
            given[name] = val.check_positive_scalar(value, name)
    if given.get("p0", 0.5) >= 1.0:
        raise StateError(f"p0 must be below 1; got {given['p0']}")
    pool = None
    if pool_path is not None:
        pool = read_numbers(pool_path, "candidate rows")
        if pool.shape[1] != groups.shape[0]:
            raise StateError(f"{pool_path}: candidate rows have {pool.shape[1]} entries; the groups file has "
                             f"{groups.shape[0]} coefficients")
    if (strategy == "pool") != (pool is not None):
        raise StateError("strategy 'pool' needs --pool, and --pool needs strategy 'pool'")
    state = LabState(groups=groups, strategy=strategy, row_constraint=row_constraint,
                     row_norm=None if row_norm is None else val.check_positive_scalar(row_norm, "row_norm"),
                     seed=val.check_count(seed, "seed", minimum=0), given=given, pool=pool, basis_name=basis_name,
                     side=side)
    try:  # the designer's own checks (a strategy that needs a basis, rows a basis cannot take)
        SequentialDesigner(state.estimator(), strategy=strategy, row_constraint=row_constraint, pool=pool,
                           basis=state.basis)
    except ValueError as exc:
        raise StateError(str(exc)) from None
    state.log.append({"command": "init", "time": _now(), "d": state.d, "groups": int(np.unique(groups).size),
                      "given": given, "learned": list(state.learned), "basis": basis_name, "side": side})
    save_state(state_path, state)
    return state


@dataclass
class FitSummary:
    """What a command's fit says about the measurements so far."""

    n_rows: int
    converged: bool | None
    n_iter: int | None
    hyperparameters: dict

    def describe(self, learned) -> str:
        """One line for people: rows measured, converged or not, and the learned values."""
        if self.n_rows == 0:
            return "no measurements yet"
        values = ", ".join(f"{name}={_format(value)}" + (" (learned)" if name in learned else "")
                           for name, value in self.hyperparameters.items())
        status = "converged" if self.converged else "NOT converged"
        return f"fit on {self.n_rows} rows: {status} ({self.n_iter} iterations in the last EP run); {values}"


def _format(value) -> str:
    """A hyper-parameter for people: one number, or one per scale in brackets."""
    if np.ndim(value) == 0:
        return f"{value:.4g}"
    return "[" + " ".join(f"{v:.3g}" for v in value) + "] per scale"


def _fit_summary(designer: SequentialDesigner) -> FitSummary:
    est = designer.estimator_
    if est is None:
        return FitSummary(0, None, None, {})
    if designer.failure_:
        raise StateError(f"the fit on {designer.n_told_} measurements failed ({designer.failure_}); nothing was "
                         "changed")
    if est.scales is None:
        values = {"p0": float(np.mean(est.p0_)), "v0": float(est.v0_)}
    else:  # one value per scale (the approximation's p0 is 1)
        values = {"p0": [float(v) for v in est.p0_], "v0": [float(v) for v in est.v0_]}
    return FitSummary(designer.n_told_, bool(est.converged_), int(est.n_iter_),
                      {**values, "noise_var": float(est.noise_var_)})


def next_rows(state_path, out_path, batch: int = 1) -> tuple[np.ndarray, FitSummary, dict]:
    """Ask for the next ``batch`` rows: write them to ``out_path`` (CSV, one row per line) and record them."""
    batch = val.check_count(batch, "batch")
    with locked(state_path):
        state = load_state(state_path)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the fit's convergence is reported in the summary instead
            designer = state.designer(batch)
            summary = _fit_summary(designer)
            try:
                rows = designer.ask()
            except (ValueError, RuntimeError) as exc:
                raise StateError(str(exc)) from None
        asked = designer.history_[-1]
        call = state.n_asks
        state.asked = np.vstack([state.asked, rows])
        state.asked_by = np.concatenate([state.asked_by, np.full(rows.shape[0], call)])
        state.measured = np.concatenate([state.measured, np.zeros(rows.shape[0], dtype=bool)])
        info = {"command": "next", "time": _now(), "call": call, "rows": int(rows.shape[0]),
                "chosen_by": asked.chosen_by, "n_measured": designer.n_told_,
                "score": [float(s) for s in asked.scores], "bound": float(asked.bound),
                "converged": summary.converged, **summary.hyperparameters}
        state.log.append(info)
        write_csv(out_path, rows)
        save_state(state_path, state)
    return rows, summary, info


def add(state_path, rows_path, values_path) -> dict:
    """Tell measured rows and their values (any rows, asked or not); checked before anything is changed."""
    with locked(state_path):
        state = load_state(state_path)
        rows = read_numbers(rows_path, "measured rows")
        if rows.shape[1] != state.d:
            raise StateError(f"{rows_path}: rows have {rows.shape[1]} entries; this state has {state.d} coefficients")
        values = read_values(values_path, rows.shape[0])
        pending = ~state.measured  # asked rows not measured yet; each asked row matches one measured row
        was_asked = np.zeros(rows.shape[0], dtype=bool)
        for i, row in enumerate(rows):
            hit = np.flatnonzero(pending & (state.asked == row).all(axis=1))
            if hit.size:
                was_asked[i], pending[hit[0]] = True, False
        call = state.n_adds
        state.X = np.vstack([state.X, rows])
        state.y = np.concatenate([state.y, values])
        state.added_by = np.concatenate([state.added_by, np.full(rows.shape[0], call)])
        state.was_asked = np.concatenate([state.was_asked, was_asked])
        state.measured = ~pending
        info = {"command": "add", "time": _now(), "call": call, "rows": int(rows.shape[0]),
                "asked": int(was_asked.sum()), "n_measured": int(state.X.shape[0]),
                "rows_file": str(rows_path), "values_file": str(values_path)}
        state.log.append(info)
        save_state(state_path, state)
    return info


def estimate(state_path, out_path, image_path=None) -> tuple[pd.DataFrame, FitSummary]:
    """The posterior from every measurement: per coefficient its group, mean, standard deviation and the
    probability that its group is active; written to ``out_path`` (CSV with a header). With a basis,
    ``image_path`` also gets the posterior mean image ``Psi^T E[c]`` (CSV, ``side`` lines of ``side`` pixels)."""
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
    group_prob = est.group_prob_[np.searchsorted(est.group_labels_, state.groups)]
    table = pd.DataFrame({"coefficient": np.arange(state.d), "group": state.groups, "mean": est.coef_,
                          "std": np.sqrt(est.coef_var_), "group_prob": group_prob})
    atomic_write(out_path, lambda tmp: table.to_csv(tmp, index=False, float_format="%.10g"))
    if image_path is not None:
        write_csv(image_path, designer.reconstruction().reshape(state.side, state.side))
    return table, summary
