# Shared state of the workflow: the config resolved once by the library (adaptcs.workflow.WorkflowPlan: the
# experiments with their defaults, every job by name, the effective config), so the rules themselves hold no logic.
import adaptcs
from adaptcs.jobs import job_file
from adaptcs.workflow import WorkflowPlan, check_results_owner, claim_results, prune_empty_checkpoints

RESULTS = config["results"]
# a results folder belongs to the config that made it: another config would rewrite its files and tables
OVERWRITE_RESULTS = config.pop("overwrite_results", False)  # not part of what the results mean
try:
    check_results_owner(RESULTS, workflow.overwrite_configfiles, OVERWRITE_RESULTS)
    PLAN = WorkflowPlan(config)  # checks the config beyond the schema (names, keys, method_params, n_steps, ...)
except ValueError as error:
    print(f"config error: {error}", file=sys.stderr)
    sys.exit(1)
JOBS = PLAN.jobs  # name -> adaptcs.jobs.Job, as results/jobs.tsv lists them
EXPERIMENTS = list(PLAN.runs)
CODE_VERSION = adaptcs.__version__
FIGURES_AND_TABLES = PLAN.figure_and_table_paths(RESULTS)


wildcard_constraints:
    experiment="[A-Za-z][A-Za-z0-9]*",  # no "_": figures are {experiment}_{kind}
    job=r"[A-Za-z][A-Za-z0-9]*/setting\d+/[^/]+-chunk\d+",  # a name of adaptcs.jobs.Job
    kind="[a-z_]+",


# onstart runs in the main process of a real run only (never in a dry run): it records which config made the
# results folder; and a SLURM run that could not see its jobs finish (sacct without job accounting) would wait
# forever: stop at once with what to change instead (adaptcs.cluster).
onstart:
    claim_results(RESULTS, workflow.overwrite_configfiles)
    if workflow.executor_plugin is not None and workflow.executor_plugin.name == "slurm":
        from adaptcs.cluster import check_slurm_status_command

        settings = workflow.executor_settings
        check_slurm_status_command(settings.status_command, settings.init_seconds_before_status_checks)


# A job removes its own checkpoint folder when its file is written; the empty folders of experiments and settings
# above those go at the end of a run that succeeded (no job is running then).
onsuccess:
    prune_empty_checkpoints(RESULTS)
