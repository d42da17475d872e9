"""The one `script:` adapter of the workflow: read the snakemake object, call the library, write the outputs.

Dispatches on the rule name, so every rule's glue is a few lines here and all logic lives in adaptcs.
"""

import sys
from pathlib import Path

sm = snakemake  # noqa: F821 (injected by Snakemake's script directive)
try:
    import adaptcs  # noqa: F401
except ImportError:  # a conda environment with the dependencies only: use this repository's source tree
    sys.path.insert(0, str(Path(sm.scriptdir).parent / "src"))

from adaptcs.plugins import load_plugins  # noqa: E402
from adaptcs.workflow import setup_logging  # noqa: E402

setup_logging(sm.log[0])
load_plugins(sm.config)  # experiments and methods of the config's own modules, as in the main process


def run_job():
    from adaptcs.jobs import Job

    Job.from_record(dict(sm.params.job)).run_to_file(sm.output[0], dict(sm.config), sm.params.checkpoints)


def aggregate():
    from adaptcs.results import aggregate_runs

    aggregate_runs(list(sm.input), summary_path=sm.output.summary, curves_path=sm.output.curves)


def plot_figure():
    from adaptcs.plotting import FIGURES, save
    from adaptcs.results import read_summary

    figure = FIGURES[sm.wildcards.kind](read_summary(sm.input[0]), sm.wildcards.experiment)
    save(figure, [sm.output.pdf, sm.output.png])


def make_table():
    from adaptcs.tables import write_tables

    write_tables(sm.input[0], markdown_path=sm.output.markdown, csv_path=sm.output.csv, html_path=sm.output.html,
                 caption=sm.params.caption)


def record_config():
    from adaptcs.workflow import write_effective_config, write_job_table

    write_effective_config(sm.output.effective, dict(sm.params.effective))
    write_job_table(sm.output.jobs, list(sm.params.jobs))


def problem_manifest():
    from adaptcs.experiments import problem_manifest
    from adaptcs.results import write_csv

    manifest = problem_manifest(sm.wildcards.experiment, range(sm.params.replicates), sm.params.settings,
                                dict(sm.params.data_options))
    write_csv(manifest, sm.output[0])


{"run_job": run_job, "aggregate": aggregate, "plot_figure": plot_figure, "make_table": make_table,
 "problem_manifest": problem_manifest, "record_config": record_config}[sm.rule]()
