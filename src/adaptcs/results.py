"""The HDF5 result file of one job, and tidy tables read back from many.

A job is many replicates of one (experiment, setting, method, hyper-parameters, strategy). Its file holds
(format version 6; versions 4 and 5 are still read: version 5 kept its text in variable-length strings, version 4
had no ``data_sha256`` either; version 3 recorded wall times):

File attributes
    ``format`` = "adaptcs.results", ``format_version`` = 6, ``experiment``, ``setting_index``,
    ``setting`` (JSON), ``method``, ``hyperparameters`` ("oracle": the paper's values from the true signal, or
    "learned" from the measurements), ``strategy``, ``config`` (JSON of everything the job was run with),
    ``versions`` (JSON: python, adaptcs, numpy, scipy, scikit-learn, h5py), ``blas`` (JSON: BLAS library,
    version and thread count from threadpoolctl), ``created`` (UTC, ISO 8601), ``data_sha256`` (SHA-256 of
    every dataset's name, type, shape and bytes, checked on reading: HDF5's Fletcher-32 checks a chunk's bytes, not
    which chunk a damaged pointer leads to), ``attrs_sha256`` (SHA-256 of all the other attributes; checked on
    reading).

Datasets (R replicates, T = 1 + number of design steps, d coefficients, G groups)
    ``replicate`` (R,) int: replicate indices.
    ``n_measurements`` (T,) int: rows after the initial fit and after every step.
    ``errors`` (R, T): relative error ||w_hat - w_true|| / ||w_true|| (dimensionless).
    ``fit_seconds`` (R, T): CPU time of each fit (s; the process's, all its threads).
    ``select_seconds`` (R, T - 1): CPU time of choosing each step's rows (s).
    ``coef`` (R, d): final estimate.
    ``w_true`` (R, d): the true signal.
    ``true_groups`` (R, d) int: the group of each coefficient the signal was generated with.
    ``fit_groups`` (R, d) int: the group labels the method was told (differ from ``true_groups`` in E2).
    ``group_prob`` (R, G): final group activation probabilities (only for methods that have them).
    ``problem_seed`` (R, k) int: the integers the problem's SeedSequence was built from.
    ``design_seed`` (R, k) int: the same for the design loop's generator.
    ``checkpoint_n`` (K,) int and ``checkpoint_coef`` (R, K, d): estimates kept at some numbers of rows
    (image experiments; optional).
    ``psnr`` (R,) in dB and ``ssim`` (R,): image quality of the final estimate (image experiments; optional).
    ``fitted_p0``, ``fitted_v0``, ``fitted_noise_var``, ``fitted_alpha`` (R,): the final fit's hyper-parameters
    (given in oracle jobs, learned in learned jobs; p0 averaged over groups, v0 and the noise variance in
    squared signal and measurement units, alpha the lasso penalty); NaN where the method has no such value
    (optional: only the methods that report some).
    ``converged`` (R, T) int8: per fit, 1 converged, 0 not converged, -1 no convergence test or fit failed.
    ``n_iter`` (R, T) int: per fit, iterations (sweeps for samplers); -1 where the method reports none.
    ``residual`` (R, T): per fit, how far one more undamped update would move it (EP's ``fixed_point_residual_``:
    the change of the posterior mean relative to the largest coefficient, or of a group probability); NaN where
    the method reports none (optional: files written before it was recorded have none).
    ``finite`` (R, T) bool: per fit, whether the estimate was finite (False from a failed fit on).
    ``blocks_not_converged`` (R, T) int: per fit of a model whose posterior falls into independent blocks (k-space
    lines: one per column of coefficients), the blocks that had not reached EP's fixed point (optional).
    ``failure`` (R,) bytes (UTF-8): empty, or where and how a replicate's run failed; its errors are NaN from
    there on and tables count it as failed instead of averaging it.
    (Samplers draw from a third stream, SeedSequence(experiment, setting, replicate, 2).)
Every dataset carries ``units`` and ``description`` attributes and a Fletcher-32 checksum (HDF5 filter), so a
flipped bit makes reading fail instead of changing a number; every read error names the file. Every text attribute
is a fixed-length UTF-8 string and the file has HDF5's checksummed object headers (``libver="v110"``): a
variable-length string lives in the global heap, which has no checksum, and a flipped length there made reading
spin forever (benchmarks/bench_flip_sweep.py).

A summary file (:func:`write_summary`) holds the merged jobs of one experiment, one HDF5 group per
(setting, method, hyper-parameters, strategy) at ``/{setting_index}/{label}/{strategy}``, ``label`` being
:attr:`JobResult.label` (``gss_ep``, ``gss_ep+learned``), with the same attributes and datasets as a job file.

Writes are atomic: the file is written under a temporary name in the same folder and renamed into place
only when complete, so a killed job never leaves a file that looks finished.
"""

