"""Module boundaries: no import circle inside the package, and light modules stay light."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import adaptcs

PACKAGE = Path(adaptcs.__file__).parent


def _imports() -> dict[str, set[str]]:
    """Every adaptcs module and the adaptcs modules it imports (at any depth of its code)."""
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in modules.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("adaptcs"):
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    deps.add(full if full in modules else node.module)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name.startswith("adaptcs"))
        graph[name] = {d for d in deps if d in modules and d != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circle():
    graph = _imports()
    assert "adaptcs.experiments.runner" in graph and graph["adaptcs.experiments.runner"]
    assert _cycles(graph) == []


#: The layers, lowest first (docs/architecture.md): a module may import its own layer and those below it only.
#: A module belongs to the longest prefix listed (``adaptcs`` itself is the package's version).
LAYERS = (
    ("adaptcs", "adaptcs._validation", "adaptcs._io", "adaptcs.readers", "adaptcs._names", "adaptcs._styles",
     "adaptcs._termination", "adaptcs.measurement", "adaptcs.metrics", "adaptcs.results"),  # checks, files, names
    ("adaptcs.bases",),  # image wavelets, the separable wavelet and k-space's FFT conventions
    ("adaptcs.models", "adaptcs.data"),
    ("adaptcs.operators",),  # what can be measured; asks the models for gains
    ("adaptcs.design",),  # the loops
    ("adaptcs.mri", "adaptcs.replay", "adaptcs.lab"),  # the instruments: replays, labs, their command lines
    ("adaptcs.experiments",),
    ("adaptcs.config", "adaptcs.plugins"),
    ("adaptcs.jobs", "adaptcs.tables", "adaptcs.plotting", "adaptcs.captions", "adaptcs.headline"),
    ("adaptcs.workflow", "adaptcs.cli", "adaptcs.instruments", "adaptcs.cluster", "adaptcs.compare_runs",
     "adaptcs.report_rst", "adaptcs.__main__"),
)


def _layer(module: str) -> int:
    matches = [(len(prefix), i) for i, names in enumerate(LAYERS) for prefix in names
               if module == prefix or module.startswith(prefix + ".")]
    assert matches, f"{module} is in no layer of LAYERS: add it"
    return max(matches)[1]


def test_no_module_imports_a_higher_layer():
    graph = _imports()
    upward = sorted(f"{module} -> {dep}" for module, deps in graph.items() for dep in deps
                    if _layer(dep) > _layer(module))
    assert upward == []


def test_the_layer_check_sees_an_upward_import():
    assert _layer("adaptcs.models.line_phase") < _layer("adaptcs.mri.design") < _layer("adaptcs.experiments.mri")
    assert _layer("adaptcs.bases.separable") < _layer("adaptcs.operators.kspace") < _layer("adaptcs.design.designer")
    with pytest.raises(AssertionError, match="in no layer"):
        _layer("adaptcs_other.module")


def test_the_core_does_not_depend_on_the_experiments():
    graph = _imports()
    for layer in ("adaptcs.models", "adaptcs.operators", "adaptcs.design", "adaptcs.data", "adaptcs.measurement",
                  "adaptcs._validation"):
        for module, deps in graph.items():
            if module == layer or module.startswith(layer + "."):
                upper = ("adaptcs.experiments", "adaptcs.workflow", "adaptcs.config", "adaptcs.jobs")
                assert not {d for d in deps if d.startswith(upper)}, module
    design = {d for m, deps in graph.items() if m.startswith("adaptcs.design") for d in deps}
    assert not {d for d in design if d.startswith("adaptcs.data")}


def test_plotting_and_models_import_without_numba():
    code = ("import sys, adaptcs.plotting, adaptcs.models, adaptcs.experiments, adaptcs.workflow, adaptcs.jobs; "
            "assert 'numba' not in sys.modules, 'numba imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_module_over_500_lines_says_why_in_its_docstring():
    long = {}
    for path in PACKAGE.rglob("*.py"):
        lines = path.read_text().count("\n")
        if lines > 500:
            docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
            if "Over 500 lines:" not in docstring:
                long[str(path.relative_to(PACKAGE))] = lines
    assert long == {}
