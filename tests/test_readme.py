"""The README's quick starts and the guide's walk-throughs run as written (the Python loops and the command line)."""

import re
import shlex
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PYTHON_GUIDE = ROOT / "docs" / "guide" / "python.md"
LAB_GUIDE = ROOT / "docs" / "guide" / "lab.md"


def section_blocks(title: str, language: str, page: Path = LAB_GUIDE) -> list[str]:
    text = page.read_text()
    section = text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", section, flags=re.S)


def test_the_python_lab_loop_runs_and_recovers_the_hidden_signal():
    (code,) = section_blocks("Use it on your instrument", "python")
    namespace = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # early refits on 4-8 rows may stop before converging; they say so
        exec(compile(code, "README.md", "exec"), namespace)
    est, hidden, designer = namespace["est"], namespace["hidden"], namespace["designer"]
    assert designer.X_.shape == (24, 64)
    assert np.linalg.norm(est.coef_ - hidden) / np.linalg.norm(hidden) < 0.1
    assert est.converged_


@pytest.mark.slow
@pytest.mark.parametrize("page, title", [(README, "Quick start: at an instrument"),
                                         (LAB_GUIDE, "Use it on your instrument")], ids=["README", "guide"])
def test_the_command_line_lab_loop_runs_as_written(tmp_path, page, title):
    (script,) = section_blocks(title, "bash", page)
    hidden = np.where(np.repeat(np.arange(16), 4) < 2, np.random.default_rng(0).normal(size=64), 0.0)
    ran = 0
    for line in script.splitlines():
        if line.startswith("# measure"):  # the instrument: values of the rows asked for
            rows = np.loadtxt(tmp_path / "rows.csv", delimiter=",", ndmin=2)
            np.savetxt(tmp_path / "values.csv", rows @ hidden + np.random.default_rng(ran).normal(0, 0.1, len(rows)))
            continue
        command = shlex.split(line.split("  #")[0])
        assert command[0] == "python", line
        proc = subprocess.run([sys.executable, *command[1:]], cwd=tmp_path, capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, f"{line}\n{proc.stdout}\n{proc.stderr}"
        ran += 1
    assert ran == 6
    estimate = pd.read_csv(tmp_path / "estimate.csv")
    assert estimate.shape == (64, 5) and np.all(np.isfinite(estimate[["mean", "std", "group_prob"]]))



def test_the_python_snippets_print_only_the_warnings_the_readme_announces():
    """Quick start prints nothing; the instrument loop one convergence warning (its first refits learn three
    values from 4-8 rows), the design loop nothing (every refit converges, its first through the variance-decoupled
    fallback), as the README's "What to expect" says; each warning at most a few lines."""
    from sklearn.exceptions import ConvergenceWarning

    namespace = {}
    caught = {}
    pages = {"Quick start": PYTHON_GUIDE, "Use it on your instrument": LAB_GUIDE,
             "Sequential design in Python": PYTHON_GUIDE}
    for title, page in pages.items():
        (code,) = section_blocks(title, "python", page)
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            exec(compile(code, "README.md", "exec"), namespace)
        caught[title] = [w for w in record]
    assert caught["Quick start"] == [] and caught["Sequential design in Python"] == []
    title = "Use it on your instrument"
    assert len(caught[title]) == 1 and issubclass(caught[title][0].category, ConvergenceWarning), caught[title]
    assert len(str(caught[title][0].message)) < 500
    for title in ("Use it on your instrument", "Sequential design in Python"):
        assert "What to expect" in pages[title].read_text().split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    result = namespace["res"]
    assert result.converged.all()
    assert round(result.errors[0], 2) == 0.82 and round(result.errors[-1], 2) == 0.28  # as the README says
