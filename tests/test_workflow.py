"""The Snakemake workflow: lint, dry runs, a tiny end-to-end run, incremental reruns, config validation.

Snakemake runs from the repository root, as a user runs it (so that the default config/config.yaml is there
to be wrongly merged in), with the same interpreter (``sys.executable -m snakemake``), without the working
directory lock (tests write only below their own temporary results folder).
"""

import copy
import math
import re
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import pytest
import yaml

from adaptcs import jobs as jb
from adaptcs.cli import main
from adaptcs.compare_runs import compare_files
from adaptcs.jobs import Job, resolve_jobs
from adaptcs.results import read_job, read_summary
from adaptcs.workflow import (
    RESULTS_OWNER,
    check_results_owner,
    claim_results,
    config_identity,
    prune_empty_checkpoints,
)

REPO = Path(__file__).resolve().parents[1]

TINY_CONFIG = {
    "replicates_per_job": 2,
    "experiments": {
        # g_lasso runs in-process (test_group_lasso.py): every process that fits it pays ~14 CPU s of numba compile
        "E1": {"replicates": 2, "methods": ["gss_ep", "ss_ep", "g_ard", "gss_mcmc"],
               "hyperparameters": ["oracle", "learned"]},
        "E2": {"replicates": 2, "methods": ["gss_ep", "ss_ep"], "settings": [0, 4]},
        "E3": {"replicates": 2, "methods": ["gss_ep", "ss_ep", "g_ard"], "n_steps": 3,
               "hyperparameters": ["oracle", "learned"]},
        "E5": {"replicates": 1, "digits": [3], "methods": ["gss_ep"], "n_steps": 2},
    },
    "mnist": {"source": "embedded"},
    "method_params": {"gss_mcmc": {"n_samples": 200, "burn_in": 50}},
}


def snakemake(tmp, *args, config=None, check=True):
    """Run Snakemake from the repository root with its results in ``tmp/out``.

    With ``config``, that config (results set to ``tmp/out``) is written to ``tmp/config.yaml`` and given with
    ``--configfile``; without, the results folder is set with ``--config`` (on top of the default config, or
    of a ``--configfile`` among ``args``).
    """
    cmd = [sys.executable, "-m", "snakemake", "--nolock"]
    if config is not None:
        path = Path(tmp) / "config.yaml"
        path.write_text(yaml.safe_dump({**config, "results": str(Path(tmp) / "out")}))
        cmd += ["--configfile", str(path)]
    else:
        cmd += ["--config", f"results={Path(tmp) / 'out'}"]
    proc = subprocess.run(cmd + list(args), cwd=REPO, capture_output=True, text=True, timeout=600)
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


@pytest.mark.parametrize("configfile, runs, experiments", [(None, 53, 9), ("config/config.yaml", 53, 9),
                                                           ("config/all-methods.yaml", 166, 10),
                                                           ("config/paper.yaml", 2500, 8)])
def test_dry_runs_of_shipped_configs(tmp_path, configfile, runs, experiments):
    args = () if configfile is None else ("--configfile", str(REPO / configfile))
    jobs = planned_jobs(snakemake(tmp_path, "-n", *args))
    assert jobs["run_job"] == runs
    assert jobs["aggregate"] == experiments and jobs["make_table"] == experiments
    assert jobs["plot_figure"] == 19 + 2 * (experiments - 8)  # the MRI experiment: curves and images
    assert jobs["record_config"] == 1


def test_a_given_configfile_is_the_whole_config(tmp_path):
    """Nothing of config/config.yaml is merged into a --configfile: a trimmed file plans only its own jobs."""
    trimmed = {"experiments": {"E1": {"replicates": 2, "methods": ["gss_ep"]}}}
    jobs = planned_jobs(snakemake(tmp_path, "-n", config=trimmed))
    assert jobs == {"record_config": 1, "problem_manifest": 1, "run_job": 1, "aggregate": 1, "make_table": 1,
                    "plot_figure": 4, "default": 1}


def _effective(tmp_path, *args) -> dict:
    snakemake(tmp_path, "--cores", "1", *args, "--", str(tmp_path / "out/effective_config.yaml"))
    return yaml.safe_load((tmp_path / "out/effective_config.yaml").read_text())


