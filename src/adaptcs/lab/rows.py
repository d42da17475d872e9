"""The lab loop from the command line: every measurement and setting in one HDF5 state file.

``python -m adaptcs lab --instrument rows|camera init|next|add|remove|estimate`` (the parsers in
:mod:`adaptcs.instruments.rows`) call the functions here. Each command reads the state, and the ones that change it
(init, next, add) write a complete new file next to it and rename it over the old one, under an exclusive lock: an
interrupted or failed command leaves the state as it was, and bad input files change nothing. No output file may be
the state file, the same rows and values are not added twice by mistake (``add --again`` for a real repeat), and a
batch added by mistake is taken back with ``remove`` (kept in the file and logged, never deleted). The estimate
depends only on the measurements told (every command refits GSS-EP from scratch on all of them), never on the order
of the commands; a camera's loop (below) refits add by add, so there it depends on the adds as they were made, not on
when rows were asked for.

With a basis (``init --basis haar --side 64``) the unknowns are the basis coefficients ``c`` of an image
``x = Psi^T c`` (:mod:`adaptcs.bases.images`): groups are the basis's 2 x 2 blocks, GSS-EP has a spike probability and
a slab variance per wavelet scale (learned unless given), and every row asked for, told or pooled is a pattern of
pixels (what the instrument shows), stored as such; the fit sees it as ``Psi a``. A single-pixel camera's loop (a
wavelet basis, strategy "pool" of basis images or "predict", every row told a basis image) is fitted with the
replay's model instead (:class:`adaptcs.models.WaveletTreeSpikeSlab` with the wavelet prediction, exact), so the lab
chooses the rows the replay would (``LabState.uses_tree``).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from adaptcs import _validation as val
from adaptcs._io import (
    StateError,
    atomic_write,
    locked,
    refuse_state_as_output,
    write_numbers,
)
from adaptcs.bases.images import BASES, WAVELETS, make_basis
from adaptcs.design import SequentialDesigner
from adaptcs.design.designer import ROW_CONSTRAINTS, STRATEGIES, Told
from adaptcs.lab import told_by_add
from adaptcs.lab.state import (
    INIT_COMMAND,
    MAX_UNKNOWNS,
    LabState,
    load_state,
    now,
    save_state,
    settings_problems,
    too_many,
)
from adaptcs.models import WaveletTreeSpikeSlab
from adaptcs.readers import read_groups, read_numbers, read_values

REPEAT_RTOL = 1e-9  # a told row and value this close to one already in the fit is a repeat (lab.add)
NOISE_CAUTION_ROWS = 0.25  # a noise variance learned from fewer rows per unknown is flagged (FitSummary.noise_note)


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
            raise StateError(f"--side {side}: {too_many(side * side)}")
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
    problems = settings_problems(given, seed, row_norm, groups.shape[0], basis_name, side, level or 0)
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
    state.log.append({"command": "init", "time": now(), "d": state.d, "groups": int(np.unique(groups).size),
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
                "know your instrument's noise variance, give it: lab init --noise-var <it> --force, then add "
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
        info = {"command": "next", "time": now(), "call": call, "rows": int(rows.shape[0]),
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
        info = {"command": "add", "time": now(), "call": call, "rows": int(rows.shape[0]),
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
    with locked(state_path, made_by=INIT_COMMAND):
        state = load_state(state_path)
        take = told_by_add(state.added_by, state.n_adds, batch, state_path, "measurements")
        state.removed_X = np.vstack([state.removed_X, state.X[take]])
        state.removed_y = np.concatenate([state.removed_y, state.y[take]])
        state.removed_by = np.concatenate([state.removed_by, state.added_by[take]])
        if take[:state.tracked_rows].any():  # the kept tracked fit was fitted on them
            state.drop_tracked_fit()
        state.X, state.y, state.added_by = state.X[~take], state.y[~take], state.added_by[~take]
        state.was_asked, pending = _match_asked(state.asked, np.ones(state.asked.shape[0], dtype=bool), state.X)
        state.measured = ~pending
        info = {"command": "remove", "time": now(), "batch": batch, "rows": int(np.count_nonzero(take)),
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
        raise StateError(f"{state_path} has no measurements yet (add some with 'python -m adaptcs lab add')")
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
