"""The Snakemake workflow: lint, dry runs, a tiny end-to-end run, incremental reruns, config validation.

Every Snakemake call runs in its own temporary working directory (Snakemake locks the directory) with the
same interpreter (``sys.executable -m snakemake``).
"""

import re
import subprocess
import sys
from pathlib import Path

import h5py
import pandas as pd
import pytest
import yaml

from adaptcs.models.registry import METHODS
from adaptcs.results import read_job, read_summary
from adaptcs.workflow import RunJob, find_job, run_jobs

REPO = Path(__file__).resolve().parents[1]

TINY_CONFIG = {
    "results": "out",
    "replicates_per_job": 2,
    "experiments": {
        "E1": {"replicates": 2, "methods": ["gss_ep", "ss_ep", "g_ard", "g_lasso", "gss_mcmc"]},
        "E2": {"replicates": 2, "methods": ["gss_ep", "ss_ep"], "settings": [0, 4]},
        "E3": {"replicates": 2, "methods": ["gss_ep", "ss_ep", "g_ard"], "n_steps": 3},
        "E5": {"replicates": 1, "digits": [3], "methods": ["gss_ep"], "n_steps": 2},
    },
    "mnist": {"source": "embedded"},
    "method_params": {"gss_mcmc": {"n_samples": 200, "burn_in": 50}},
}


def snakemake(workdir, *args, config=None, check=True):
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir)]
    if config is not None:
        path = Path(workdir) / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        cmd += ["--configfile", str(path)]
    proc = subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def planned_jobs(proc) -> dict:
    """Rule -> job count from a dry run's "Job stats" table (empty when there is nothing to do)."""
    text = proc.stdout + proc.stderr
    if "Nothing to be done" in text:
        return {}
    block = text.split("Job stats:")[1].split("total")[0]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", block, re.MULTILINE)}