from __future__ import annotations

import json
import platform
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import h5py
import numpy as np
import pandas as pd

from adaptcs._io import as_text, atomic_write, attrs_digest, data_digest, fixed_text

FORMAT = "adaptcs.results"
FORMAT_VERSION = 6
READABLE_VERSIONS = (4, 5, 6)  # version 5: text in variable-length strings; 4: no data_sha256 either

_DATASETS = {
    # name: (units, description)
    "replicate": ("1", "replicate index"),
    "n_measurements": ("rows", "number of measurement rows after the initial fit and after every step"),
    "errors": ("1", "relative error ||w_hat - w_true|| / ||w_true||, per replicate and step"),
    "fit_seconds": ("s", "CPU time of each fit (the process's, all threads)"),
    "select_seconds": ("s", "CPU time of choosing each step's rows"),
    "coef": ("signal units", "final estimate of w"),
    "w_true": ("signal units", "true signal"),
    "true_groups": ("1", "group of each coefficient in the generating model"),
    "fit_groups": ("1", "group labels given to the method"),
    "group_prob": ("1", "final posterior probability that each group is active"),
    "problem_seed": ("1", "integers the problem's numpy SeedSequence was built from"),
    "design_seed": ("1", "integers the design loop's numpy SeedSequence was built from"),
    "checkpoint_n": ("rows", "numbers of rows at which estimates were kept"),
    "checkpoint_coef": ("signal units", "estimates at checkpoint_n, per replicate"),
    "psnr": ("dB", "peak signal-to-noise ratio of the final estimate (clipped to the pixel range [0, 1])"),
    "ssim": ("1", "structural similarity of the final estimate (clipped to [0, 1]) with the true image"),
    "converged": ("1", "per fit: 1 converged, 0 not converged, -1 no convergence test or the fit failed"),
    "n_iter": ("1", "per fit: iterations (sweeps for samplers), -1 where the method reports none"),
    "residual": ("1", "per fit: change one more undamped update would make (EP's fixed_point_residual_), "
                      "NaN where the method reports none"),
    "finite": ("1", "per fit: whether the estimate was finite"),
    "blocks_not_converged": ("1", "per fit: independent blocks of the posterior (k-space lines: columns of "
                                  "coefficients) an undamped EP update would still move; -1 where the fit has none"),
    "failure": ("text", "per replicate: empty, or where and how its run failed (UTF-8)"),
    "fitted_p0": ("1", "final fit's prior probability of a group (mean over groups); given or learned"),
    "fitted_v0": ("signal units^2", "final fit's slab variance; given or learned"),
    "fitted_noise_var": ("measurement units^2", "final fit's noise variance; given or learned"),
    "fitted_alpha": ("measurement units^2", "final fit's lasso penalty; given or chosen by cross-validation"),
}
FITTED = ("p0", "v0", "noise_var", "alpha")  # fitted_<name> datasets, from SequentialDesignResult.hyperparameters
_OPTIONAL = ("group_prob", "checkpoint_n", "checkpoint_coef", "psnr", "ssim", "residual", "blocks_not_converged") + \
    tuple(f"fitted_{n}" for n in FITTED)


class ResultFileError(ValueError):
    """A result file that cannot be read or fails its checks; the message names the file."""


