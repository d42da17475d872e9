"""Helpers for the Snakemake workflow: the job grid from a validated config, file paths, logging.

Kept in the library (not in rule files) so that they are unit-tested and ``snakemake --lint`` stays clean.
"""

from __future__ import annotations

import functools
import logging
import re
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import yaml

from adaptcs._io import atomic_write
from adaptcs.data.mnist import official_files
from adaptcs.design import has_posterior_covariance
from adaptcs.experiments import SYNTHETIC, check_n_steps, experiment_spec, synthetic_case
from adaptcs.experiments.mnist import G_LASSO_K_NOTE, MNIST
from adaptcs.models.registry import HYPERPARAMETERS, METHODS, make_estimator


@dataclass(frozen=True)
class RunJob:
    """One grid job: a chunk of replicates of one (experiment, setting, method, hyper-parameters, strategy)."""

    experiment: str
    setting: int
    method: str
    hyperparameters: str
    strategy: str
    chunk: int
    replicates: tuple[int, ...]

    @property
    def name(self) -> str:
        """Path of the job's files below a results folder, without suffix."""
        return (f"{self.experiment}/setting{self.setting}/{self.method}-{self.hyperparameters}-{self.strategy}"
                f"-chunk{self.chunk}")


@functools.cache
def supports_design(method: str) -> bool:
    """Whether ``method`` exposes a posterior covariance (and so can choose its own rows)."""
    case = synthetic_case("E1", 0, 0)
    return has_posterior_covariance(make_estimator(method, case.fit_groups, case.prior))


def user_data_options(config: dict, experiment: str) -> dict | None:
    """The data options of a ``kind: user`` experiment (None for E1-E6); ValueError for an unknown name."""
    entry = config["experiments"][experiment]
    if entry.get("kind") == "user":
        if re.fullmatch(r"E\d+", experiment):
            raise ValueError(f"config: experiments.{experiment}: names E<number> are kept for built-in experiments; "
                             "give a user experiment another name")
        return {"kind": "user", **entry["data"]}
    if experiment not in SYNTHETIC and experiment not in MNIST and experiment != "E7":
        raise ValueError(f"config: experiments.{experiment} is not one of E1-E7; a user experiment needs "
                         "'kind: user' and a 'data' block (config/README.md)")
    return None


