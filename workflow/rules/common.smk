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
    experiment="[A-Za-z][A-Za-z0-9]*",  # E1-E6 or a user experiment's name (no "_": figures are {experiment}_{kind})
    setting=r"\d+",
    method="[a-z_]+",
    hyperparameters="oracle|learned",
    strategy="design|random|pool",
    chunk=r"\d+",
    kind="[a-z_]+",
