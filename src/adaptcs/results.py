"""The HDF5 result file of one job, and tidy tables read back from many.

A job is many replicates of one (experiment, setting, method, strategy). Its file holds (format version 1):

File attributes
    ``format`` = "adaptcs.results", ``format_version`` = 1, ``experiment``, ``setting_index``,
    ``setting`` (JSON), ``method``, ``strategy``, ``config`` (JSON of everything the job was run with),
    ``versions`` (JSON: python, adaptcs, numpy, scipy, scikit-learn, h5py), ``blas`` (JSON: BLAS library,
    version and thread count from threadpoolctl), ``created`` (UTC, ISO 8601).

Datasets (R replicates, T = 1 + number of design steps, d coefficients, G groups)
    ``replicate`` (R,) int: replicate indices.
    ``n_measurements`` (T,) int: rows after the initial fit and after every step.
    ``errors`` (R, T): relative error ||w_hat - w_true|| / ||w_true|| (dimensionless).
    ``fit_seconds`` (R, T): wall time of each fit (s).
    ``select_seconds`` (R, T - 1): wall time of choosing each step's rows (s).
    ``coef`` (R, d): final estimate.
    ``w_true`` (R, d): the true signal.
    ``group_prob`` (R, G): final group activation probabilities (only for methods that have them).
    ``problem_seed`` (R, k) int: the integers the problem's SeedSequence was built from.
    ``design_seed`` (R, k) int: the same for the design loop's generator.
Every dataset carries ``units`` and ``description`` attributes.

Writes are atomic: the file is written under a temporary name in the same folder and renamed into place
only when complete, so a killed job never leaves a file that looks finished.
"""

from __future__ import annotations

import json
import os
import platform
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import h5py
import numpy as np
import pandas as pd

FORMAT = "adaptcs.results"
FORMAT_VERSION = 1

_DATASETS = {
    # name: (units, description)
    "replicate": ("1", "replicate index"),
    "n_measurements": ("rows", "number of measurement rows after the initial fit and after every step"),
    "errors": ("1", "relative error ||w_hat - w_true|| / ||w_true||, per replicate and step"),
    "fit_seconds": ("s", "wall time of each fit"),
    "select_seconds": ("s", "wall time of choosing each step's rows"),
    "coef": ("signal units", "final estimate of w"),
    "w_true": ("signal units", "true signal"),
    "group_prob": ("1", "final posterior probability that each group is active"),
    "problem_seed": ("1", "integers the problem's numpy SeedSequence was built from"),
    "design_seed": ("1", "integers the design loop's numpy SeedSequence was built from"),
}


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
    group_prob: np.ndarray | None = None
    config: dict = field(default_factory=dict)
    versions: dict = field(default_factory=dict)
    blas: list = field(default_factory=list)
    created: str = ""


def environment_versions() -> dict:
    """Versions of Python and the numerical packages, for the record."""
    import scipy
    import sklearn

    from adaptcs import __version__

    return {"python": platform.python_version(), "adaptcs": __version__, "numpy": np.__version__,
            "scipy": scipy.__version__, "scikit-learn": sklearn.__version__, "h5py": h5py.__version__}


def blas_info() -> list:
    """BLAS libraries in use with their thread counts (threadpoolctl)."""
    from threadpoolctl import threadpool_info

    return [{"library": i.get("internal_api"), "version": i.get("version"), "threads": i.get("num_threads")}
            for i in threadpool_info() if i.get("user_api") == "blas"]


def write_job(path, job: JobResult) -> Path:
    """Write ``job`` to ``path`` atomically (temporary file in the same folder, then rename).

    Returns the final path. Any failure removes the temporary file and leaves no file at ``path``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with h5py.File(tmp, "w", locking=False) as f:
            f.attrs["format"] = FORMAT
            f.attrs["format_version"] = FORMAT_VERSION
            f.attrs["experiment"] = job.experiment
            f.attrs["setting_index"] = int(job.setting_index)
            f.attrs["setting"] = json.dumps(job.setting, sort_keys=True)
            f.attrs["method"] = job.method
            f.attrs["strategy"] = job.strategy
            f.attrs["config"] = json.dumps(job.config, sort_keys=True, default=_json_default)
            f.attrs["versions"] = json.dumps(job.versions or environment_versions(), sort_keys=True)
            f.attrs["blas"] = json.dumps(job.blas or blas_info())
            f.attrs["created"] = job.created or datetime.now(UTC).isoformat(timespec="seconds")
            for name in _DATASETS:
                value = getattr(job, name)
                if value is None:
                    continue
                dset = f.create_dataset(name, data=np.asarray(value))
                dset.attrs["units"], dset.attrs["description"] = _DATASETS[name]
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def read_job(path) -> JobResult:
    """Read one job file (raises ``ValueError`` if it is not an adaptcs result of a known version)."""
    with h5py.File(path, "r", locking=False) as f:
        if f.attrs.get("format") != FORMAT:
            raise ValueError(f"{path}: not an adaptcs result file")
        if int(f.attrs["format_version"]) != FORMAT_VERSION:
            raise ValueError(f"{path}: result format version {f.attrs['format_version']} is not supported "
                             f"(this adaptcs reads version {FORMAT_VERSION})")
        arrays = {name: f[name][()] for name in _DATASETS if name in f}
        return JobResult(
            experiment=str(f.attrs["experiment"]), setting_index=int(f.attrs["setting_index"]),
            setting=json.loads(f.attrs["setting"]), method=str(f.attrs["method"]),
            strategy=str(f.attrs["strategy"]), config=json.loads(f.attrs["config"]),
            versions=json.loads(f.attrs["versions"]), blas=json.loads(f.attrs["blas"]),
            created=str(f.attrs["created"]), group_prob=arrays.pop("group_prob", None), **arrays)


def curves_table(paths) -> pd.DataFrame:
    """Tidy table of error curves: one row per (job, replicate, step).

    Columns: experiment, setting_index, setting (JSON), method, strategy, replicate, step,
    n_measurements, error, fit_seconds.
    """
    frames = []
    for path in paths:
        job = read_job(path)
        R, T = job.errors.shape
        frames.append(pd.DataFrame({
            "experiment": job.experiment, "setting_index": job.setting_index,
            "setting": json.dumps(job.setting, sort_keys=True), "method": job.method, "strategy": job.strategy,
            "replicate": np.repeat(job.replicate, T), "step": np.tile(np.arange(T), R),
            "n_measurements": np.tile(job.n_measurements, R), "error": job.errors.ravel(),
            "fit_seconds": job.fit_seconds.ravel()}))
    if not frames:
        raise ValueError("no result files given")
    return pd.concat(frames, ignore_index=True)


def final_table(paths) -> pd.DataFrame:
    """One row per (job, replicate): the error and fit time after the last step."""
    curves = curves_table(paths)
    last = curves.groupby(["experiment", "setting_index", "method", "strategy", "replicate"])["step"].transform("max")
    return curves[curves["step"] == last].drop(columns="step").reset_index(drop=True)


def _json_default(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"cannot record {type(value).__name__} in the config attribute")
