"""Synthetic experiments: problems independent of the method, E2 label noise, the job runner, the CLI."""

import numpy as np
import pytest

from adaptcs.cli import main
from adaptcs.data.synthetic import permute_group_labels
from adaptcs.experiments import run_synthetic_job, synthetic_case
from adaptcs.models.registry import PriorInfo, make_estimator
from adaptcs.results import read_job, write_job


def test_e2_shares_signals_across_settings_and_permutes_labels():
    a = synthetic_case("E2", 0, 5)
    b = synthetic_case("E2", 4, 5)
    np.testing.assert_array_equal(a.problem.X, b.problem.X)
    np.testing.assert_array_equal(a.problem.w_true, b.problem.w_true)
    changed_low = np.mean(a.fit_groups != a.problem.groups)
    changed_all = np.mean(b.fit_groups != b.problem.groups)
    assert 0 < changed_low <= 0.1 and changed_all > 0.9
    # a permutation: every group keeps its size
    np.testing.assert_array_equal(np.bincount(b.fit_groups), np.bincount(b.problem.groups))


def test_permute_fraction_zero_and_bad_fraction(rng):
    groups = np.arange(20) % 5
    np.testing.assert_array_equal(permute_group_labels(rng, groups, 0.0), groups)
    with pytest.raises(ValueError, match="fraction"):
        permute_group_labels(rng, groups, 1.5)


def test_paper_hyperparameters():
    case = synthetic_case("E1", 0, 0)
    assert case.prior == PriorInfo(p0_group=4 / 128, p0_coef=16 / 512, v0=1 / 3, noise_var=1.0)
    gss = make_estimator("gss_ep", case.fit_groups, case.prior, tol=1e-5)
    assert gss.p0 == 4 / 128 and gss.tol == 1e-5
    assert make_estimator("ss_ep", case.fit_groups, case.prior).p0 == 16 / 512
    with pytest.raises(ValueError, match="method must be one of"):
        make_estimator("lasso", case.fit_groups, case.prior)


def test_job_runner_shapes_and_pairing():
    design = run_synthetic_job("E3", 0, "gss_ep", "design", [0, 1], n_steps=2)
    random = run_synthetic_job("E3", 0, "ss_ep", "random", [0, 1], n_steps=2)
    assert design.errors.shape == (2, 3) and design.coef.shape == (2, 512)
    assert design.group_prob.shape == (2, 128) and random.group_prob.shape == (2, 512)
    np.testing.assert_array_equal(design.w_true, random.w_true)  # same signals for every method
    np.testing.assert_array_equal(design.n_measurements, [32, 33, 34])
    with pytest.raises(ValueError, match="unknown experiment parameter"):
        run_synthetic_job("E3", 0, "gss_ep", "design", [0], n_step=2)
    with pytest.raises(ValueError, match="setting_index"):
        run_synthetic_job("E1", 3, "gss_ep", "random", [0])


def test_cli_run_table_curves(tmp_path, capsys):
    out = tmp_path / "E1.h5"
    assert main(["run", "--experiment", "E1", "--method", "gss_ep", "--replicates", "0:3", "--out", str(out)]) == 0
    assert read_job(out).errors.shape == (3, 1)
    assert main(["table", str(out)]) == 0
    text = capsys.readouterr().out
    assert "## E1" in text and "| gss_ep | random | **" in text and "Failed replicates" in text
    assert main(["curves", str(out)]) == 0
    assert "n=64" in capsys.readouterr().out

    # A failed replicate is counted, never averaged in silently.
    job = read_job(out)
    job.errors[1] = np.nan
    job.failure = np.array(["", "step 0 (n=64): non-finite estimate", ""])
    write_job(tmp_path / "failed.h5", job)
    assert main(["table", str(tmp_path / "failed.h5")]) == 0
    text = capsys.readouterr().out
    assert f"**{np.mean(job.errors[[0, 2], -1]):.2f} +- " in text and "1 of 3 failed" in text
    assert main(["curves", str(tmp_path / "failed.h5")]) == 0
    assert f"| {np.mean(job.errors[[0, 2], -1]):.3f} | 1 of 3 |" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["run", "--experiment", "E1", "--method", "gss_ep", "--replicates", "a:b", "--out", str(out)])