@pytest.mark.slow
def test_paper_config_runs_the_papers_protocol(tmp_path):
    """paper.yaml's effective values are the paper's: 160 design steps in E5/E6, samplers with 11,000 sweeps."""
    paper = _effective(tmp_path / "paper", "--configfile", str(REPO / "config/paper.yaml"))
    assert paper["experiments"]["E5"]["n_steps"] == 160 and paper["experiments"]["E6"]["n_steps"] == 160
    assert paper["experiments"]["E3"]["n_steps"] == 32
    for sampler in ("gss_mcmc", "g_hs", "bg_lasso"):
        assert paper["method_params"][sampler]["n_samples"] + paper["method_params"][sampler]["burn_in"] == 11_000
    assert paper["method_params"]["g_lasso"]["k"].startswith("8.0 where not calibrated; on E4, E5 chosen per "
                                                               "setting on its calibration problems")
    assert paper["config"] == {**yaml.safe_load((REPO / "config/paper.yaml").read_text()),
                               "results": str(tmp_path / "paper/out")}
    # The default and the all-methods configs are different (the test can tell them apart): shortened runs, as
    # they say.
    default = _effective(tmp_path / "default")
    assert default["experiments"]["E5"]["n_steps"] == 96
    every = _effective(tmp_path / "every", "--configfile", str(REPO / "config/all-methods.yaml"))
    assert every["method_params"]["gss_mcmc"]["n_samples"] + every["method_params"]["gss_mcmc"]["burn_in"] == 2500


@pytest.mark.slow
def test_cluster_jobs_see_the_given_config(tmp_path):
    """A job spawned by a cluster executor (cluster-generic, its job script run at once by the submit command)
    sees exactly the config given to the main process, and records it."""
    submit = """sh -c 'bash "$0" > "$0.out" 2>&1; echo $$'"""
    trimmed = {"replicates_per_job": 1, "experiments": {"E1": {"replicates": 1, "methods": ["gss_ep"]}}}
    target = tmp_path / "out/runs/E1/setting0/gss_ep-oracle-random-chunk0.h5"
    snakemake(tmp_path, "--executor", "cluster-generic", "--cluster-generic-submit-cmd", submit, "--jobs", "1",
              "--seconds-between-status-checks", "1", str(target), config=trimmed)  # status every 1 s, not 10
    job = read_job(tmp_path / "out/runs/E1/setting0/gss_ep-oracle-random-chunk0.h5")
    schema_defaults = {"method_params": {}, "mnist": {"source": "embedded", "groups": "similarity"}}
    assert job.config["workflow_config"] == {**trimmed, **schema_defaults, "results": str(tmp_path / "out")}


def test_dry_run_with_the_slurm_profile(tmp_path):
    proc = snakemake(tmp_path, "-n", "--workflow-profile", str(REPO / "workflow/profiles/slurm"),
                     "--configfile", str(REPO / "config/paper.yaml"))
    assert planned_jobs(proc)["run_job"] == 2500