def test_lint_is_clean(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--lint"], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("configfile, runs", [("config/config.yaml", 43), ("config/paper.yaml", 636)])
def test_dry_runs_of_shipped_configs(tmp_path, configfile, runs):
    proc = snakemake(tmp_path, "-n", "--configfile", str(REPO / configfile))
    jobs = planned_jobs(proc)
    assert jobs["run_job"] == runs
    assert jobs["aggregate"] == 6 and jobs["make_table"] == 6 and jobs["plot_figure"] == 15


def test_dry_run_with_the_slurm_profile(tmp_path):
    proc = snakemake(tmp_path, "-n", "--workflow-profile", str(REPO / "workflow/profiles/slurm"),
                     "--configfile", str(REPO / "config/paper.yaml"))
    assert planned_jobs(proc)["run_job"] == 636


@pytest.mark.slow
def test_tiny_end_to_end_run(tmp_path):
    snakemake(tmp_path, "--cores", "2", config=TINY_CONFIG)
    out = tmp_path / "out"

    job = read_job(out / "runs/E3/setting0/gss_ep-design-chunk0.h5")
    assert job.errors.shape == (2, 4) and list(job.n_measurements) == [32, 33, 34, 35]
    assert job.coef.shape == (2, 512) and job.group_prob.shape == (2, 128)
    assert job.config["workflow_config"]["results"] == "out"
    with h5py.File(out / "runs/E1/setting0/ss_ep-random-chunk0.h5") as f:
        assert f.attrs["method"] == "ss_ep" and "blas" in f.attrs

    curves = pd.read_csv(out / "summary/E3_curves.csv")
    assert len(curves) == 3 * 2 * 2 * 4  # methods x strategies x replicates x steps
    assert set(pd.read_csv(out / "summary/E1_curves.csv")["method"]) == {"gss_ep", "ss_ep", "g_ard", "g_lasso",
                                                                        "gss_mcmc"}
    gibbs = read_job(out / "runs/E1/setting0/gss_mcmc-random-chunk0.h5")
    assert gibbs.config["method_params"] == {"n_samples": 200, "burn_in": 50} and gibbs.group_prob.shape == (2, 128)
    assert set(read_summary(out / "summary/E2.h5")) == {(s, m, "random") for s in (0, 4) for m in ("gss_ep", "ss_ep")}
    for name in ["E1_errors", "E1_example", "E1_group_probs", "E1_fit_times", "E2_errors", "E3_curves"]:
        assert (out / f"figures/{name}.png").stat().st_size > 5000
        assert (out / f"figures/{name}.pdf").stat().st_size > 1000
    table = (out / "tables/E2.md").read_text()
    assert "label noise 0.1" in table and "label noise 1.0" in table and "gss_ep" in table
    assert (out / "logs/runs/E1/setting0/gss_ep-random-chunk0.log").read_text().count("replicate") == 2
    assert (out / "benchmarks/runs/E1/setting0/gss_ep-random-chunk0.tsv").exists()

    mnist = read_job(out / "runs/E5/setting3/gss_ep-design-chunk0.h5")
    assert mnist.w_true.shape == (1, 784) and mnist.psnr.shape == (1,) and 0 < mnist.ssim[0] <= 1
    assert list(mnist.checkpoint_n) == [128] and mnist.checkpoint_coef.shape == (1, 1, 784)
    assert (out / "figures/E5_images.png").stat().st_size > 5000

    # A second run has nothing to do.
    assert planned_jobs(snakemake(tmp_path, "-n", config=TINY_CONFIG)) == {}

    # Deleting one run file reruns that job and only what depends on it.
    (out / "runs/E2/setting4/ss_ep-random-chunk0.h5").unlink()
    jobs = planned_jobs(snakemake(tmp_path, "-n", config=TINY_CONFIG))
    assert jobs == {"run_job": 1, "aggregate": 1, "make_table": 1, "plot_figure": 1, "default": 1}

    # Figures and tables again from the summaries alone, no inference.
    jobs = planned_jobs(snakemake(tmp_path, "-n", "figures", "-R", "plot_figure", "make_table", config=TINY_CONFIG))
    assert "run_job" not in jobs and jobs["plot_figure"] == 10

    # The HTML report.
    snakemake(tmp_path, "--report", str(tmp_path / "report.html"), config=TINY_CONFIG)
    assert (tmp_path / "report.html").stat().st_size > 100_000


@pytest.mark.parametrize("change, message", [
    ({"experiments": {"E1": {"replicates": 2, "methods": ["gss_ep"], "extra": 1}}}, "Additional properties"),
    ({"experiments": {"E1": {"replicates": "two", "methods": ["gss_ep"]}}}, "is not of type 'integer'"),
    ({"experiments": {"E1": {"replicates": 2, "methods": ["lasso"]}}}, "'lasso' is not one of"),
    ({"experiments": {"E7": {"replicates": 2, "methods": ["gss_ep"]}}}, "Additional properties"),
    ({"experiments": {"E2": {"replicates": 2, "methods": ["gss_ep"], "settings": [9]}}}, "settings has [9]"),
    ({"replicate_per_job": 3}, "Additional properties"),
    ({"experiments": {"E4": {"replicates": 2, "methods": ["gss_ep"], "digits": [10]}}}, "10 is greater than"),
    ({"experiments": {"E4": {"replicates": 2, "methods": ["gss_ep"], "settings": [0]}}}, "selects settings by digits"),
    ({"mnist": {"source": "internet"}}, "'internet' is not one of"),
])
def test_invalid_config_fails_before_any_job(tmp_path, change, message):
    config = {**TINY_CONFIG, **change}
    proc = snakemake(tmp_path, "--cores", "1", config=config, check=False)
    assert proc.returncode != 0
    assert message in proc.stdout + proc.stderr
    assert not (tmp_path / "out").exists()


def test_schema_lists_exactly_the_registered_methods():
    schema = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())
    assert schema["$defs"]["method"]["enum"] == list(METHODS)
    assert set(schema["properties"]["method_params"]["properties"]) == set(METHODS)


def test_job_grid():
    jobs = run_jobs({**TINY_CONFIG, "replicates_per_job": 1})
    # E1: 5 methods x 2 chunks; E2: 2 settings x 2 methods x 2 chunks; E3: 3 methods x 2 strategies x 2 chunks;
    # E5: 2 strategies x 1 chunk
    assert len(jobs) == 5 * 2 + 2 * 2 * 2 + 3 * 2 * 2 + 2
    job = find_job(jobs, "E3", "0", "ss_ep", "design", "1")
    assert job == RunJob("E3", 0, "ss_ep", "design", 1, (1,))
    assert job.name == "E3/setting0/ss_ep-design-chunk1"
    with pytest.raises(ValueError, match="no job"):
        find_job(jobs, "E3", 0, "ss_ep", "design", 5)