def experiment_options(config: dict, experiment: str) -> dict:
    """The experiment's entry of the config with defaults filled in from its definition."""
    user = user_data_options(config, experiment)
    entry = config["experiments"][experiment]
    if "basis" in entry and experiment != "E7":
        raise ValueError(f"config: experiments.{experiment}.basis: only E7 has a basis")
    wavelet_options = {"basis": entry["basis"]} if "basis" in entry else {}
    try:
        spec = experiment_spec(experiment, user if user is not None else wavelet_options)
    except ValueError as exc:
        raise ValueError(f"config: experiments.{experiment}: {exc}") from None
    if user is not None:
        settings = [0]
        try:
            n_signals = spec.signals_array().shape[0]
            spec.groups_array()
        except (ValueError, OSError) as exc:
            raise ValueError(f"config: experiments.{experiment}.data: {exc}") from None
        if entry["replicates"] > n_signals:
            raise ValueError(f"config: experiments.{experiment}.replicates is {entry['replicates']}; its data has "
                             f"{n_signals} signals")
    elif experiment in MNIST:
        if "settings" in entry:
            raise ValueError(f"config: experiments.{experiment} selects settings by digits, not settings")
        settings = spec.setting_indices(entry.get("digits", range(10)))
        if entry["replicates"] > 100:
            raise ValueError(f"config: experiments.{experiment}.replicates must be at most 100 (images per digit)")
    else:
        if "digits" in entry:
            raise ValueError(f"config: experiments.{experiment} has no digits (only E4-E6 do)")
        settings = entry.get("settings", list(range(len(spec.settings))))
        if experiment == "E7":
            from adaptcs.experiments.wavelet import n_replicates

            available = min(n_replicates(spec.settings[s]) for s in settings if 0 <= s < len(spec.settings))
            if entry["replicates"] > available:
                raise ValueError(f"config: experiments.E7.replicates is {entry['replicates']}; its settings "
                                 f"{settings} have {available} images each")
    bad = [s for s in settings if not 0 <= s < len(spec.settings)]
    if bad:
        raise ValueError(f"config: experiments.{experiment}.settings has {bad}; {experiment} has settings "
                         f"0..{len(spec.settings) - 1} ({list(spec.settings)})")
    unknown = [m for m in entry["methods"] if m not in METHODS]
    if unknown:
        raise ValueError(f"config: experiments.{experiment}.methods has unknown {unknown}; known: {sorted(METHODS)}")
    if user is not None:
        data_options = user
    elif experiment in MNIST or experiment == "E7":
        data_options = dict(config.get("mnist", {})) | wavelet_options
    else:
        data_options = {}
    default_hyper = ["learned"] if experiment == "E7" else ["oracle"]
    hyperparameters = list(entry.get("hyperparameters", default_hyper))
    bad = [h for h in hyperparameters if h not in HYPERPARAMETERS] or \
        [h for h in set(hyperparameters) if hyperparameters.count(h) > 1]
    if bad or not hyperparameters:
        raise ValueError(f"config: experiments.{experiment}.hyperparameters must be a non-empty list of distinct "
                         f"values from {list(HYPERPARAMETERS)}; got {hyperparameters}")
    if experiment == "E7" and "oracle" in hyperparameters:
        raise ValueError("config: experiments.E7.hyperparameters: E7's images are not exactly sparse in the wavelet "
                         "basis, so there is no oracle; use [learned]")
    strategies = list(entry.get("strategies", spec.strategies))
    from adaptcs.experiments.wavelet import SEQUENCES

    fixed_designs = [s for s in strategies if s in SEQUENCES]
    if fixed_designs and experiment != "E7":
        raise ValueError(f"config: experiments.{experiment}.strategies: {fixed_designs} are E7's (images in a "
                         "wavelet basis)")
    return {"replicates": entry["replicates"], "methods": list(entry["methods"]), "settings": list(settings),
            "hyperparameters": hyperparameters,
            "strategies": strategies,
            "n_steps": _config_n_steps(experiment, entry.get("n_steps"), user),
            "data_options": data_options}


def _config_n_steps(experiment: str, n_steps, data_options) -> int:
    try:
        return check_n_steps(experiment, n_steps, data_options)
    except ValueError as exc:
        raise ValueError(f"config: experiments.{experiment}.{exc}") from None


def check_method_params(config: dict) -> None:
    """Refuse unknown or invalid ``method_params`` before any job runs (ValueError naming method and key)."""
    for method, params in config.get("method_params", {}).items():
        users = [e for e, entry in config["experiments"].items() if method in entry["methods"]]
        where = f"config: method_params.{method} (used by {', '.join(users) or 'no experiment'})"
        if method not in METHODS:
            raise ValueError(f"{where}: unknown method; known: {sorted(METHODS)}")
        if not isinstance(params, dict):
            raise ValueError(f"{where}: must be a mapping of parameter names to values; got {params!r}")
        try:
            METHODS[method].check_params(params)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None


def check_data_options(config: dict) -> None:
    """Refuse an MNIST source that cannot work before any job runs (a missing or incomplete ``mnist.path``)."""
    options = config.get("mnist", {})
    if not any(e in MNIST for e in config["experiments"]) or options.get("source") != "path":
        return
    if "path" not in options:
        raise ValueError("config: mnist.source is 'path' but mnist.path (the folder with the official MNIST IDX "
                         "files) is not given")
    try:
        official_files(options["path"])
    except FileNotFoundError as exc:
        raise ValueError(f"config: mnist.path: {exc}") from None


def effective_config(config: dict) -> dict:
    """What a run of ``config`` does, defaults resolved: each experiment's grid and design steps, and every
    parameter of each method used (the user's, the method's fixed choices, or the estimator's defaults)."""
    check_method_params(config)
    experiments = {e: experiment_options(config, e) for e in config["experiments"]}
    methods = sorted({m for opts in experiments.values() for m in opts["methods"]})
    overrides = config.get("method_params", {})
    params = {m: METHODS[m].effective_params(overrides.get(m, {})) for m in methods}
    if "g_lasso" in params and not {"k", "alpha"} & set(overrides.get("g_lasso", {})) and any(
            e in MNIST and "g_lasso" in opts["methods"] for e, opts in experiments.items()):
        params["g_lasso"]["k"] = f"{params['g_lasso']['k']} on E1-E3; {G_LASSO_K_NOTE}"
    return {"config": config, "experiments": experiments, "method_params": params}


