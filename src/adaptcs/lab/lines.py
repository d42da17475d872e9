"""A scanner's loop for Cartesian lines: ask for the next phase encodes, measure them, tell their readouts.

``python -m adaptcs lab --instrument mri init|next|add|estimate`` call the functions here (docs/mri.md, "At the
scanner"). The state is one HDF5 file holding every line told (its phase-encode index and its complex readout) and
the model's settings; commands that change it write a complete new file next to it and rename it over the old one,
under an exclusive lock (as :mod:`adaptcs.lab.rows` does for rows), so an interrupted or failed command leaves the
state as it was. Every command refits the line model from scratch on every line told and to EP's strict test, so
answers depend only on the lines told, never on the order of the commands.

Before any line is told, ``next`` asks for the centre lines (``start`` of them); after that, for the unmeasured
lines of largest exact information gain under the posterior of the lines told (a batch: the largest gains under
one posterior). The noise variance is the one given at ``init`` (a noise scan), or estimated from the readout
edges of the lines told (:func:`adaptcs.mri.noise.noise_from_readout_edges`).

A batch of lines told by mistake is taken back with ``remove`` (its lines and readouts stay in the file as removed,
and the log records it); a removed line may be told again. A line already told is refused unless ``add --again``
says that it is a real repeat measurement: every readout is kept, and the model fits each line's mean readout with
the noise variance divided by the number of readouts (the line models' ``averages``).

A receive array (``coils`` > 1): every line's readout is one per coil, (coils, nx); the coils are prewhitened by
the noise covariance given at ``init`` or estimated from the readout edges of the lines told
(:func:`adaptcs.mri.coils.noise_covariance_from_readout_edges`), and the model is the coil line model
(:class:`adaptcs.models.line_coils.CoilPhaseLineGaussian`) with the sensitivities given at ``init`` or ESPIRiT's of
the ``start`` centre lines (all of them told first).

State file layout (format ``adaptcs-mri-lines-state``, version 4; version 3 is the same for one coil without the
coil datasets; version 2 without repeated lines; version 1, without ``added_by`` and the removed lines, opens with
each line's add read from its log)::

    attrs: format, format_version, ny, nx, wavelet, level, prior, profile, start, noise_var (NaN: estimated),
           coils, data_sha256 (of every dataset's name, type, shape and bytes), attrs_sha256 (of the other
           attributes)
    lines       (m,)     int    phase-encode rows of the centred k-space told, in the order told (a line told
                                again by ``add --again`` appears once per readout)
    readout_re  (m, nx)  float  real part of each line's readout (centred k-space, phase encode along y); with
                                coils (m, coils, nx)
    readout_im  (m, nx)  float  imaginary part
    sensitivities_re, sensitivities_im  (coils, ny, nx) or (0,)  the sensitivities given at init (as recorded)
    noise_cov_re, noise_cov_im          (coils, coils) or (0,)   the noise covariance given at init
    added_by    (m,)     int    which ``add`` told each line (0, 1, ...)
    removed     (r,)     int    lines taken back by ``remove``, with removed_re, removed_im (r, nx) and
                                removed_by (r,): their readouts and the add that had told them
    asked       (k,)     int    every line ``next`` asked for, in order
    log         (j,)     bytes  one JSON line (UTF-8) per command that changed the state
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np

from adaptcs._io import StateError, as_text, attrs_digest, data_digest, locked, write_state_file
from adaptcs._names import LINE_LAB_FORMAT
from adaptcs._validation import check_measurement_scale
from adaptcs.bases.separable import SeparableWavelet, centre_lines
from adaptcs.design.candidates import CandidateDesigner
from adaptcs.lab import told_by_add
from adaptcs.mri.noise import noise_from_readout_edges
from adaptcs.mri.replay import PRIORS, PROFILES, line_model
from adaptcs.operators import CoilKSpaceLines, KSpaceLines

STATE_FORMAT = LINE_LAB_FORMAT
STATE_VERSION = 4
READABLE_VERSIONS = (1, 2, 3, 4)  # version 1: no added_by, nothing removed; 3: lines told again; 4: coils
INIT_COMMAND = "python -m adaptcs lab --instrument mri init"


@dataclass
class LineState:
    """Everything a line loop has told and asked (see the module docstring for the file layout)."""

    ny: int
    nx: int
    wavelet: str = "db4"
    level: int = 4
    prior: str = "gaussian"
    profile: str = "colin27"
    start: int = 16
    noise_var: float = float("nan")
    lines: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    readouts: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=complex))
    asked: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    log: list = field(default_factory=list)
    added_by: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    removed: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    removed_readouts: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=complex))
    removed_by: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    coils: int = 1
    sensitivities: np.ndarray | None = None  # (coils, ny, nx) as given at init (not whitened)
    noise_covariance: np.ndarray | None = None  # (coils, coils) as given at init

    def __post_init__(self):
        if self.readouts.shape == (0, 0):
            self.readouts = np.zeros((0, *self.line_shape), dtype=complex)
        if self.removed_readouts.shape == (0, 0):
            self.removed_readouts = np.zeros((0, *self.line_shape), dtype=complex)

    @property
    def line_shape(self) -> tuple:
        """One line's readout: (nx,), or (coils, nx) for a receive array."""
        return (self.nx,) if self.coils == 1 else (self.coils, self.nx)

    @property
    def n_adds(self) -> int:
        """How many ``add`` commands have told lines (removed ones included)."""
        return sum(json.loads(entry)["command"] == "add" for entry in self.log)

    @property
    def basis(self) -> SeparableWavelet:
        return SeparableWavelet((self.ny, self.nx), self.wavelet, self.level)

    def noise(self) -> tuple[float, str]:
        """The noise variance per complex sample and where it came from (with coils: 1, the prewhitened coils')."""
        if self.coils > 1:
            source = "given" if self.noise_covariance is not None else \
                f"from the readout edges of the {self.lines.shape[0]} lines told"
            return 1.0, f"coils prewhitened by their noise covariance {source}"
        if np.isfinite(self.noise_var):
            return self.noise_var, "given"
        return noise_from_readout_edges(self.readouts), f"readout edges of the {self.lines.shape[0]} lines told"

    def whitened(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """With coils: every line told once (k,), its mean readout (k, coils, nx) and the sensitivities (coils, ny, nx),
        prewhitened by the noise covariance (given, or from the readout edges of the lines told), and how many
        readouts each line averages (k,); the sensitivities are ESPIRiT's of the ``start`` centre lines when none
        were given (StateError until every one of them is told)."""
        from adaptcs.mri.coils import espirit_maps, noise_covariance_from_readout_edges, prewhiten

        covariance = self.noise_covariance if self.noise_covariance is not None else \
            noise_covariance_from_readout_edges(np.moveaxis(self.readouts, 1, 0))
        lines, means, counts = self.told()
        means = np.moveaxis(prewhiten(np.moveaxis(means, 1, 0), covariance), 0, 1)  # the mean of the whitened
        if self.sensitivities is not None:
            return lines, means, prewhiten(self.sensitivities, covariance), counts
        centre = centre_lines(self.ny, self.start)
        missing = np.setdiff1d(centre, self.lines)
        if missing.size:
            raise StateError(f"ESPIRiT calibrates on the {self.start} centre lines: tell line(s) {missing.tolist()} "
                             "first (or give the sensitivities at init)")
        calibration = np.zeros((self.coils, self.ny, self.nx), dtype=complex)
        keep = np.isin(lines, centre)
        calibration[:, lines[keep]] = np.moveaxis(means[keep], 1, 0)
        return lines, means, espirit_maps(calibration, self.start), counts

    def told(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every line told once, in the order first told, its mean readout and how many readouts that averages:
        shapes (k,), (k, nx), (k,)."""
        lines, first, inverse, counts = np.unique(self.lines, return_index=True, return_inverse=True,
                                                  return_counts=True)
        means = np.zeros((lines.shape[0], *self.line_shape), dtype=complex)
        np.add.at(means, inverse, self.readouts)
        order = np.argsort(first, kind="stable")
        return lines[order], (means / counts.reshape(-1, *([1] * len(self.line_shape))))[order], counts[order]

    def designer(self) -> CandidateDesigner:
        """The line loop standing where this state stands: every line told (lines told again: their mean readout,
        ``averages``), the model fitted from scratch on them (to the strict test); nothing told yet, it asks for
        the ``start`` centre lines."""
        operator = KSpaceLines(self.basis, n_first=self.start)
        if not self.lines.size:
            return CandidateDesigner(None, operator)
        noise_var, _ = self.noise()
        maps = None
        if self.coils > 1:  # every coil's mean readout, prewhitened; the model of the receive array
            lines, means, maps, counts = self.whitened()
            operator = CoilKSpaceLines(self.basis, maps, n_first=self.start)
        else:
            lines, means, counts = self.told()
        designer = CandidateDesigner(line_model(self.basis, noise_var, self.prior, self.profile, maps), operator)
        return designer.tell(lines, means, averages=counts if np.any(counts > 1) else None)

    def fit(self):
        """The line model fitted from scratch, to the strict test, on every line told (its fitted attributes:
        :class:`adaptcs.models._line_model.LineModel`)."""
        if not self.lines.size:
            raise StateError("no line has been told yet: measure the lines `next` asks for and `add` them")
        return self.designer().model_


def init(state_path, shape, *, wavelet: str = "db4", level: int = 4, prior: str = "gaussian",
         profile: str = "colin27", start: int | None = None, noise_var: float | None = None, coils: int = 1,
         sensitivities=None, noise_covariance=None) -> LineState:
    """Start a new loop (StateError if the state file exists or a setting is wrong; nothing is written then).
    ``coils`` > 1: a receive array, with its ``sensitivities`` (coils, ny, nx) and ``noise_covariance`` (coils,
    coils) if known (otherwise ESPIRiT's of the centre lines and the readout edges' estimate)."""
    path = Path(state_path)
    ny, nx = (int(shape[0]), int(shape[1]))
    problems = []
    if prior not in PRIORS:
        problems.append(f"prior must be one of {PRIORS}")
    if profile not in PROFILES:
        problems.append(f"profile must be one of {PROFILES}")
    if noise_var is not None and not (np.isfinite(noise_var) and noise_var > 0):
        problems.append(f"the noise variance must be positive; got {noise_var}")
    start = max(1, ny // 16) if start is None else int(start)
    if not 1 <= start <= ny:
        problems.append(f"start must lie in 1..{ny}; got {start}")
    try:
        SeparableWavelet((ny, nx), wavelet, level)
    except ValueError as exc:
        problems.append(str(exc))
    problems += _coil_problems(int(coils), (ny, nx), start, prior, noise_var, sensitivities, noise_covariance)
    if problems:
        raise StateError(f"{path}: " + "; ".join(problems))
    state = LineState(ny=ny, nx=nx, wavelet=wavelet, level=int(level), prior=prior, profile=profile, start=start,
                      noise_var=float("nan") if noise_var is None else float(noise_var), coils=int(coils),
                      sensitivities=None if sensitivities is None else np.asarray(sensitivities, dtype=complex),
                      noise_covariance=None if noise_covariance is None else np.asarray(noise_covariance,
                                                                                         dtype=complex))
    with locked(path, creating=True, made_by=INIT_COMMAND):
        if path.exists():
            raise StateError(f"{path} exists already: a loop is under way there (choose another file)")
        _record(state, "init", {"shape": [ny, nx], "wavelet": wavelet, "level": level, "prior": prior,
                                "profile": profile, "start": start, "noise_var": noise_var, "coils": int(coils),
                                "sensitivities_given": sensitivities is not None,
                                "noise_covariance_given": noise_covariance is not None})
        save_state(path, state)
    return state


def _coil_problems(coils: int, shape: tuple, start: int, prior: str, noise_var, sensitivities,
                   noise_covariance) -> list[str]:
    """What is wrong with ``init``'s coil settings (an empty list when nothing is)."""
    if coils == 1:
        given = [name for name, value in (("sensitivities", sensitivities), ("a noise covariance", noise_covariance))
                 if value is not None]
        return [f"{' and '.join(given)} need coils > 1"] if given else []
    problems = []
    if coils < 1:
        return [f"coils must be a positive integer; got {coils}"]
    if prior not in ("phase", "gaussian"):
        problems.append(f"the coil line model takes prior phase or gaussian; got {prior!r}")
    if noise_var is not None:
        problems.append("a noise variance is for one coil: give the coils' noise covariance (or none: the readout "
                        "edges)")
    if sensitivities is not None:
        maps = np.asarray(sensitivities)
        if maps.shape != (coils, *shape) or not np.iscomplexobj(maps) or not np.all(np.isfinite(maps)):
            problems.append(f"the sensitivities must be finite complex of shape {(coils, *shape)}; got {maps.dtype} "
                            f"{maps.shape}")
    elif not 8 <= start:
        problems.append(f"ESPIRiT needs at least 8 centre lines (start) to calibrate on; got {start} (or give the "
                        "sensitivities)")
    if noise_covariance is not None:
        covariance = np.asarray(noise_covariance)
        if covariance.shape != (coils, coils) or not np.all(np.isfinite(covariance)):
            problems.append(f"the noise covariance must be finite of shape ({coils}, {coils}); got {covariance.shape}")
        else:
            try:
                from adaptcs.mri.coils import whitening

                whitening(covariance)
            except ValueError as exc:
                problems.append(str(exc))
    return problems


def next_lines(state_path, batch: int = 1) -> tuple[np.ndarray, dict]:
    """The lines to measure next and what the fit behind the choice says (converged, columns not converged,
    the gains in nats); the request is recorded in the state."""
    if batch < 1:
        raise StateError(f"batch must be a positive integer; got {batch}")
    with locked(state_path, made_by=INIT_COMMAND):
        state = load_state(state_path)
        if np.unique(state.lines).size == state.ny:
            raise StateError("every line has been measured")
        centre = np.setdiff1d(centre_lines(state.ny, state.start), state.lines)
        calibrating = state.coils > 1 and state.sensitivities is None and centre.size
        designer = None if calibrating else state.designer()
        if not state.lines.size or calibrating:  # every centre line first (ESPIRiT calibrates on them)
            lines = np.sort(centre) if calibrating else np.sort(designer.ask(state.start)[0])
            about = {"why": f"the {state.start} centre lines come first"}
        else:
            lines, gains = designer.ask(batch)
            fit = designer.model_
            about = {"why": "largest exact information gain", "gains": gains.tolist(),
                     "converged": fit.converged_, "columns_not_converged": fit.columns_not_converged_,
                     "fit_cpu_seconds": fit.cpu_seconds_}
        state.asked = np.concatenate([state.asked, lines])
        _record(state, "next", {"lines": lines.tolist(), **{k: v for k, v in about.items() if k != "why"}})
        save_state(state_path, state)
    return lines, about


def add(state_path, lines, readouts, *, again: bool = False) -> LineState:
    """Tell the readouts (complex, shape (k, nx), or (k, coils, nx) for a receive array, centred k-space) of
    phase-encode rows ``lines`` (k,); lines told before are refused unless ``again`` says they are real repeat
    measurements."""
    lines = np.atleast_1d(np.asarray(lines))
    readouts = np.asarray(readouts)
    with locked(state_path, made_by=INIT_COMMAND):
        state = load_state(state_path)
        if lines.ndim != 1 or not np.issubdtype(lines.dtype, np.integer):
            raise StateError(f"lines must be integers (phase-encode rows); got {lines!r}")
        if readouts.ndim == 1 and state.coils == 1:
            readouts = readouts[None]
        if readouts.shape != (lines.shape[0], *state.line_shape) or not np.iscomplexobj(readouts):
            layout = "(one per line told)" if state.coils == 1 else "(lines, coils, readout)"
            raise StateError(f"the readouts must be complex with shape {(lines.shape[0], *state.line_shape)} {layout}; "
                             f"got {readouts.dtype} {readouts.shape}")
        if not np.all(np.isfinite(readouts)):
            raise StateError("the readouts hold NaN or inf: leave the line out and measure it again")
        if np.any((lines < 0) | (lines >= state.ny)):
            raise StateError(f"lines must be rows of the centred k-space, 0..{state.ny - 1}; got {lines.tolist()}")
        twice = sorted({int(v) for v in lines if np.sum(lines == v) > 1})
        if twice:
            raise StateError(f"line(s) {twice} given twice in one add: give each line once, with its readout")
        repeated = np.intersect1d(lines, state.lines).tolist()
        if repeated and not again:
            raise StateError(f"line(s) {sorted(set(repeated))} told already: pass --again if they are real repeat "
                             "measurements (the model then fits each line's mean readout)")
        try:  # a unit or typing error, or a value whose square overflows, would make every later fit fail
            check_measurement_scale(np.abs(readouts), np.zeros(0), np.abs(state.readouts) if state.lines.size
                                    else None, None)
        except ValueError as exc:
            raise StateError(str(exc).replace("row entry", "readout")) from None
        state.added_by = np.concatenate([state.added_by, np.full(lines.shape[0], state.n_adds, dtype=np.int64)])
        state.lines = np.concatenate([state.lines, lines.astype(np.int64)])
        state.readouts = np.concatenate([state.readouts, readouts.astype(complex)])
        _record(state, "add", {"lines": lines.tolist(), **({"again": True} if again else {})})
        save_state(state_path, state)
    return state


def remove(state_path, batch: int) -> dict:
    """Take back the lines of add ``batch`` (numbered from 0 as ``add`` reports it): they leave the fit, stay in
    the file as removed, and the log records it."""
    with locked(state_path, made_by=INIT_COMMAND):
        state = load_state(state_path)
        take = told_by_add(state.added_by, state.n_adds, batch, state_path, "lines")
        state.removed = np.concatenate([state.removed, state.lines[take]])
        state.removed_readouts = np.concatenate([state.removed_readouts, state.readouts[take]])
        state.removed_by = np.concatenate([state.removed_by, state.added_by[take]])
        lines = state.lines[take].tolist()
        state.lines, state.readouts, state.added_by = state.lines[~take], state.readouts[~take], state.added_by[~take]
        _record(state, "remove", {"batch": int(batch), "lines": lines})
        save_state(state_path, state)
    return {"batch": int(batch), "lines": lines, "n_told": int(state.lines.shape[0])}


def estimate(state_path) -> tuple[object, dict]:
    """The line model fitted on every line told (``image_`` its posterior mean image), and what the fit says
    (read-only)."""
    state = load_state(state_path)
    fit = state.fit()
    noise_var, source = state.noise()
    return fit, {"lines": int(np.unique(state.lines).shape[0]), "readouts": int(state.lines.shape[0]),
                 "converged": fit.converged_,
                 "columns_not_converged": fit.columns_not_converged_, "noise_var": noise_var, "noise_source": source,
                 "fit_cpu_seconds": fit.cpu_seconds_}


def _record(state: LineState, command: str, details: dict) -> None:
    stamp = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    state.log.append(json.dumps({"command": command, "time": stamp, **details}, sort_keys=True, default=str))


V1_DATASETS = ("lines", "readout_re", "readout_im", "asked", "log")
V3_DATASETS = V1_DATASETS + ("added_by", "removed", "removed_re", "removed_im", "removed_by")
DATASETS = V3_DATASETS + ("sensitivities_re", "sensitivities_im", "noise_cov_re", "noise_cov_im")


def _arrays(state: LineState) -> dict:
    return {"lines": state.lines.astype(np.int64), "readout_re": np.ascontiguousarray(state.readouts.real),
            "readout_im": np.ascontiguousarray(state.readouts.imag), "asked": state.asked.astype(np.int64),
            "log": np.array([line.encode() for line in state.log], dtype=np.bytes_),
            "added_by": state.added_by.astype(np.int64), "removed": state.removed.astype(np.int64),
            "removed_re": np.ascontiguousarray(state.removed_readouts.real),
            "removed_im": np.ascontiguousarray(state.removed_readouts.imag),
            "removed_by": state.removed_by.astype(np.int64),
            **_complex_dataset("sensitivities", state.sensitivities), **_complex_dataset("noise_cov",
                                                                                        state.noise_covariance)}


def _complex_dataset(name: str, value) -> dict:
    """``name_re`` and ``name_im`` of a complex array, or empty ones (shape (0,)) for None."""
    value = np.zeros(0, dtype=complex) if value is None else np.asarray(value, dtype=complex)
    return {f"{name}_re": np.ascontiguousarray(value.real), f"{name}_im": np.ascontiguousarray(value.imag)}


def _adds_from_log(log: list[str], lines: np.ndarray, path) -> np.ndarray:
    """Which add told each line of a version-1 state (whose adds are all in its log, in order, none removed)."""
    added_by = [i for i, entry in enumerate(e for e in map(json.loads, log) if e["command"] == "add")
                for _ in entry["lines"]]
    told = [line for entry in map(json.loads, log) if entry["command"] == "add" for line in entry["lines"]]
    if told != lines.tolist():
        raise StateError(f"{path}: the state's lines and its log's adds do not agree (the file is damaged)")
    return np.array(added_by, dtype=np.int64)


def save_state(path, state: LineState) -> Path:
    """Write the whole state (with checksums) to a new file and rename it over ``path``."""
    attrs = {name: getattr(state, name) for name in ("wavelet", "prior", "profile")}
    attrs.update({"format": STATE_FORMAT, "format_version": STATE_VERSION, "noise_var": float(state.noise_var)})
    attrs.update({name: int(getattr(state, name)) for name in ("ny", "nx", "level", "start", "coils")})
    return write_state_file(path, attrs, _arrays(state))


def load_state(path) -> LineState:
    """Read and check a state file (StateError if it is not one or is damaged)."""
    path = Path(path)
    if path.is_dir():
        raise StateError(f"{path}: a folder, not a state file (start one with `{INIT_COMMAND}`)")
    if not path.is_file():
        raise StateError(f"{path}: no such state file (start one with `{INIT_COMMAND}`)")
    try:
        with h5py.File(path, "r", locking=False) as f:
            if as_text(f.attrs.get("format", "")) != STATE_FORMAT:
                raise StateError(f"{path}: not a line-loop state file")
            version = int(f.attrs["format_version"])
            if version not in READABLE_VERSIONS:
                raise StateError(f"{path}: state format version {f.attrs['format_version']}; this adaptcs reads "
                                 f"{READABLE_VERSIONS}")
            names = DATASETS if version >= 4 else V3_DATASETS if version >= 2 else V1_DATASETS
            arrays = {name: f[name][()] for name in names}
            if as_text(f.attrs["data_sha256"]) != data_digest(arrays) or \
                    as_text(f.attrs["attrs_sha256"]) != attrs_digest(f.attrs):
                raise StateError(f"{path}: the state fails its checksum (damaged); restore it from a copy")
            coils = int(f.attrs["coils"]) if version >= 4 else 1
            line_shape = (int(f.attrs["nx"]),) if coils == 1 else (coils, int(f.attrs["nx"]))
            state = LineState(ny=int(f.attrs["ny"]), nx=int(f.attrs["nx"]), wavelet=as_text(f.attrs["wavelet"]),
                              level=int(f.attrs["level"]), prior=as_text(f.attrs["prior"]),
                              profile=as_text(f.attrs["profile"]), start=int(f.attrs["start"]),
                              noise_var=float(f.attrs["noise_var"]), lines=arrays["lines"],
                              readouts=(arrays["readout_re"] + 1j * arrays["readout_im"]).reshape(-1, *line_shape),
                              asked=arrays["asked"], log=[as_text(v) for v in arrays["log"]], coils=coils)
            if version >= 2:
                state.added_by, state.removed, state.removed_by = (arrays[name] for name in ("added_by", "removed",
                                                                                             "removed_by"))
                state.removed_readouts = (arrays["removed_re"] + 1j * arrays["removed_im"]).reshape(-1, *line_shape)
            if version >= 4:
                for name, attribute in (("sensitivities", "sensitivities"), ("noise_cov", "noise_covariance")):
                    value = arrays[f"{name}_re"] + 1j * arrays[f"{name}_im"]
                    setattr(state, attribute, value if value.size else None)
            else:
                state.added_by = _adds_from_log(state.log, state.lines, path)
    except StateError:
        raise
    except (OSError, KeyError, ValueError, TypeError) as exc:
        raise StateError(f"{path}: cannot read this state file ({type(exc).__name__}: {exc})") from None
    if state.readouts.shape != (state.lines.shape[0], *state.line_shape) or \
            state.added_by.shape != state.lines.shape or \
            state.removed_readouts.shape != (state.removed.shape[0], *state.line_shape) or \
            state.removed_by.shape != state.removed.shape:
        raise StateError(f"{path}: the state's lines and readouts do not fit together")
    return state