@dataclass
class JobResult:
    """Everything one job writes; see the module docstring for the meaning of each array."""

    experiment: str
    setting_index: int
    setting: dict
    method: str
    strategy: str
    replicate: np.ndarray
    n_measurements: np.ndarray
    errors: np.ndarray
    fit_seconds: np.ndarray
    select_seconds: np.ndarray
    coef: np.ndarray
    w_true: np.ndarray
    problem_seed: np.ndarray
    design_seed: np.ndarray
    true_groups: np.ndarray
    fit_groups: np.ndarray
    group_prob: np.ndarray | None = None
    checkpoint_n: np.ndarray | None = None
    checkpoint_coef: np.ndarray | None = None
    psnr: np.ndarray | None = None
    ssim: np.ndarray | None = None
    converged: np.ndarray | None = None
    n_iter: np.ndarray | None = None
    residual: np.ndarray | None = None
    finite: np.ndarray | None = None
    failure: np.ndarray | None = None
    blocks_not_converged: np.ndarray | None = None
    fitted_p0: np.ndarray | None = None
    fitted_v0: np.ndarray | None = None
    fitted_noise_var: np.ndarray | None = None
    fitted_alpha: np.ndarray | None = None
    hyperparameters: str = "oracle"
    config: dict = field(default_factory=dict)
    versions: dict = field(default_factory=dict)
    blas: list = field(default_factory=list)
    created: str = ""

    @property
    def label(self) -> str:
        """The method as results name it: ``gss_ep`` with oracle hyper-parameters, ``gss_ep+learned``."""
        from adaptcs._names import variant_label

        return variant_label(self.method, self.hyperparameters)

    @property
    def failed(self) -> np.ndarray:
        """Per replicate (R,): whether its run failed (its errors are NaN from the failed step on)."""
        return np.array([bool(f) for f in self.failure], dtype=bool) | ~np.isfinite(self.errors[:, -1])


def environment_versions() -> dict:
    """Versions of Python and the numerical packages, for the record."""
    import scipy
    import sklearn

    from adaptcs import __version__

    return {"python": platform.python_version(), "adaptcs": __version__, "numpy": np.__version__,
            "scipy": scipy.__version__, "scikit-learn": sklearn.__version__, "h5py": h5py.__version__}


def blas_info() -> list:
    """BLAS libraries in use with their thread counts (threadpoolctl), sorted: the order in which they were
    loaded depends on import order, which differs between a local and a cluster job of the same run."""
    from threadpoolctl import threadpool_info

    found = [{"library": i.get("internal_api"), "version": i.get("version"), "threads": i.get("num_threads")}
             for i in threadpool_info() if i.get("user_api") == "blas"]
    return sorted(found, key=lambda b: (str(b["library"]), str(b["version"]), str(b["threads"])))


def write_job(path, job: JobResult) -> Path:
    """Write ``job`` to ``path`` atomically (temporary file in the same folder, then rename).

    Returns the final path. Any failure removes the temporary file and leaves no file at ``path``.
    """
    _check_complete(job)
    return _atomic_h5(path, lambda f: _write_job_group(f, job))


def _check_complete(job: JobResult) -> None:
    missing = [name for name in _DATASETS if name not in _OPTIONAL and getattr(job, name) is None]
    if missing:
        raise ValueError(f"JobResult of {job.experiment}/{job.method}/{job.strategy} lacks {missing}")


def read_job(path) -> JobResult:
    """Read one job file; :class:`ResultFileError` (a ValueError naming the file) if it is not an adaptcs result
    of this version, fails a checksum, or is a summary file (:func:`read_results` reads both kinds)."""
    with _reading(path) as f:
        _check_format(f, path)
        if _is_summary(f):
            raise ResultFileError(f"{path}: a summary file (the merged jobs of one experiment), not one job: read it "
                                  "with read_summary or read_results")
        return _read_job_group(f, path)


def read_results(path) -> list[JobResult]:
    """The jobs in a result file: the one of a job file, or every (setting, method, strategy) of a summary file."""
    with _reading(path) as f:
        _check_format(f, path)
        if not _is_summary(f):
            return [_read_job_group(f, path)]
    return list(read_summary(path).values())


def _is_summary(f) -> bool:
    """A summary file's root holds only the format; a job file's root is the job (it names its experiment)."""
    return "experiment" not in f.attrs