def run_jobs(config: dict) -> list[RunJob]:
    """Every grid job of the config. Methods without a posterior covariance run only with random rows."""
    check_method_params(config)
    check_data_options(config)
    chunk_size = config.get("replicates_per_job", 10)
    jobs = []
    for experiment in config["experiments"]:
        opts = experiment_options(config, experiment)
        replicates = list(range(opts["replicates"]))
        chunks = [tuple(replicates[i:i + chunk_size]) for i in range(0, len(replicates), chunk_size)]
        for setting in opts["settings"]:
            for method in opts["methods"]:
                # methods without a posterior covariance cannot design rows; fixed non-adaptive designs they can use
                strategies = [s for s in opts["strategies"] if supports_design(method) or s != "design"]
                for hyper in opts["hyperparameters"]:
                    for strategy in strategies:
                        for chunk, reps in enumerate(chunks):
                            jobs.append(RunJob(experiment, setting, method, hyper, strategy, chunk, reps))
    return jobs


# CPU seconds per replicate of each kind of job, measured by benchmarks/bench_job_costs.py (one BLAS thread).
JOB_COSTS_FILE = Path(__file__).with_name("job_costs.json")
# The runtime asked of the cluster: RUNTIME_SAFETY times the measured cost (slower nodes, contention, the MNIST
# cache on a new machine) plus RUNTIME_OVERHEAD_MINUTES (start-up, imports); a job kind that was never measured
# (user experiments, new methods) asks for DEFAULT_RUNTIME_MINUTES. Each retry asks for attempt times as much.
RUNTIME_SAFETY = 3.0
# An image experiment whose settings differ in image side (E7: 32 and 64) has costs measured per side: its
# smallest side under the plain key, a larger one with the suffix "/64x64". A kind measured only at the smallest
# side asks (side / smallest)^SIZE_EXPONENT times as much. Measured at 64 x 64 in E7: GSS-EP 8-14x, G-ARD 57-143x
# (its coordinate ascent updates an n x d matrix per group: O(n d^2) per sweep, and that matrix leaves the cache),
# so the fallback takes the larger: 2^7.2 = 147.
SIZE_EXPONENT = 7.2
RUNTIME_OVERHEAD_MINUTES = 10
DEFAULT_RUNTIME_MINUTES = 120


def cost_key(experiment: str, method: str, hyperparameters: str, strategy: str, side: int | None = None) -> str:
    """The key of a kind of job in ``job_costs.json`` (at a larger image side than the smallest: ``.../64x64``)."""
    key = f"{experiment}/{method}/{hyperparameters}/{strategy}"
    return key if side is None else f"{key}/{side}x{side}"


@functools.cache
def _side_and_base(experiment: str, setting: int) -> tuple[int, int] | None:
    """(image side of the setting, smallest side among the experiment's settings) when its settings set the image
    side (E7); None otherwise (user experiments have one setting and their own costs)."""
    try:
        settings = experiment_spec(experiment).settings
    except ValueError:  # a user experiment: its spec needs its data options
        return None
    sides = [s["side"] for s in settings if "side" in s]
    if not sides or "side" not in settings[setting]:
        return None
    return settings[setting]["side"], min(sides)


def _larger_side(job: RunJob) -> tuple[int, int] | None:
    """(side, smallest side) of a job whose images are larger than its experiment's smallest; else None."""
    sides = _side_and_base(job.experiment, job.setting)
    return sides if sides is not None and sides[0] != sides[1] else None


def job_cost_key(job: RunJob) -> str:
    """The :func:`cost_key` of ``job``'s kind."""
    larger = _larger_side(job)
    return cost_key(job.experiment, job.method, job.hyperparameters, job.strategy, larger and larger[0])