@pytest.mark.slow
def test_tiny_end_to_end_run(tmp_path):
    snakemake(tmp_path, "--cores", "2", config=TINY_CONFIG)
    out = tmp_path / "out"
    assert not (out / "checkpoints").exists()  # every job's folder went with its file, the empty ones above at the end

    job = read_job(out / "runs/E3/setting0/gss_ep-oracle-design-chunk0.h5")
    assert job.errors.shape == (2, 4) and list(job.n_measurements) == [32, 33, 34, 35]
    assert job.coef.shape == (2, 512) and job.group_prob.shape == (2, 128)
    assert job.config["workflow_config"]["results"] == str(out)
    with h5py.File(out / "runs/E1/setting0/ss_ep-oracle-random-chunk0.h5") as f:
        assert f.attrs["method"] == b"ss_ep" and "blas" in f.attrs

    curves = pd.read_csv(out / "summary/E3_curves.csv")
    assert len(curves) == 3 * 2 * 2 * 2 * 4  # methods x hyper-parameters x strategies x replicates x steps
    e1_methods = {"gss_ep", "ss_ep", "g_ard", "gss_mcmc"}
    assert set(pd.read_csv(out / "summary/E1_curves.csv")["method"]) == e1_methods | {f"{m}+learned"
                                                                                     for m in e1_methods}
    # Learned runs store what they learned, per replicate; oracle runs what they were given.
    learned = read_job(out / "runs/E1/setting0/gss_ep-learned-random-chunk0.h5")
    oracle = read_job(out / "runs/E1/setting0/gss_ep-oracle-random-chunk0.h5")
    assert learned.hyperparameters == "learned" and learned.config["hyperparameters"] == "learned"
    assert np.all(oracle.fitted_noise_var == 1.0) and np.allclose(oracle.fitted_p0, 4 / 128)
    assert np.all(np.isfinite(learned.fitted_p0)) and not np.allclose(learned.fitted_p0, 4 / 128)
    assert np.all((learned.fitted_noise_var > 0.2) & (learned.fitted_noise_var < 5))
    assert read_job(out / "runs/E1/setting0/gss_mcmc-learned-random-chunk0.h5").fitted_v0.shape == (2,)
    table = (out / "tables/E1.md").read_text()
    assert "gss_ep+learned (random, error):" in table and "against" in table and "learned p0" in table
    gibbs = read_job(out / "runs/E1/setting0/gss_mcmc-oracle-random-chunk0.h5")
    assert gibbs.config["method_params"] == {"n_samples": 200, "burn_in": 50} and gibbs.group_prob.shape == (2, 128)
    assert set(read_summary(out / "summary/E2.h5")) == {(s, m, "random") for s in (0, 4) for m in ("gss_ep", "ss_ep")}
    for name in ["E1_errors", "E1_example", "E1_group_probs", "E1_fit_times", "E2_errors", "E3_curves"]:
        assert (out / f"figures/{name}.png").stat().st_size > 5000
        assert (out / f"figures/{name}.pdf").stat().st_size > 1000
    table = (out / "tables/E2.md").read_text()
    assert "label noise 0.1" in table and "label noise 1.0" in table and "gss_ep" in table
    assert (out / "logs/runs/E1/setting0/gss_ep-oracle-random-chunk0.log").read_text().count("replicate") == 2
    assert (out / "benchmarks/runs/E1/setting0/gss_ep-oracle-random-chunk0.tsv").exists()

    mnist = read_job(out / "runs/E5/setting3/gss_ep-oracle-design-chunk0.h5")
    assert mnist.w_true.shape == (1, 784) and mnist.psnr.shape == (1,) and 0 < mnist.ssim[0] <= 1
    # the paper's checkpoints that 2 steps reach (128) and always the last number of rows
    assert list(mnist.checkpoint_n) == [128, 130] and mnist.checkpoint_coef.shape == (1, 2, 784)
    assert (out / "figures/E5_images.png").stat().st_size > 5000

    # The job table lists every job; the command line reruns any one of them exactly as the workflow ran it.
    table = pd.read_csv(out / "jobs.tsv", sep="\t")
    assert len(table) == len(resolve_jobs({**TINY_CONFIG, "results": str(out)})) and table["runtime"].min() > 0
    name = "E3/setting0/gss_ep-learned-design-chunk0"
    assert table.set_index("name").loc[name, "path"] == str(out / "runs" / f"{name}.h5")
    assert main(["--quiet", "run", "--configfile", str(tmp_path / "config.yaml"), "--job", name, "--out",
                 str(tmp_path / "again.h5")]) == 0
    assert compare_files(out / "runs" / f"{name}.h5", tmp_path / "again.h5") == []

    # A second run has nothing to do.
    assert planned_jobs(snakemake(tmp_path, "-n", config=TINY_CONFIG)) == {}

    # Deleting one run file reruns that job and only what depends on it.
    (out / "runs/E2/setting4/ss_ep-oracle-random-chunk0.h5").unlink()
    jobs = planned_jobs(snakemake(tmp_path, "-n", config=TINY_CONFIG))
    assert jobs == {"run_job": 1, "aggregate": 1, "make_table": 1, "plot_figure": 1, "default": 1}

    # Figures and tables again from the summaries alone, no inference.
    jobs = planned_jobs(snakemake(tmp_path, "-n", "figures", "-R", "plot_figure", "make_table", config=TINY_CONFIG))
    assert "run_job" not in jobs and jobs["plot_figure"] == 10

    # The HTML report.
    snakemake(tmp_path, "--report", str(tmp_path / "report.html"), config=TINY_CONFIG)
    assert (tmp_path / "report.html").stat().st_size > 100_000
    # Its landing page carries its figures (not paths that break once report.html is moved away from results/).
    page = (tmp_path / "report.html").read_text()
    landing = page[page.index('id="workflow-desc"'):]
    landing = landing[:landing.index("</script>")]
    sources = re.findall(r'src=\\"([^\\"]{0,30})', landing)
    assert len(sources) >= 2 and all(src.startswith("data:image/png;base64,") for src in sources), sources


