"""Every Python snippet of the README and docs/ runs as written: the blocks of one file in order, in one namespace
(a later block may use what an earlier one made), in an empty working folder."""

import re
import warnings
from pathlib import Path

import pytest
from sklearn.exceptions import ConvergenceWarning

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "config" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def python_blocks(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)


def test_the_pages_have_snippets():
    assert python_blocks(ROOT / "README.md") and len(python_blocks(ROOT / "docs" / "guide" / "python.md")) >= 3
    assert (ROOT / "docs" / "model.md").exists() and python_blocks(ROOT / "docs" / "model.md")


@pytest.mark.parametrize("page", [p for p in PAGES if python_blocks(p)], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_snippets_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__snippet__"}
    for i, code in enumerate(python_blocks(page)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)  # fits on few rows may say they stopped early
            exec(compile(code, f"{page.name} block {i + 1}", "exec"), namespace)


def test_docs_links_point_at_files():
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text()):
            assert (page.parent / target).exists(), f"{page.name} links to missing {target}"


def test_paths_named_in_code_and_docs_exist():
    """Every ``docs/...`` or ``benchmarks/...`` file a docstring, comment, page or config names exists (the results log
    moved once: docs/log/)."""
    named = re.compile(r"(?<![\w/])((?:docs|benchmarks)/[\w./-]+?\.(?:md|py|txt|csv))")
    sources = [*ROOT.glob("src/**/*.py"), *ROOT.glob("tests/*.py"), *ROOT.glob("docs/**/*.md"), ROOT / "README.md",
               *ROOT.glob("config/*.y*ml"), *ROOT.glob("benchmarks/*.py"), *ROOT.glob("docs/log/investigations/*.py")]
    missing = sorted({(source.relative_to(ROOT).as_posix(), path) for source in sources
                      for path in named.findall(source.read_text()) if not set("<*{") & set(path)
                      and not (ROOT / path).exists()})
    assert len(sources) > 100 and not missing, missing
