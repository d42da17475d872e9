"""What the Snakemake rules call: the resolved config and jobs, the figure and table paths, the files written
for the record, and the logging of a job.

Kept in the library (not in rule files) so that it is unit-tested and ``snakemake --lint`` stays clean. The
config's meaning is :mod:`adaptcs.config`'s, the jobs are :mod:`adaptcs.jobs`'s.
"""

from __future__ import annotations

import logging
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from adaptcs._io import atomic_write

if TYPE_CHECKING:
    from adaptcs.config import ExperimentRun
    from adaptcs.jobs import JobTable

RESULTS_OWNER = ".adaptcs-config"  # in a results folder: the config file(s) that made it, one per line
DEFAULT_CONFIG = "config/config.yaml"


def config_identity(config_files) -> list[str]:
    """The config files of a run as it names them: paths relative to the working directory where they are below
    it (absolute otherwise); plain ``snakemake`` is ``config/config.yaml``."""
    cwd = Path.cwd().resolve()
    names = []
    for path in config_files or [DEFAULT_CONFIG]:
        resolved = Path(path).resolve()
        names.append(resolved.relative_to(cwd).as_posix() if resolved.is_relative_to(cwd) else resolved.as_posix())
    return names


def check_results_owner(results, config_files, overwrite: bool = False) -> None:
    """ValueError if the folder ``results`` was made by a run of other config files (:data:`RESULTS_OWNER`),
    unless ``overwrite``: a second config would rewrite the first one's files and tables."""
    owner_file = Path(results) / RESULTS_OWNER
    if overwrite or not owner_file.is_file():
        return
    owner = [line for line in owner_file.read_text().splitlines() if line.strip()]
    ours = config_identity(config_files)
    if owner and owner != ours:
        raise ValueError(f"{results}/ holds the results of {', '.join(owner)}; this run's config is "
                         f"{', '.join(ours)}: give it its own `results:` folder, or add --config "
                         "overwrite_results=True to write into that one anyway")


def claim_results(results, config_files) -> None:
    """Record in ``results`` which config files write to it (:func:`check_results_owner` reads it)."""
    Path(results).mkdir(parents=True, exist_ok=True)
    text = "".join(f"{name}\n" for name in config_identity(config_files))
    atomic_write(Path(results) / RESULTS_OWNER, lambda tmp: Path(tmp).write_text(text))


def prune_empty_checkpoints(results) -> None:
    """Remove the empty folders under ``results/checkpoints`` (each job removes its own folder when its file is
    written; the folders of experiments and settings above it stay, since other jobs may be using them). A folder
    that still holds a file (a job killed and not run again) is kept. For the end of a successful run, when no job
    is running."""
    root = Path(results) / "checkpoints"
    if not root.is_dir():
        return
    for folder in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True) \
            + [root]:
        try:
            folder.rmdir()
        except OSError:  # not empty
            pass


class WorkflowPlan:
    """A config resolved once for the Snakefile: its experiments, jobs and effective config.

    Attributes
    ----------
    runs : dict of str to ExperimentRun
    jobs : JobTable
    effective : dict
        :func:`adaptcs.config.effective_config`.
    """

    def __init__(self, config: dict):
        from adaptcs.config import effective_config, resolve
        from adaptcs.jobs import resolve_jobs

        self.config = config
        self.runs: dict[str, ExperimentRun] = resolve(config)
        self.jobs: JobTable = resolve_jobs(config, self.runs)
        self.effective = effective_config(config, self.runs)

    def job_records(self) -> list[dict]:
        """Every job as plain data, for ``jobs.tsv``."""
        return [job.as_record() for job in self.jobs.values()]

    def figure_and_table_paths(self, results: str) -> list[str]:
        """Every figure (PDF and PNG) and table (Markdown, CSV and HTML) of the config's experiments."""
        paths = []
        for name, run in self.runs.items():
            paths += [f"{results}/figures/{name}_{kind}.{ext}" for kind in run.experiment.figures
                      for ext in ("pdf", "png")]
            paths += [f"{results}/tables/{name}.{ext}" for ext in ("md", "csv", "html")]
        return paths


def write_effective_config(path, effective: dict) -> None:
    """Write :func:`adaptcs.config.effective_config` as YAML (atomic), with a header saying what it is."""
    header = ("# The config this results folder was made with, as the workflow resolved it (written by the workflow;\n"
              "# editing it changes nothing). 'config' is what was given, the rest is what it means.\n")
    text = header + yaml.safe_dump(effective, sort_keys=False, default_flow_style=None, width=118)
    atomic_write(path, lambda tmp: Path(tmp).write_text(text))


def write_job_table(path, records: list[dict]) -> None:
    """Write the jobs (:meth:`WorkflowPlan.job_records`) as a tab-separated table, one row per job (atomic)."""
    from adaptcs.jobs import Job, JobTable
    from adaptcs.results import write_csv

    frame = JobTable(Job.from_record(r) for r in records).to_frame()
    write_csv(frame, path, sep="\t")


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
