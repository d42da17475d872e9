"""A new experiment kind and a new method, defined in this module only (one class and one registry entry each),
go through everything an experiment and a method go through: the config check, the job table, the workflow's dry
run, a real workflow run (jobs, aggregation, tables, figures), the command line's ``run --job``, the tables and the
captions. Nothing outside this file knows them: the config names this module under ``plugins`` and its
``register()`` adds them (docs/architecture.md, "How to add a method / an experiment").
"""

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from numbers import Real
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from sklearn.base import BaseEstimator, RegressorMixin, _fit_context
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import validate_data

from adaptcs import config as cfg
from adaptcs import plugins as plugin_loader
from adaptcs.data.synthetic import GroupSparseProblem, problem_rng
from adaptcs.experiments import Case, Experiment, registry
from adaptcs.measurement import measure
from adaptcs.models.registry import METHODS, Method, PriorInfo, register_method

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class ToyExperiment(Experiment):
    """24 coefficients in 6 groups of 4, 2 groups active, 12 random rows; two settings of the noise level."""

    config_keys = ("kind", "data")

    name: str
    options: dict = field(default_factory=dict)
    settings = ({"noise": 0.01}, {"noise": 0.25})
    strategies = ("design", "random")
    figures = ("curves", "errors")
    n_steps = 2
    d = 24
    n_initial = 12

    @property
    def key(self) -> int:
        return 4242 + self.options.get("seed", 0)

    @classmethod
    def from_config(cls, name, entry, config):
        return cls.from_options(name, {"kind": "toy", **entry.get("data", {})})

    @classmethod
    def from_options(cls, name, options):
        unknown = set(options) - {"kind", "seed"}
        if unknown:
            raise ValueError(f"experiments.{name}.data: unknown {sorted(unknown)}")
        return cls(name, dict(options))

    def case(self, setting, replicate):
        self.check_setting(setting)
        rng = problem_rng(self.key, 0, replicate)
        groups = np.arange(self.d) // 4
        w = np.zeros(self.d)
        for g in rng.choice(6, 2, replace=False):
            w[groups == g] = rng.uniform(-1.0, 1.0, 4)
        noise = self.settings[setting]["noise"]
        X, y = measure(w, self.n_initial, noise, rng)
        prior = PriorInfo(p0_group=2 / 6, p0_coef=8 / 24, v0=1 / 3, noise_var=noise)
        problem = GroupSparseProblem(w_true=w, groups=groups, X=X, y=y, noise_var=noise)
        return Case(problem, groups, prior, (self.key, setting, replicate), (self.key, setting, replicate, 1),
                    (self.key, setting, replicate, 2))


class ToyRidge(RegressorMixin, BaseEstimator):
    """Bayesian ridge regression, w ~ N(0, v0 I), y | w ~ N(X w, noise_var I): the posterior in closed form."""

    _parameter_constraints = {"groups": [None, "array-like"], "v0": [Interval(Real, 0, None, closed="neither")],
                              "noise_var": [Interval(Real, 0, None, closed="neither")]}

    def __init__(self, groups=None, *, v0=1.0, noise_var=1.0):
        self.groups = groups
        self.v0 = v0
        self.noise_var = noise_var

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y):
        X, y = validate_data(self, X, y)
        self.cov_ = np.linalg.inv(X.T @ X / self.noise_var + np.eye(X.shape[1]) / self.v0)
        self.coef_ = self.cov_ @ X.T @ y / self.noise_var
        self.v0_, self.noise_var_ = self.v0, self.noise_var
        return self

    def predict(self, X):
        return validate_data(self, X, reset=False) @ self.coef_

    def cov_matvec(self, v):
        return self.cov_ @ v


def register():
    """What the config's ``plugins: [test_plugins]`` calls: one registry entry each."""
    registry.register_kind("toy", ToyExperiment)
    register_method("toy_ridge", Method(ToyRidge, lambda groups, prior: {"v0": prior.v0, "noise_var": prior.noise_var},
                                        color="k", designs_rows=True))


CONFIG = {
    "plugins": ["test_plugins"],
    "replicates_per_job": 2,
    "experiments": {"toy1": {"kind": "toy", "data": {"seed": 3}, "replicates": 2, "methods": ["toy_ridge", "gss_ep"],
                             "hyperparameters": ["oracle", "learned"]}},
}
JOB = "toy1/setting1/toy_ridge-oracle-design-chunk0"


@pytest.fixture
def plugins(monkeypatch):
    """The plugin registered in this process for one test, and nothing of it left after."""
    monkeypatch.setattr(registry, "KINDS", dict(registry.KINDS))
    monkeypatch.setattr(plugin_loader, "_LOADED", set())
    methods = dict(METHODS)
    yield
    METHODS.clear()
    METHODS.update(methods)