@functools.lru_cache(maxsize=1)
def _stored_job_costs() -> tuple:
    import json

    try:
        data = json.loads(JOB_COSTS_FILE.read_text())
        return tuple(data["seconds_per_replicate"].items())
    except (OSError, ValueError, KeyError):
        return ()


def load_job_costs() -> dict[str, float]:
    """Measured CPU seconds per replicate, by :func:`cost_key` (empty if the file is missing or unreadable)."""
    return dict(_stored_job_costs())


def job_cpu_seconds(job: RunJob, costs: dict | None = None) -> float | None:
    """Expected CPU seconds of ``job`` from the measured costs (None for a job kind never measured)."""
    costs = load_job_costs() if costs is None else costs
    seconds = costs.get(job_cost_key(job))
    larger = _larger_side(job)
    if seconds is None and larger is not None:  # measured at the smallest side only
        seconds = costs.get(cost_key(job.experiment, job.method, job.hyperparameters, job.strategy))
        seconds = None if seconds is None else seconds * (larger[0] / larger[1]) ** SIZE_EXPONENT
    return None if seconds is None else seconds * len(job.replicates)


def job_runtime_minutes(job: RunJob, costs: dict | None = None, attempt: int = 1) -> int:
    """Runtime (minutes) to ask the cluster for ``job`` at its ``attempt``-th try, from the measured costs."""
    import math

    seconds = job_cpu_seconds(job, costs)
    if seconds is None:
        return DEFAULT_RUNTIME_MINUTES * attempt
    minutes = RUNTIME_SAFETY * seconds / 60.0 + RUNTIME_OVERHEAD_MINUTES
    return math.ceil(minutes) * attempt


def find_job(jobs: list[RunJob], wildcards) -> RunJob:
    """The job of a ``run_job`` rule's wildcards (``ValueError`` if the config has no such job)."""
    wanted = (f"{wildcards.experiment}/setting{int(wildcards.setting)}/{wildcards.method}-"
              f"{wildcards.hyperparameters}-{wildcards.strategy}-chunk{int(wildcards.chunk)}")
    for job in jobs:
        if job.name == wanted:
            return job
    raise ValueError(f"no job {wanted} in the config")


def figure_kinds(experiment: str, config: dict | None = None) -> list[str]:
    """The figures made for an experiment (a user experiment's depend on its config entry)."""
    user = user_data_options(config, experiment) if config is not None else None
    return list(experiment_spec(experiment, user).figures)


def figure_and_table_paths(results: str, experiments, config: dict | None = None) -> list[str]:
    """Every figure (PDF and PNG) and table (Markdown, CSV and HTML) of the given experiments."""
    paths = []
    for experiment in experiments:
        paths += [f"{results}/figures/{experiment}_{kind}.{ext}" for kind in figure_kinds(experiment, config)
                  for ext in ("pdf", "png")]
        paths += [f"{results}/tables/{experiment}.{ext}" for ext in ("md", "csv", "html")]
    return paths


def write_effective_config(path, effective: dict) -> None:
    """Write :func:`effective_config` as YAML (atomic), with a header saying what it is."""
    header = ("# The config this results folder was made with, as the workflow resolved it (written by the workflow;\n"
              "# editing it changes nothing). 'config' is what was given, the rest is what it means.\n")
    text = header + yaml.safe_dump(effective, sort_keys=False, default_flow_style=None, width=118)
    atomic_write(path, lambda tmp: Path(tmp).write_text(text))


def setup_logging(log_path: str) -> None:
    """Send log records, warnings (every occurrence, e.g. each ConvergenceWarning) and uncaught errors of a
    workflow script to its ``log:`` file."""
    handler = logging.FileHandler(log_path, mode="w")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    logging.captureWarnings(True)  # warnings.warn -> the "py.warnings" logger -> the log file
    warnings.simplefilter("always")  # not only the first of each kind: a job log counts them all

    def log_uncaught(kind, value, tb):
        logging.getLogger("adaptcs").error("job failed", exc_info=(kind, value, tb))
        sys.__excepthook__(kind, value, tb)

    sys.excepthook = log_uncaught