INVALID_CONFIGS = [
    ({"experiments": {"E1": {"replicates": 2, "methods": ["gss_ep"], "extra": 1}}},
     "config: unknown key experiments.E1.extra; known keys here: replicates, methods"),
    ({"experiments": {"E1": {"replicates": "two", "methods": ["gss_ep"]}}}, "is not of type 'integer'"),
    ({"experiments": {"E1": {"replicates": 2, "methods": ["lasso"]}}}, "experiments.E1.methods has unknown ['lasso']"),
    ({"experiments": {"E1": {"replicates": 2, "methods": ["gss-ep"]}}}, "'gss-ep' does not match"),
    ({"experiments": {"E8": {"replicates": 2, "methods": ["gss_ep"]}}}, "experiments.E8 is not one of E1, E2"),
    ({"experiments": {"E1": {"replicates": 2, "methods": ["gss_ep"], "strategies": ["pca"]}}},
     "experiments.E1.strategies: E1 cannot run ['pca']"),
    ({"experiments": {"E1": {"replicates": 2, "methods": ["gss_ep"], "basis": "db2"}}},
     "experiments.E1: E1 does not take ['basis']"),
    ({"plugins": ["no_such_module_here"]}, "config: plugins: cannot import 'no_such_module_here'"),
    ({"experiments": {"E2": {"replicates": 2, "methods": ["gss_ep"], "settings": [9]}}}, "settings has [9]"),
    ({"replicate_per_job": 3}, "config: unknown key replicate_per_job; did you mean 'replicates_per_job'?"),
    ({"experiments": {"E4": {"replicates": 2, "methods": ["gss_ep"], "digits": [10]}}}, "10 is greater than"),
    ({"experiments": {"E4": {"replicates": 2, "methods": ["gss_ep"], "settings": [0]}}},
     "experiments.E4: E4 does not take ['settings']"),
    ({"mnist": {"source": "internet"}}, "'internet' is not one of"),
    ({"method_params": {"gss_ep": {"tolerance": 1e-5}}},
     "method_params.gss_ep (used by E1, E2, E3, E5): unknown parameter(s) ['tolerance']"),
    ({"method_params": {"gss_ep": {"max_iter": -1}}}, "method_params.gss_ep (used by E1, E2, E3, E5): The "
                                                      "'max_iter' parameter of GroupSpikeSlabEP must be an int in the "
                                                      "range [1, inf). Got -1"),
    ({"method_params": {"g_ard": {"tol": "small"}}}, "method_params.g_ard (used by E1, E3): The 'tol' parameter of "
                                                     "GroupARD must be"),
    ({"method_params": {"gss_mcmc": {"burn_in": -5}}}, "method_params.gss_mcmc (used by E1): The 'burn_in' parameter "
                                                       "of GroupSpikeSlabGibbs must be"),
    ({"experiments": {"E3": {"replicates": 2, "methods": ["gss_ep"], "n_steps": 481}}},
     "experiments.E3.n_steps must be at most 480"),
    ({"experiments": {"E5": {"replicates": 1, "digits": [3], "methods": ["gss_ep"], "n_steps": 657}}},
     "experiments.E5.n_steps must be at most 656"),
    ({"mnist": {"source": "path"}}, "mnist.path (the folder with the official MNIST IDX files) is not given"),
    ({"mnist": {"source": "path", "path": "/no/such/folder"}}, "mnist.path: /no/such/folder is not a folder"),
    ({"experiments": {"mine": {"replicates": 2, "methods": ["gss_ep"]}}}, "an experiment of your own needs 'kind'"),
    ({"experiments": {"mine": {"kind": "usr", "data": {}, "replicates": 2, "methods": ["gss_ep"]}}},
     "experiments.mine.kind must be one of ['mri', 'replay', 'user']; got 'usr'"),
    ({"experiments": {"mine": {"kind": "user", "replicates": 2, "methods": ["gss_ep"]}}}, "'data' is a required"),
    ({"experiments": {"mine": {"kind": "user", "data": {"images": "/no/such/folder", "side": 8}, "replicates": 1,
                               "methods": ["gss_ep"]}}}, "experiments.mine.data: /no/such/folder: no such folder"),
    ({"experiments": {"mine": {"kind": "user", "data": {"images": "examples/shapes/images", "side": 16},
                               "replicates": 7, "methods": ["gss_ep"]}}}, "its data has 6 signals"),
    ({"experiments": {"mine": {"kind": "user", "data": {"images": "examples/shapes/images"}, "replicates": 1,
                               "methods": ["gss_ep"]}}}, "data.side (images are resized to side x side pixels) is"),
]


def _snakefile_checks(config: dict) -> None:
    """The config checks of workflow/Snakefile, in its order, in this process (ValueError: the line it prints after
    "config error: "). A subprocess per case costs ~7 s of imports; test_invalid_config_fails_in_one_line runs a
    few cases through Snakemake itself and checks that it says the same."""
    from snakemake.utils import validate

    from adaptcs.config import check_known_keys, check_schema
    from adaptcs.workflow import WorkflowPlan

    check_known_keys(config)
    check_schema(config)
    validate(config, str(REPO / "workflow" / "schemas" / "config.schema.yaml"))
    WorkflowPlan(config)