def test_the_plugin_goes_through_the_config_jobs_runner_tables_and_captions(plugins, tmp_path):
    from adaptcs.captions import figure_caption, table_caption
    from adaptcs.results import jobs_table
    from adaptcs.tables import summary_table, to_markdown
    from adaptcs.workflow import WorkflowPlan

    plan = WorkflowPlan({**CONFIG, "results": str(tmp_path)})
    run = plan.runs["toy1"]
    assert isinstance(run.experiment, ToyExperiment) and run.experiment.options == {"kind": "toy", "seed": 3}
    assert run.strategies == ("design", "random") and run.n_steps == 2
    # 2 settings x 2 methods x 2 hyper-parameters x 2 strategies, one chunk each
    assert len(plan.jobs) == 16 and JOB in plan.jobs
    assert plan.effective["experiments"]["toy1"]["data_options"] == {"kind": "toy", "seed": 3}
    assert plan.effective["method_params"]["toy_ridge"]["v0"] == "from each problem's prior knowledge"
    results = [plan.jobs[name].run(progress=False) for name in (JOB, "toy1/setting1/gss_ep-oracle-design-chunk0")]
    assert results[0].errors.shape == (2, 3) and list(results[0].n_measurements) == [12, 13, 14]
    np.testing.assert_array_equal(results[0].w_true, results[1].w_true)  # the same problems for every method
    table = summary_table(jobs_table(results).groupby(["experiment", "setting_index", "method", "strategy",
                                                         "replicate"]).tail(1).assign(fits=1, not_converged=0))
    assert set(table["method"]) == {"toy_ridge", "gss_ep"} and "| toy_ridge | design |" in to_markdown(table)
    for kind in run.experiment.figures:
        assert figure_caption(run, kind).startswith("toy1: ")
    assert "methods: toy_ridge, gss_ep" in table_caption(run) and "noise 0.25" in table_caption(run)


def test_a_plugin_kind_is_checked_like_any_experiment(plugins):
    config = {**CONFIG, "experiments": {"toy1": {**CONFIG["experiments"]["toy1"], "data": {"colour": 1}}}}
    with pytest.raises(ValueError, match=r"config: experiments.toy1.data: unknown \['colour'\]"):
        cfg.resolve(config)
    config = {**CONFIG, "experiments": {"toy1": {**CONFIG["experiments"]["toy1"], "strategies": ["topdown"]}}}
    with pytest.raises(ValueError, match=r"toy1 cannot run \['topdown'\]"):
        cfg.resolve(config)
    config = {**CONFIG, "experiments": {"toy1": {**CONFIG["experiments"]["toy1"], "n_steps": 13}}}
    with pytest.raises(ValueError, match="experiments.toy1.n_steps must be at most 12"):
        cfg.resolve(config)
    config = {**CONFIG, "method_params": {"toy_ridge": {"v0": -1.0}}}
    with pytest.raises(ValueError, match="method_params.toy_ridge .*'v0' parameter of ToyRidge"):
        cfg.resolve(config)


def _snakemake(tmp_path, *args):
    """The workflow on CONFIG with designed rows only (8 jobs, not 16: the rules are the same for both strategies)."""
    config = tmp_path / "config.yaml"
    toy = {**CONFIG["experiments"]["toy1"], "strategies": ["design"]}
    config.write_text(yaml.safe_dump({**CONFIG, "experiments": {"toy1": toy}, "results": str(tmp_path / "out")}))
    env = {**os.environ, "PYTHONPATH": str(HERE)}  # where the plugin module is found
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--nolock", "--configfile", str(config), *args],
                          cwd=REPO, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


@pytest.mark.slow
def test_the_plugin_runs_through_the_workflow_and_the_command_line(plugins, tmp_path, monkeypatch):
    from adaptcs.cli import main
    from adaptcs.compare_runs import compare_files
    from adaptcs.results import read_job

    dry = _snakemake(tmp_path, "-n")
    assert re.search(r"^run_job\s+8$", dry.stdout, re.M)
    _snakemake(tmp_path, "--cores", "2")
    out = tmp_path / "out"
    jobs = pd.read_csv(out / "jobs.tsv", sep="\t")
    assert len(jobs) == 8 and JOB in set(jobs["name"])
    assert jobs.set_index("name").loc[JOB, "path"] == str(out / "runs" / f"{JOB}.h5")
    for name in ["figures/toy1_curves.png", "figures/toy1_errors.png", "tables/toy1.md", "tables/toy1.html",
                 "problems/toy1.csv", "summary/toy1.h5"]:
        assert (out / name).stat().st_size > 0, name
    assert "toy_ridge+learned" in (out / "tables/toy1.md").read_text()
    assert "methods: toy_ridge, gss_ep" in (out / "tables/toy1.html").read_text()
    # The command line reruns exactly that job from the config: every number and attribute as the workflow's.
    monkeypatch.syspath_prepend(str(HERE))
    again = tmp_path / "again.h5"
    assert main(["--quiet", "run", "--configfile", str(tmp_path / "config.yaml"), "--job", JOB, "--out",
                 str(again)]) == 0
    assert compare_files(out / "runs" / f"{JOB}.h5", again) == []
    assert read_job(again).config["workflow_config"]["plugins"] == ["test_plugins"]