@contextmanager
def _reading(path):
    """Open an HDF5 file for reading; any error on the way becomes a ResultFileError naming the file."""
    if not Path(path).is_file():
        raise ResultFileError(f"{path}: no such result file")
    try:
        with h5py.File(path, "r", locking=False) as f:
            yield f
    except ResultFileError:
        raise
    except (OSError, KeyError, ValueError, TypeError, RuntimeError, IndexError, AttributeError, OverflowError) as exc:
        # h5py reports a damaged structure as any of these (RuntimeError for a broken B-tree or heap)
        raise ResultFileError(f"{path}: cannot read this result file, it is damaged or not one "
                              f"({type(exc).__name__}: {exc})") from exc


def merge_jobs(jobs) -> JobResult:
    """Concatenate jobs of the same (experiment, setting, method, hyper-parameters, strategy) along replicates,
    sorted."""
    jobs = list(jobs)
    if not jobs:
        raise ValueError("no jobs to merge")
    first = jobs[0]
    key = _job_key(first)
    for job in jobs[1:]:
        if _job_key(job) != key:
            raise ValueError(f"cannot merge jobs of different kinds: {key} and {_job_key(job)}")
        if not np.array_equal(job.n_measurements, first.n_measurements):
            raise ValueError(f"cannot merge jobs with different measurement schedules ({key})")
        if _run_settings(job.config) != _run_settings(first.config):
            raise ValueError(f"cannot merge jobs run with different settings ({key}): {_run_settings(first.config)} "
                             f"and {_run_settings(job.config)}; rerun the older jobs (snakemake -R run_job)")
    replicate = np.concatenate([j.replicate for j in jobs])
    if len(np.unique(replicate)) != len(replicate):
        raise ValueError(f"replicates overlap between the jobs being merged ({key})")
    order = np.argsort(replicate, kind="stable")

    def stacked(name):
        parts = [getattr(j, name) for j in jobs]
        if name == "residual" and any(p is not None for p in parts):  # a job from before it was recorded: NaN
            parts = [np.full(j.errors.shape, np.nan) if p is None else p for j, p in zip(jobs, parts, strict=True)]
        return None if parts[0] is None else np.concatenate(parts)[order]

    arrays = {name: stacked(name) for name in _DATASETS if name not in ("n_measurements", "checkpoint_n")}
    arrays["checkpoint_n"] = first.checkpoint_n
    return JobResult(experiment=first.experiment, setting_index=first.setting_index, setting=first.setting,
                     method=first.method, hyperparameters=first.hyperparameters, strategy=first.strategy,
                     n_measurements=first.n_measurements,
                     config=first.config, versions=first.versions, blas=first.blas, created=first.created,
                     **arrays)


def _job_key(job: JobResult) -> tuple:
    return job.experiment, job.setting_index, job.method, job.hyperparameters, job.strategy


def _run_settings(config: dict) -> str:
    """What decides a job's numbers besides its replicates (the workflow config around it may differ)."""
    kept = {k: v for k, v in config.items() if k not in ("replicates", "workflow_config")}
    return json.dumps(kept, sort_keys=True, default=_json_default)


def write_summary(path, jobs) -> Path:
    """Write merged jobs of one experiment to one file, a group per (setting, label, strategy); atomic."""
    jobs = list(jobs)

    def write(f):
        f.attrs["format"] = fixed_text(FORMAT)
        f.attrs["format_version"] = FORMAT_VERSION
        for job in jobs:
            _write_job_group(f.create_group(f"{job.setting_index}/{job.label}/{job.strategy}"), job)

    return _atomic_h5(path, write)


def read_summary(path) -> dict[tuple[int, str, str], JobResult]:
    """Read a summary file: ``{(setting_index, label, strategy): JobResult}`` (label: :attr:`JobResult.label`)."""
    out = {}
    with _reading(path) as f:
        _check_format(f, path)
        for setting in f:
            for method in f[setting]:
                for strategy in f[setting][method]:
                    out[int(setting), method, strategy] = _read_job_group(f[setting][method][strategy], path)
    return out


def aggregate_runs(run_paths, *, summary_path, curves_path) -> None:
    """Merge job files by (setting, method, hyper-parameters, strategy) into a summary HDF5 and a tidy curves
    CSV."""
    groups: dict[tuple, list[JobResult]] = {}
    for path in run_paths:
        job = read_job(path)
        groups.setdefault(_job_key(job), []).append(job)
    merged = [merge_jobs(jobs) for _, jobs in sorted(groups.items())]
    write_summary(summary_path, merged)
    write_csv(jobs_table(merged), curves_path)


