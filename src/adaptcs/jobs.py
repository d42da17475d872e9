"""The jobs of a workflow config: one typed :class:`Job` per (experiment, setting, method, hyper-parameters,
strategy, chunk of replicates), their files, and the runtime each asks of a cluster.

The config is resolved once (:func:`resolve_jobs`) into a :class:`JobTable` that the Snakemake rules look jobs up
in by name, that ``results/jobs.tsv`` lists, and that ``python -m adaptcs run --configfile C --job NAME`` runs
one job of. :func:`job_file` is the one place a job's file names are spelled.
"""

from __future__ import annotations

import functools
import json
import math
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import pandas as pd

from adaptcs.config import ExperimentRun, resolve

# The files of a job below a results folder, by kind: its result, its log, its Snakemake benchmark.
# "checkpoints" is a folder, not a file: the job's finished replicates and its Gibbs chains' saved state while it
# runs (never a declared output, so that Snakemake keeps it when the job is killed; removed once the result is
# written).
JOB_FILES = {"runs": ("runs", ".h5"), "logs": ("logs/runs", ".log"), "benchmarks": ("benchmarks/runs", ".tsv"),
             "checkpoints": ("checkpoints/runs", "")}


def job_file(results: str, kind: str, name: str) -> str:
    """The path of a job's file of ``kind`` ("runs", "logs", "benchmarks" or "checkpoints", a folder); ``name``
    may be a wildcard."""
    folder, suffix = JOB_FILES[kind]
    return f"{results}/{folder}/{name}{suffix}"


@dataclass(frozen=True)
class Job:
    """One job of the grid: a chunk of replicates of one (experiment, setting, method, hyper-parameters,
    strategy), with everything needed to run it.

    Attributes
    ----------
    experiment : str
    setting : int
        Index into the experiment's settings.
    method, hyperparameters, strategy : str
    chunk : int
        Which chunk of the replicates (``replicates_per_job`` each).
    replicates : tuple of int
    n_steps : int
        Design steps.
    data_options : dict
        The experiment's data options (:attr:`adaptcs.experiments.base.Experiment.options`).
    method_params : dict
        The config's ``method_params`` of the method.
    runtime : int
        Minutes asked of a cluster at the first attempt (:func:`job_runtime_minutes`).
    path : str
        The result file (:func:`job_file`).
    """

    experiment: str
    setting: int
    method: str
    hyperparameters: str
    strategy: str
    chunk: int
    replicates: tuple[int, ...]
    n_steps: int = 0
    data_options: dict = field(default_factory=dict)
    method_params: dict = field(default_factory=dict)
    runtime: int = 0
    path: str = ""

    @property
    def name(self) -> str:
        """The job's name: its files' path below a results folder, without suffix."""
        return (f"{self.experiment}/setting{self.setting}/{self.method}-{self.hyperparameters}-{self.strategy}"
                f"-chunk{self.chunk}")

    def as_record(self) -> dict:
        """The job as plain data (for a Snakemake rule's params and the job table)."""
        return {**asdict(self), "replicates": list(self.replicates)}

    @classmethod
    def from_record(cls, record: dict) -> Job:
        """The job of :meth:`as_record`."""
        return cls(**{**record, "replicates": tuple(record["replicates"])})

    def run(self, progress: bool = True, checkpoint_dir=None):
        """Run the job (:func:`adaptcs.experiments.run_job`); returns its :class:`adaptcs.results.JobResult`."""
        from adaptcs.experiments import run_job

        return run_job(self.experiment, self.setting, self.method, self.strategy, self.replicates,
                       method_params=dict(self.method_params), progress=progress, n_steps=self.n_steps,
                       data_options=dict(self.data_options), hyperparameters=self.hyperparameters,
                       checkpoint_dir=checkpoint_dir)

    def run_to_file(self, out, workflow_config: dict, checkpoint_dir=None, progress: bool = True) -> Path:
        """Run the job as the workflow does and write its result file ``out``.

        Parameters
        ----------
        out : str or path
        workflow_config : dict
            The config the job came from (recorded in the file).
        checkpoint_dir : str or path, optional
            Where the job keeps its finished replicates and its Gibbs chains' state while it runs
            (``job_file(results, "checkpoints", name)`` in the workflow): run again after a kill, the job goes on
            from there. Removed once the file is written.
        """
        from adaptcs.results import write_job

        result = self.run(progress=progress, checkpoint_dir=checkpoint_dir)
        result.config["workflow_config"] = workflow_config
        path = write_job(out, result)
        if checkpoint_dir is not None:
            shutil.rmtree(checkpoint_dir, ignore_errors=True)
        return path


class JobTable(Mapping):
    """The jobs of a config by name, in the order the config lists them."""

    def __init__(self, jobs, runs: dict[str, ExperimentRun] | None = None):
        self._jobs = {job.name: job for job in jobs}
        self.runs = runs or {}

    def __getitem__(self, name: str) -> Job:
        if name not in self._jobs:
            raise KeyError(f"no job {name} in the config")
        return self._jobs[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._jobs)

    def __len__(self) -> int:
        return len(self._jobs)

    def of_experiment(self, experiment: str) -> list[Job]:
        """The jobs of one experiment."""
        return [job for job in self._jobs.values() if job.experiment == experiment]

    def paths(self, experiment: str | None = None) -> list[str]:
        """The result files of every job (of one experiment)."""
        return [job.path for job in self._jobs.values() if experiment in (None, job.experiment)]

    def to_frame(self) -> pd.DataFrame:
        """One row per job: ``results/jobs.tsv`` (replicates space-separated, options and parameters as JSON)."""
        rows = []
        for name, job in self._jobs.items():
            record = job.as_record()
            rows.append({"name": name, **record, "replicates": " ".join(map(str, job.replicates)),
                         "data_options": json.dumps(job.data_options, sort_keys=True),
                         "method_params": json.dumps(job.method_params, sort_keys=True)})
        return pd.DataFrame(rows)