@pytest.mark.parametrize("change, message", INVALID_CONFIGS)
def test_invalid_config_fails_before_any_job(tmp_path, monkeypatch, change, message):
    monkeypatch.chdir(REPO)  # where Snakemake runs: relative data paths
    config = copy.deepcopy({**TINY_CONFIG, **change, "results": str(tmp_path / "out")})
    with pytest.raises(ValueError) as error:
        _snakefile_checks(config)
    assert message in str(error.value) and "\n" not in str(error.value).strip()
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("case", [0, 13, 24])  # an unknown key, a method parameter, a missing data folder
def test_invalid_config_fails_in_one_line(tmp_path, monkeypatch, case):
    change, message = INVALID_CONFIGS[case]
    config = {**TINY_CONFIG, **change}
    proc = snakemake(tmp_path, "--cores", "1", config=config, check=False)
    assert proc.returncode != 0
    assert message in proc.stdout + proc.stderr
    # one line, no traceback and no schema dump, and the line the in-process checks give
    printed = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert len(printed) == 1 and printed[0].startswith("config error: "), printed
    assert not (tmp_path / "out").exists()
    monkeypatch.chdir(REPO)
    with pytest.raises(ValueError) as error:
        _snakefile_checks(copy.deepcopy({**config, "results": str(tmp_path / "out")}))
    assert printed[0] == f"config error: {error.value}"


def test_shipped_configs_write_to_folders_of_their_own():
    folders = {path.name: yaml.safe_load(path.read_text())["results"] for path in (REPO / "config").glob("*.yaml")}
    assert len(set(folders.values())) == len(folders), folders


@pytest.mark.slow
def test_a_results_folder_is_refused_to_another_config(tmp_path):
    # a real run records its config in the folder; a dry run of another config into it is then refused in one line
    # (before anything is planned), the same config is not, and overwrite_results lets the other config in
    first = snakemake(tmp_path, "--cores", "1", "record_config", config=TINY_CONFIG)
    assert first.returncode == 0
    assert (tmp_path / "out" / RESULTS_OWNER).read_text() == f"{config_identity([tmp_path / 'config.yaml'])[0]}\n"
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({**TINY_CONFIG, "replicates_per_job": 1, "results": str(tmp_path / "out")}))
    refused = subprocess.run([sys.executable, "-m", "snakemake", "--nolock", "-n", "--configfile", str(other)],
                             cwd=REPO, capture_output=True, text=True, timeout=300)
    printed = [line for line in (refused.stdout + refused.stderr).splitlines() if line.strip()]
    assert refused.returncode != 0 and len(printed) == 1, printed
    assert f"holds the results of {config_identity([tmp_path / 'config.yaml'])[0]}" in printed[0]
    assert snakemake(tmp_path, "-n", config=TINY_CONFIG).returncode == 0
    allowed = subprocess.run([sys.executable, "-m", "snakemake", "--nolock", "-n", "--configfile", str(other),
                              "--config", "overwrite_results=True"], cwd=REPO, capture_output=True, text=True,
                             timeout=300)
    assert allowed.returncode == 0, allowed.stderr