def write_csv(frame: pd.DataFrame, path, sep: str = ",") -> Path:
    """Write a table as CSV (or with another separator) atomically (temporary file, then rename)."""
    return atomic_write(path, lambda tmp: frame.to_csv(tmp, index=False, sep=sep))


def _atomic_h5(path, write) -> Path:
    def write_h5(tmp):
        with h5py.File(tmp, "w", locking=False, libver=("v110", "latest")) as f:  # checksummed object headers
            write(f)

    return atomic_write(path, write_h5)


def _check_format(f, path) -> None:
    if as_text(f.attrs.get("format", "")) != FORMAT:
        raise ResultFileError(f"{path}: not an adaptcs result file")
    if int(f.attrs["format_version"]) not in READABLE_VERSIONS:
        raise ResultFileError(f"{path}: result format version {f.attrs['format_version']} is not supported "
                              f"(this adaptcs reads versions {READABLE_VERSIONS}; rerun the jobs that wrote it)")


def _write_job_group(g, job: JobResult) -> None:
    text = {"format": FORMAT, "experiment": job.experiment, "setting": json.dumps(job.setting, sort_keys=True),
            "method": job.method, "hyperparameters": job.hyperparameters, "strategy": job.strategy,
            "config": json.dumps(job.config, sort_keys=True, default=_json_default),
            "versions": json.dumps(job.versions or environment_versions(), sort_keys=True),
            "blas": json.dumps(job.blas or blas_info()),
            "created": job.created or datetime.now(UTC).isoformat(timespec="seconds")}
    for name, value in text.items():
        g.attrs[name] = fixed_text(value)  # never in the unchecksummed global heap (see fixed_text)
    g.attrs["format_version"] = FORMAT_VERSION
    g.attrs["setting_index"] = int(job.setting_index)
    stored = {}
    for name, (units, description) in _DATASETS.items():
        value = getattr(job, name)
        if value is None:
            continue
        value = np.asarray(value)
        if value.dtype.kind == "U":  # text as fixed-length UTF-8 bytes, which HDF5 filters (checksums) accept
            value = np.array([v.encode() for v in value.ravel()], dtype=bytes).reshape(value.shape) \
                if value.size else np.zeros(value.shape, dtype="S1")
        # Fletcher-32 checksums need chunked storage, which needs at least one element.
        dset = g.create_dataset(name, data=value, fletcher32=value.size > 0)
        dset.attrs["units"], dset.attrs["description"] = fixed_text(units), fixed_text(description)
        stored[name] = dset[()]  # as a reader will see it
    g.attrs["data_sha256"] = fixed_text(data_digest(stored))
    g.attrs["attrs_sha256"] = fixed_text(attrs_digest(g.attrs))


def _read_job_group(g, path) -> JobResult:
    if as_text(g.attrs.get("attrs_sha256", "")) != attrs_digest(g.attrs):
        raise ResultFileError(f"{path}: the attributes of {g.name} do not match their SHA-256 (corrupted file)")
    missing = [name for name in _DATASETS if name not in g and name not in _OPTIONAL]
    if missing:
        raise ResultFileError(f"{path}: {g.name} lacks the dataset(s) {missing}")
    arrays = {name: g[name][()] for name in _DATASETS if name in g}
    if "data_sha256" in g.attrs and as_text(g.attrs["data_sha256"]) != data_digest(arrays):
        raise ResultFileError(f"{path}: the data of {g.name} do not match their SHA-256 (the file is damaged); rerun "
                              "the job that wrote it")
    if "failure" in arrays:
        arrays["failure"] = np.array([v.decode() for v in arrays["failure"].ravel()], dtype=str)
    return JobResult(
        experiment=as_text(g.attrs["experiment"]), setting_index=int(g.attrs["setting_index"]),
        setting=json.loads(g.attrs["setting"]), method=as_text(g.attrs["method"]),
        hyperparameters=as_text(g.attrs["hyperparameters"]), strategy=as_text(g.attrs["strategy"]),
        config=json.loads(g.attrs["config"]), versions=json.loads(g.attrs["versions"]),
        blas=json.loads(g.attrs["blas"]), created=as_text(g.attrs["created"]),
        **{name: arrays.pop(name, None) for name in _OPTIONAL}, **arrays)


