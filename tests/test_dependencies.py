"""One dependency list: environment.yml and the workflow's conda environment follow pyproject.toml."""

import re
import tomllib
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
# What only the main Snakemake process needs (the workflow's conda environment serves the rule scripts).
MAIN_PROCESS_ONLY = {"snakemake", "pygments", "docutils"}  # docutils: the report's landing page


def _requirements(specs) -> dict[str, str]:
    """``{name (lower case): lower bound}`` of requirement strings like ``numpy>=1.26``."""
    out = {}
    for spec in specs:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*>=\s*([0-9][0-9.]*)", spec.strip())
        assert match, f"not a name>=bound requirement: {spec!r}"
        out[match.group(1).lower()] = match.group(2)
    return out


def _pyproject() -> tuple[dict, dict]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    return _requirements(project["dependencies"]), _requirements(extras["slurm"] + extras["test"] + extras["bench"])


def _conda(path) -> dict:
    deps = yaml.safe_load((REPO / path).read_text())["dependencies"]
    specs = [d for d in deps if isinstance(d, str) and d not in ("pip",) and not d.startswith("python")]
    specs += [d for block in deps if isinstance(block, dict) for d in block.get("pip", []) if not d.startswith("-e")]
    return _requirements(specs)


def test_environment_yml_is_pyproject():
    runtime, extras = _pyproject()
    assert _conda("environment.yml") == runtime | extras


def test_the_workflow_environment_is_the_runtime_dependencies():
    runtime, _extras = _pyproject()
    expected = {name: bound for name, bound in runtime.items() if name not in MAIN_PROCESS_ONLY}
    assert _conda("workflow/envs/adaptcs.yaml") == expected