def test_cli_curves_keep_settings_apart_and_table_matches_the_workflow(tmp_path, capsys):
    """E2 at label noise 0.1 and 1.0 are two curves tables, never one average; the CLI's table is the workflow's
    table of the same files (same mean, same sample standard deviation)."""
    from adaptcs.results import jobs_table
    from adaptcs.tables import write_tables

    files = []
    for setting in (0, 4):
        files.append(tmp_path / f"E2-{setting}.h5")
        assert main(["--quiet", "run", "--experiment", "E2", "--setting", str(setting), "--method", "gss_ep",
                     "--replicates", "0:3", "--out", str(files[-1])]) == 0
    capsys.readouterr()
    assert main(["curves", *map(str, files)]) == 0
    text = capsys.readouterr().out
    assert "## E2, label noise 0.1" in text and "## E2, label noise 1.0" in text
    finals = {s: read_job(f).errors[:, -1].mean() for s, f in zip((0, 4), files, strict=True)}
    assert f"| {finals[0]:.3f} |" in text and f"| {finals[4]:.3f} |" in text
    assert f"| {np.mean(list(finals.values())):.3f} |" not in text

    assert main(["table", *map(str, files)]) == 0
    cli_table = capsys.readouterr().out
    jobs_table(read_job(f) for f in files).to_csv(tmp_path / "curves.csv", index=False)
    workflow_table = write_tables(tmp_path / "curves.csv", markdown_path=tmp_path / "t.md", csv_path=tmp_path / "t.csv")
    assert (tmp_path / "t.md").read_text() in cli_table
    errors = read_job(files[0]).errors[:, -1]
    assert workflow_table["std"].iloc[0] == pytest.approx(np.std(errors, ddof=1))


def test_cli_runs_mnist_and_refuses_what_it_cannot_do(tmp_path, capsys):
    out = tmp_path / "E4.h5"
    assert main(["--quiet", "run", "--experiment", "E4", "--setting", "3", "--method", "gss_ep", "--replicates", "0",
                 "--out", str(out)]) == 0
    job = read_job(out)
    assert job.experiment == "E4" and job.setting == {"digit": 3} and job.psnr is not None
    assert main(["settings", "E6"]) == 0
    assert '--setting 2: {"digit": 0, "prior_knowledge": "prior_random"}' in capsys.readouterr().out
    with pytest.raises(SystemExit):  # no candidate pool can be given here, so pool is not offered
        main(["run", "--experiment", "E3", "--method", "gss_ep", "--strategy", "pool", "--out", str(out)])
    assert main(["run", "--experiment", "E3", "--method", "gss_ep", "--strategy", "topdown", "--out", str(out)]) == 2
    assert "E3 takes the strategies ['design', 'random']; got 'topdown'" in capsys.readouterr().err
    # the experiment's defaults, never the command line's own: E3 has two strategies, so one must be chosen
    assert main(["run", "--experiment", "E3", "--method", "gss_ep", "--out", str(out)]) == 2
    assert "E3 runs the strategies ['design', 'random']: choose one with --strategy" in capsys.readouterr().err
    assert main(["table", str(tmp_path / "missing.h5")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "missing.h5" in err and "Traceback" not in err


def test_progress_reaches_the_log(caplog, monkeypatch):
    """A job with progress logs a line per replicate and, during long design loops, where the loop is."""
    import logging

    from adaptcs.experiments import runner

    monkeypatch.setattr(runner, "PROGRESS_SECONDS", 0.0)
    with caplog.at_level(logging.INFO, logger="adaptcs"):
        runner.run_job("E3", 0, "gss_ep", "design", [0], n_steps=3, progress=True)
    messages = [r.getMessage() for r in caplog.records]
    assert any("replicate 0: step 3 of 3, 35 rows, error" in m for m in messages)
    assert any("replicate 0 (1/1): error" in m for m in messages)


def test_cli_runs_one_job_of_a_config_and_refuses_what_does_not_fit(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(f"results: {tmp_path / 'out'}\nexperiments:\n  E1: {{replicates: 2, methods: [gss_ep]}}\n")
    name = "E1/setting0/gss_ep-oracle-random-chunk0"
    assert main(["--quiet", "run", "--configfile", str(config), "--job", name]) == 0
    job = read_job(tmp_path / "out/runs/E1/setting0/gss_ep-oracle-random-chunk0.h5")  # its place in the results
    assert job.errors.shape == (2, 1) and job.config["workflow_config"]["mnist"]["source"] == "embedded"  # defaults
    for args, message in [(["--job", "E1/setting0/gss_ep-oracle-random-chunk1"], "has no job"),
                          (["--job", "E1/setting0/gss_ep-oracle-random-chunk0", "--method", "ss_ep"],
                           "--method cannot be given with it"),
                          ([], "run needs --experiment, --method and --out")]:
        assert main(["run", "--configfile", str(config), *args]) == 2
        assert message in capsys.readouterr().err
    assert main(["run", "--job", "E1/setting0/gss_ep-oracle-random-chunk0"]) == 2
    assert "--job needs --configfile" in capsys.readouterr().err


def test_every_public_name_of_experiments_resolves_to_its_submodules_object():
    """``adaptcs.experiments`` imports its submodules on first use (PEP 562): each name in ``__all__`` is the object
    its submodule defines, and a name it does not have is an AttributeError, not an import of something else."""
    import importlib

    import adaptcs.experiments as experiments

    for name in experiments.__all__:
        where = importlib.import_module(f"adaptcs.experiments.{experiments._WHERE[name]}")
        assert getattr(experiments, name) is getattr(where, name), name
    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        experiments.not_a_name  # noqa: B018