def test_results_owner_checks(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    check_results_owner("out", ["a.yaml"])  # no folder yet: nothing to refuse
    claim_results("out", ["a.yaml"])
    assert (tmp_path / "out" / RESULTS_OWNER).read_text() == "a.yaml\n"
    check_results_owner("out", [str(tmp_path / "a.yaml")])  # the same file, named absolutely
    with pytest.raises(ValueError, match=r"out/ holds the results of a.yaml; this run's config is b.yaml"):
        check_results_owner("out", ["b.yaml"])
    with pytest.raises(ValueError, match="config/config.yaml"):
        check_results_owner("out", [])  # plain snakemake: the default config
    check_results_owner("out", ["b.yaml"], overwrite=True)


def test_a_key_given_twice_in_a_config_is_an_error(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({**TINY_CONFIG, "results": str(tmp_path / "out")}) + "results: elsewhere\n")
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--nolock", "-n", "--configfile", str(path)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "the key 'results' appears twice" in proc.stdout + proc.stderr
    assert main(["run", "--configfile", str(path), "--job", "E1/setting0/gss_ep-oracle-random-chunk0"]) == 2


def test_job_grid():
    jobs = resolve_jobs({**TINY_CONFIG, "replicates_per_job": 1})
    # E1: 4 methods x 2 hyper-parameter kinds x 2 chunks; E2: 2 settings x 2 methods x 2 chunks;
    # E3: 3 methods x 2 kinds x 2 strategies x 2 chunks; E5: 2 strategies x 1 chunk
    assert len(jobs) == 4 * 2 * 2 + 2 * 2 * 2 + 3 * 2 * 2 * 2 + 2
    job = jobs["E3/setting0/ss_ep-oracle-design-chunk1"]
    assert (job.experiment, job.setting, job.method, job.hyperparameters, job.strategy, job.chunk, job.replicates) \
        == ("E3", 0, "ss_ep", "oracle", "design", 1, (1,))
    assert job.n_steps == 3 and job.data_options == {} and job.path == "results/runs/" + job.name + ".h5"
    assert jobs["E5/setting3/gss_ep-oracle-design-chunk0"].data_options == {"source": "embedded"}
    assert jobs["E1/setting0/gss_mcmc-learned-random-chunk0"].method_params == {"n_samples": 200, "burn_in": 50}
    assert Job.from_record(job.as_record()) == job
    for missing in ("E3/setting0/ss_ep-oracle-design-chunk5", "E2/setting0/ss_ep-learned-random-chunk0"):
        with pytest.raises(KeyError, match="no job"):
            jobs[missing]
    table = jobs.to_frame()
    assert list(table["name"]) == list(jobs) and table.loc[0, "replicates"] == "0"
    assert set(table.columns) >= {"experiment", "setting", "method", "hyperparameters", "strategy", "chunk",
                                  "replicates", "n_steps", "data_options", "method_params", "runtime", "path"}


def test_job_grid_runs_both_hyperparameter_kinds_when_asked():
    config = {"experiments": {"E3": {"replicates": 2, "methods": ["gss_ep", "g_lasso"],
                                     "hyperparameters": ["oracle", "learned"]}}}
    names = set(resolve_jobs(config))
    # g_lasso has no posterior covariance: random rows only
    assert names == {f"E3/setting0/{m}-{h}-{s}-chunk0" for h in ("oracle", "learned")
                     for m, s in (("gss_ep", "design"), ("gss_ep", "random"), ("g_lasso", "random"))}
    for bad in ([], ["oracle", "oracle"], ["oracel"]):
        config["experiments"]["E3"]["hyperparameters"] = bad
        with pytest.raises(ValueError, match="hyperparameters"):
            resolve_jobs(config)


def test_job_logs_capture_warnings(tmp_path):
    """A ConvergenceWarning raised inside a job reaches the job's log file (every occurrence), not only the
    console. Run in a fresh interpreter: setup_logging changes process-wide logging and warning filters."""
    log = tmp_path / "job.log"
    code = f"""
import numpy as np
from adaptcs.models import GroupSpikeSlabEP
from adaptcs.workflow import setup_logging
setup_logging({str(log)!r})
rng = np.random.default_rng(0)
X, y = rng.normal(size=(8, 12)), rng.normal(size=8)
for _ in range(2):
    GroupSpikeSlabEP(np.arange(12) // 3, p0=0.3, v0=1.0, noise_var=0.5, max_iter=1).fit(X, y)
"""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    text = log.read_text()
    assert text.count("ConvergenceWarning") == 2 and "WARNING py.warnings" in text


@pytest.mark.slow
def test_user_experiment_example_end_to_end(tmp_path):
    """config/user-example.yaml, shortened: the user's images go through the same outputs as E5."""
    config = yaml.safe_load((REPO / "config/user-example.yaml").read_text())
    config["experiments"]["shapes"].update(replicates=2, methods=["gss_ep"], n_steps=4)
    snakemake(tmp_path, "--cores", "2", config=config)
    out = tmp_path / "out"
    for path in ["figures/shapes_curves.png", "figures/shapes_images.png", "tables/shapes.md",
                 "problems/shapes.csv", "summary/shapes.h5"]:
        assert (out / path).stat().st_size > 0, path
    job = read_job(out / "runs/shapes/setting0/gss_ep-learned-design-chunk0.h5")
    assert job.errors.shape == (2, 5) and job.psnr.shape == (2,) and np.all(np.isfinite(job.errors))
    np.testing.assert_array_equal(job.checkpoint_n, [32, 33, 34, 36])
    assert job.w_true.shape == (2, 256) and job.w_true.max() <= 1.0
    assert "dB" in (out / "tables/shapes.md").read_text()


def test_cluster_runtime_follows_the_measured_cost():
    job = Job("E4", 3, "gss_mcmc", "oracle", "random", 0, tuple(range(25)))
    costs = {jb.cost_key("E4", "gss_mcmc", "oracle", "random"): 300.0}  # 5 CPU minutes per image
    assert jb.job_runtime_minutes(job, costs) == 3 * 5 * 25 + 10
    assert jb.job_runtime_minutes(job, costs, attempt=2) == 2 * (3 * 5 * 25 + 10)
    assert jb.job_runtime_minutes(job, {}) == jb.DEFAULT_RUNTIME_MINUTES  # never measured: the old default


def test_e7_runtime_grows_with_the_image_side():
    costs = {jb.cost_key("E7", "gss_ep", "learned", "design"): 60.0}  # 1 CPU minute per 32 x 32 image
    small = Job("E7", 0, "gss_ep", "learned", "design", 0, tuple(range(8)))
    large = Job("E7", 2, "gss_ep", "learned", "design", 0, tuple(range(8)))  # 64 x 64
    assert jb.job_runtime_minutes(small, costs) == 3 * 1 * 8 + 10
    # measured at 32 x 32 only: the conservative size exponent
    assert jb.job_runtime_minutes(large, costs) == math.ceil(3 * 2**jb.SIZE_EXPONENT * 8 + 10)
    costs[jb.cost_key("E7", "gss_ep", "learned", "design", 64)] = 600.0  # measured at 64 x 64: 10 CPU minutes
    assert jb.job_runtime_minutes(large, costs) == 3 * 10 * 8 + 10
    assert jb.job_runtime_minutes(small, costs) == 3 * 1 * 8 + 10


@pytest.mark.parametrize("configfile", ["config/config.yaml", "config/all-methods.yaml", "config/paper.yaml"])
def test_every_shipped_job_kind_has_a_measured_cost(configfile):
    """benchmarks/bench_job_costs.py --measure covers every kind of job of the shipped configs."""
    config = yaml.safe_load((REPO / configfile).read_text())
    costs = jb.load_job_costs()
    # E7 at 64 x 64 may fall back to its 32 x 32 cost (scaled by SIZE_EXPONENT); that one must be measured
    kinds = {jb.cost_key(j.experiment, j.method, j.hyperparameters, j.strategy) for j in resolve_jobs(config).values()}
    missing = kinds - set(costs)
    assert not missing, sorted(missing)


def test_a_killed_gibbs_job_run_again_goes_on_from_its_checkpoint_to_the_same_file(tmp_path, monkeypatch):
    """A workflow job whose chain was stopped part-way (as by a cluster's time limit) resumes from the checkpoint
    in results/checkpoints/ and writes the file of a run never stopped; the checkpoints go once the file is
    written."""
    from adaptcs.models import _gibbs_kernel as kernel

    job = Job("E1", 0, "gss_mcmc", "oracle", "random", 0, (0,),
              method_params={"n_samples": 1000, "burn_in": 250, "checkpoint_seconds": 0})
    whole = job.run_to_file(tmp_path / "whole.h5", {}, progress=False)
    folder = Path(jb.job_file(str(tmp_path), "checkpoints", job.name))
    run_sweeps, calls = kernel.run_sweeps, [0]

    def killed_in_the_third_block(*args):
        calls[0] += 1
        if calls[0] == 3:
            raise KeyboardInterrupt
        end = time.process_time() + 0.5  # each block made to take 0.5 CPU s more, which the resumed job must count
        while time.process_time() < end:
            pass
        return run_sweeps(*args)

    with monkeypatch.context() as patch:
        patch.setattr(kernel, "run_sweeps", killed_in_the_third_block)
        with pytest.raises(KeyboardInterrupt):
            job.run_to_file(tmp_path / "resumed.h5", {}, folder, progress=False)
    assert not (tmp_path / "resumed.h5").exists() and len(list(folder.glob("*.npz"))) == 1
    start = time.process_time()
    job.run_to_file(tmp_path / "resumed.h5", {}, folder, progress=False)
    rerun_seconds = time.process_time() - start
    assert compare_files(whole, tmp_path / "resumed.h5") == []
    assert not folder.exists()
    # The fit's CPU time is the chain's whole cost: the two blocks before the kill (at least 1 CPU s) are in it, so it
    # is more than the whole rerun took.
    fit_seconds = read_job(tmp_path / "resumed.h5").fit_seconds[0, 0]
    assert fit_seconds >= 1.0 and fit_seconds > rerun_seconds


def test_a_job_killed_part_way_runs_only_the_replicates_it_had_not_finished(tmp_path, monkeypatch):
    """Each finished replicate is kept in the job's checkpoint folder: run again after a kill in its third
    replicate, the job runs that one only and writes the file of a run never stopped; a kept replicate that is
    damaged runs again, with a warning."""
    from adaptcs.experiments.base import Experiment

    job = Job("E1", 0, "gss_ep", "oracle", "random", 0, (0, 1, 2))
    whole = job.run_to_file(tmp_path / "whole.h5", {}, progress=False)
    folder = Path(jb.job_file(str(tmp_path), "checkpoints", job.name))
    run_case, ran = Experiment.run_case, []

    def counted(self, estimator, case, replicate, *args, **kwargs):
        ran.append(replicate)
        if replicate == 2 and stop[0]:
            raise KeyboardInterrupt
        return run_case(self, estimator, case, replicate, *args, **kwargs)

    stop = [True]
    monkeypatch.setattr(Experiment, "run_case", counted)
    with pytest.raises(KeyboardInterrupt):
        job.run_to_file(tmp_path / "resumed.h5", {}, folder, progress=False)
    assert ran == [0, 1, 2] and len(list(folder.glob("replicate*.npz"))) == 2
    stop[0] = False
    (first,) = folder.glob("replicate1-*.npz")
    first.write_bytes(first.read_bytes()[:-40])
    with pytest.warns(RuntimeWarning, match="finished replicate not usable"):
        job.run_to_file(tmp_path / "resumed.h5", {}, folder, progress=False)
    assert ran[3:] == [1, 2]  # replicate 0 was read; 1 was damaged and ran again
    assert compare_files(whole, tmp_path / "resumed.h5") == []
    assert not folder.exists()


def test_a_job_killed_inside_a_design_loop_goes_on_from_the_loop_s_last_save(tmp_path, monkeypatch):
    """The replicate under way keeps its design loop's state in the job's checkpoint folder: run again after a kill
    at its fourth designed row, the job asks only for the rows after the save and writes the file of a run never
    stopped."""
    from adaptcs.design import designer as designer_module
    from adaptcs.design import simulation
    from adaptcs.design._loop_checkpoint import LoopCheckpoint

    job = Job("E3", 0, "gss_ep", "oracle", "design", 0, (0,), n_steps=6)
    whole = job.run_to_file(tmp_path / "whole.h5", {}, progress=False)
    folder = Path(jb.job_file(str(tmp_path), "checkpoints", job.name))
    monkeypatch.setattr(simulation, "LoopCheckpoint", lambda path, every: LoopCheckpoint(path, 0.0))
    ask, asked = designer_module.SequentialDesigner.ask, []

    def counted(self, *args, **kwargs):
        asked.append(self.n_told_)
        if len(asked) == 4 and stop[0]:
            raise KeyboardInterrupt
        return ask(self, *args, **kwargs)

    stop = [True]
    monkeypatch.setattr(designer_module.SequentialDesigner, "ask", counted)
    with pytest.raises(KeyboardInterrupt):
        job.run_to_file(tmp_path / "resumed.h5", {}, folder, progress=False)
    assert len(list(folder.glob("loop-replicate0-*.npz"))) == 1
    stop[0], asked[:] = False, []
    job.run_to_file(tmp_path / "resumed.h5", {}, folder, progress=False)
    assert asked == [35, 36, 37]  # 32 random rows and 3 designed ones were told before the kill
    assert compare_files(whole, tmp_path / "resumed.h5") == []
    assert not folder.exists()


def test_only_empty_checkpoint_folders_are_pruned(tmp_path):
    kept = tmp_path / "checkpoints/runs/E1/setting0/gss_mcmc-oracle-random-chunk0"
    kept.mkdir(parents=True)
    (kept / "GroupSpikeSlabGibbs-0.npz").write_bytes(b"a chain a killed job left")
    (tmp_path / "checkpoints/runs/E1/setting1").mkdir()
    (tmp_path / "checkpoints/runs/E3/setting0").mkdir(parents=True)
    prune_empty_checkpoints(tmp_path)
    left = sorted(p.relative_to(tmp_path / "checkpoints/runs").as_posix()
                  for p in (tmp_path / "checkpoints/runs").rglob("*"))
    assert left == ["E1", "E1/setting0", "E1/setting0/gss_mcmc-oracle-random-chunk0",
                    "E1/setting0/gss_mcmc-oracle-random-chunk0/GroupSpikeSlabGibbs-0.npz"]
    (kept / "GroupSpikeSlabGibbs-0.npz").unlink()
    prune_empty_checkpoints(tmp_path)
    assert not (tmp_path / "checkpoints").exists()
    prune_empty_checkpoints(tmp_path)  # nothing there: nothing to do


def test_a_kept_replicate_is_named_by_everything_that_decides_its_numbers(tmp_path):
    from adaptcs.experiments._replicate_store import replicate_path

    job = {"experiment": "E1", "setting": 0, "method": "gss_ep", "method_params": {"tol": 1e-5}}
    data = {"w_true": np.arange(4.0), "X": np.eye(4)}
    path = replicate_path(tmp_path, job, 3, data)
    assert path.parent == tmp_path and path.name.startswith("replicate3-")
    assert replicate_path(tmp_path, dict(job), 3, {k: v.copy() for k, v in data.items()}) == path
    others = [replicate_path(tmp_path, job, 4, data),
              replicate_path(tmp_path, {**job, "method_params": {"tol": 1e-6}}, 3, data),
              replicate_path(tmp_path, job, 3, {**data, "w_true": np.arange(4.0) + 1e-15 * np.arange(4)})]
    assert len({path, *others}) == 4