def resolve_jobs(config: dict, runs: dict[str, ExperimentRun] | None = None) -> JobTable:
    """Every job of the (schema-validated) config; methods without a posterior covariance run no strategy that
    needs one. ValueError naming the config key for anything wrong."""
    runs = resolve(config) if runs is None else runs
    results = config.get("results", "results")
    chunk_size = config.get("replicates_per_job", 10)
    overrides = config.get("method_params", {})
    jobs = []
    for name, run in runs.items():
        replicates = list(range(run.replicates))
        chunks = [tuple(replicates[i:i + chunk_size]) for i in range(0, len(replicates), chunk_size)]
        for setting in run.settings:
            for method in run.methods:
                for hyper in run.hyperparameters:
                    for strategy in run.strategies_of(method):
                        for chunk, reps in enumerate(chunks):
                            job = Job(name, setting, method, hyper, strategy, chunk, reps, n_steps=run.n_steps,
                                      data_options=dict(run.experiment.options),
                                      method_params=dict(overrides.get(method, {})))
                            jobs.append(replace(job, runtime=job_runtime_minutes(job),
                                                path=job_file(results, "runs", job.name)))
    return JobTable(jobs, runs)


# --- the runtime asked of a cluster ------------------------------------------------------------------------------

# CPU seconds per replicate of each kind of job, measured by benchmarks/bench_job_costs.py (one BLAS thread).
JOB_COSTS_FILE = Path(__file__).with_name("job_costs.json")
# The runtime asked of the cluster: RUNTIME_SAFETY times the measured cost (slower nodes, contention, the MNIST
# cache on a new machine) plus RUNTIME_OVERHEAD_MINUTES (start-up, imports); a job kind that was never measured
# (user experiments, new methods) asks for DEFAULT_RUNTIME_MINUTES. Each retry asks for attempt times as much.
RUNTIME_SAFETY = 3.0
# An experiment whose settings differ in image side has costs measured per side: its smallest side under the plain
# key, a larger one with the suffix "/64x64". A kind measured only at the smallest side asks
# (side / smallest)^SIZE_EXPONENT times as much: the largest growth measured (README, "Speed").
SIZE_EXPONENT = 7.2
RUNTIME_OVERHEAD_MINUTES = 10
DEFAULT_RUNTIME_MINUTES = 120


def cost_key(experiment: str, method: str, hyperparameters: str, strategy: str, side: int | None = None) -> str:
    """The key of a kind of job in ``job_costs.json`` (at a larger image side than the smallest: ``.../64x64``)."""
    key = f"{experiment}/{method}/{hyperparameters}/{strategy}"
    return key if side is None else f"{key}/{side}x{side}"


@functools.cache
def _sides(experiment: str, options: str, setting: int) -> tuple[int, int] | None:
    """(image side of the setting, smallest side among the experiment's settings) when its settings differ in
    image side; None otherwise."""
    from adaptcs.experiments import get_experiment

    definition = get_experiment(experiment, json.loads(options))
    sides = [definition.image_side(s) for s in range(len(definition.settings))]
    if len(set(sides)) < 2 or None in sides:
        return None
    return sides[setting], min(sides)


def _larger_side(job: Job) -> tuple[int, int] | None:
    """(side, smallest side) of a job whose images are larger than its experiment's smallest; else None."""
    sides = _sides(job.experiment, json.dumps(job.data_options, sort_keys=True), job.setting)
    return sides if sides is not None and sides[0] != sides[1] else None


def job_cost_key(job: Job) -> str:
    """The :func:`cost_key` of ``job``'s kind."""
    larger = _larger_side(job)
    return cost_key(job.experiment, job.method, job.hyperparameters, job.strategy, larger and larger[0])


@functools.lru_cache(maxsize=1)
def _stored_job_costs() -> tuple:
    try:
        data = json.loads(JOB_COSTS_FILE.read_text())
        return tuple(data["seconds_per_replicate"].items())
    except (OSError, ValueError, KeyError):
        return ()


def load_job_costs() -> dict[str, float]:
    """Measured CPU seconds per replicate, by :func:`cost_key` (empty if the file is missing or unreadable)."""
    return dict(_stored_job_costs())


def job_cpu_seconds(job: Job, costs: dict | None = None) -> float | None:
    """Expected CPU seconds of ``job`` from the measured costs (None for a job kind never measured)."""
    costs = load_job_costs() if costs is None else costs
    seconds = costs.get(job_cost_key(job))
    larger = _larger_side(job)
    if seconds is None and larger is not None:  # measured at the smallest side only
        seconds = costs.get(cost_key(job.experiment, job.method, job.hyperparameters, job.strategy))
        seconds = None if seconds is None else seconds * (larger[0] / larger[1]) ** SIZE_EXPONENT
    return None if seconds is None else seconds * len(job.replicates)


def job_runtime_minutes(job: Job, costs: dict | None = None, attempt: int = 1) -> int:
    """Runtime (minutes) to ask the cluster for ``job`` at its ``attempt``-th try, from the measured costs."""
    seconds = job_cpu_seconds(job, costs)
    if seconds is None:
        return DEFAULT_RUNTIME_MINUTES * attempt
    minutes = RUNTIME_SAFETY * seconds / 60.0 + RUNTIME_OVERHEAD_MINUTES
    return math.ceil(minutes) * attempt