def jobs_table(jobs) -> pd.DataFrame:
    """Tidy table of error curves from JobResults: one row per (job, replicate, step).

    Columns: experiment, setting_index, setting (JSON), method (:attr:`JobResult.label`, e.g.
    ``gss_ep+learned``), hyperparameters ("oracle" or "learned"), strategy, replicate, step,
    n_measurements, error, fit_seconds, and what each fit reported: converged (1, 0, or -1 for a method
    without a convergence test or a step never reached), n_iter (-1 where none), residual (NaN where none),
    finite (the estimate was finite), blocks_not_converged (only for jobs that record it), failed (the
    replicate's run failed somewhere; its errors from there on are NaN).
    """
    frames = []
    for job in jobs:
        R, T = job.errors.shape
        frames.append(pd.DataFrame({
            "experiment": job.experiment, "setting_index": job.setting_index,
            "setting": json.dumps(job.setting, sort_keys=True), "method": job.label,
            "hyperparameters": job.hyperparameters, "strategy": job.strategy,
            "replicate": np.repeat(job.replicate, T), "step": np.tile(np.arange(T), R),
            "n_measurements": np.tile(job.n_measurements, R), "error": job.errors.ravel(),
            "fit_seconds": job.fit_seconds.ravel(), "converged": job.converged.ravel(),
            "n_iter": job.n_iter.ravel(),
            "residual": np.full(R * T, np.nan) if job.residual is None else job.residual.ravel(),
            "finite": job.finite.ravel(),
            "failed": np.repeat(job.failed, T)}))
        if job.blocks_not_converged is not None:
            frames[-1]["blocks_not_converged"] = job.blocks_not_converged.ravel()
        final_values = ("psnr", "ssim") + tuple(f"fitted_{n}" for n in FITTED)
        for name in final_values:  # image quality and hyper-parameters of the final estimate: on the last step
            values = getattr(job, name)
            if values is not None:
                column = np.full((R, T), np.nan)
                column[:, -1] = values
                frames[-1][name] = column.ravel()
    if not frames:
        raise ValueError("no results given")
    return pd.concat(frames, ignore_index=True)


def curves_table(paths) -> pd.DataFrame:
    """:func:`jobs_table` of the result files (job or summary files) at ``paths``."""
    return jobs_table(job for path in paths for job in read_results(path))


def final_table(paths) -> pd.DataFrame:
    """One row per (job, replicate): the error and fit time after the last step."""
    return final_rows(curves_table(paths))


def final_rows(curves: pd.DataFrame) -> pd.DataFrame:
    """One row per replicate of a tidy curves table: its last step, with its convergence counts.

    ``fits`` and ``not_converged`` count the final fit, the one a table reports (1 and 0 or 1 where it has a
    convergence test); ``refits`` and ``refits_stopped`` the earlier steps that have one and those of them that
    stopped short (in a design loop, the refits that chose the next rows; their errors are drawn in the figures).
    ``failed`` is :attr:`JobResult.failed` (the run failed somewhere, or its final error is not finite).
    """
    missing = sorted({"error", "converged", "failed"} - set(curves.columns))
    if missing:
        raise ValueError(f"the curves table has no column(s) {missing}: it was written by an older adaptcs; "
                         "aggregate the runs again")
    keys = ["experiment", "setting_index", "method", "strategy", "replicate"]
    last = curves.groupby(keys)["step"].transform("max")
    final = curves["step"] == last
    counts = (curves.assign(fits=final & (curves["converged"] >= 0), not_converged=final & (curves["converged"] == 0),
                            refits=~final & (curves["converged"] >= 0),
                            refits_stopped=~final & (curves["converged"] == 0))
              .groupby(keys)[["fits", "not_converged", "refits", "refits_stopped"]].sum().reset_index())
    finals = curves[final].drop(columns=["step", "converged", "n_iter", "residual", "finite"], errors="ignore")
    finals = finals.merge(counts, on=keys, how="left", validate="one_to_one")
    return finals.reset_index(drop=True)


def _json_default(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"cannot record {type(value).__name__} in the config attribute")
