# Shared state of the workflow: the results folder and the job grid, built by the library from the
# validated config (adaptcs.workflow), so the rules themselves hold no logic.
import adaptcs
from adaptcs import workflow as wf

RESULTS = config["results"]
EXPERIMENTS = list(config["experiments"])
JOBS = wf.run_jobs(config)  # validates the config beyond the schema first (method_params, n_steps, mnist.path)
EFFECTIVE_CONFIG = wf.effective_config(config)
CODE_VERSION = adaptcs.__version__
RUN_FILES = [f"{RESULTS}/runs/{job.name}.h5" for job in JOBS]
FIGURES_AND_TABLES = wf.figure_and_table_paths(RESULTS, EXPERIMENTS, config)


wildcard_constraints:
    experiment="[A-Za-z][A-Za-z0-9]*",  # E1-E7 or a user experiment's name (no "_": figures are {experiment}_{kind})
    setting=r"\d+",
    method="[a-z_]+",
    hyperparameters="oracle|learned",
    strategy="design|random|pool|topdown|pca",
    chunk=r"\d+",
    kind="[a-z_]+",


# A SLURM run that could not see its jobs finish (sacct without job accounting) would wait forever: stop at
# once with what to change instead (adaptcs.cluster). onstart runs in the main process of a real run only.
onstart:
    if workflow.executor_plugin is not None and workflow.executor_plugin.name == "slurm":
        from adaptcs.cluster import check_slurm_status_command

        settings = workflow.executor_settings
        check_slurm_status_command(settings.status_command, settings.init_seconds_before_status_checks)
