"""README's results table (adaptcs.headline): made from a run's tables, and checked against README."""

import csv
import json
from pathlib import Path

import pytest

from adaptcs import headline

FIELDS = ("experiment", "setting_index", "setting", "method", "strategy", "mean", "n", "psnr")
README = Path(__file__).resolve().parents[1] / "README.md"


def _write(results: Path, experiment: str, rows: list[tuple], measurements: list[int]) -> None:
    """A table with ``rows`` (setting_index, setting, method, strategy, mean, n, psnr) and curves that reach
    ``measurements``."""
    (results / "tables").mkdir(parents=True, exist_ok=True)
    (results / "summary").mkdir(parents=True, exist_ok=True)
    with open(results / "tables" / f"{experiment}.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(FIELDS)
        writer.writerows((experiment, *row) for row in rows)
    with open(results / "summary" / f"{experiment}_curves.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(("experiment", "n_measurements"))
        writer.writerows((experiment, m) for m in measurements)


@pytest.fixture
def run(tmp_path):
    e1 = [(0, "{}", m, "random", value, 10, "") for m, value in
          (("gss_ep", 0.301), ("ss_ep", 0.726), ("g_ard", 0.424), ("gss_ep+learned", 0.312))]
    _write(tmp_path, "E1", e1, [32, 48])
    # two digits of 3 and 1 images: the means are weighted by the images (0.2 * 3 + 0.6 * 1) / 4 = 0.3
    e4 = [(i, json.dumps({"digit": digit}), m, "random", value, n, "")
          for i, digit, n, scale in ((0, 3, 3, 1.0), (1, 8, 1, 3.0))
          for m, value in (("gss_ep", 0.2 * scale), ("ss_ep", 0.5 * scale), ("g_ard", 0.25 * scale))]
    _write(tmp_path, "E4", e4, [100])
    mri = [(0, json.dumps({"size": 64}), method, strategy, 0.1, 2, psnr)
           for method, strategy, psnr in (("lines_phase+learned", "design", 25.004), ("lines_phase+learned",
                                                                                     "low_to_high", 23.456),
                                          ("lines_gaussian+learned", "design", 22.0))]
    _write(tmp_path, "mri", mri, [4, 16])
    return tmp_path


def test_the_table_is_made_from_the_run_s_tables(run):
    table = headline.headline_table(run)
    assert table[:2] == list(headline.HEADER)
    assert table[2] == ("| E1 | groups help | GSS-EP 0.30, SS-EP 0.73, group ARD 0.42; learned GSS-EP 0.31 (10 "
                        f"signals; the paper, 100 signals: {headline.PAPER_E1}) |")
    assert table[3] == "| E4 | MNIST digits | GSS-EP 0.30, SS-EP 0.75, group ARD 0.38 (4 images of digits 3, 8) |"
    assert "R = 4 (16 lines)" in table[4] and "2 Colin27 slices" in table[4]
    assert "phase model: design 25.00, low-to-high 23.46; its phase-blind end: design 22.00 |" in table[4]
    assert len(table) == 5  # the experiments the run does not hold are left out


def test_readme_s_table_passes_within_one_unit_of_the_last_digit_and_fails_otherwise(run, tmp_path, capsys):
    table = headline.headline_table(run)
    readme = tmp_path / "README.md"
    readme.write_text("\n".join(["# x", headline.BEGIN, *table, headline.END, "more"]) + "\n")
    assert headline.main([str(run), "--check", str(readme)]) == 0
    readme.write_text(readme.read_text().replace("SS-EP 0.73", "SS-EP 0.74"))  # one unit: a rounding boundary
    assert headline.main([str(run), "--check", str(readme)]) == 0
    readme.write_text(readme.read_text().replace("SS-EP 0.74", "SS-EP 0.75"))
    assert headline.main([str(run), "--check", str(readme)]) == 1
    assert "0.75 where the run gives 0.73" in capsys.readouterr().err
    readme.write_text(readme.read_text().replace("groups help", "groups do not help"))
    assert headline.main([str(run), "--check", str(readme)]) == 1
    readme.write_text("no table here\n")
    assert headline.main([str(run), "--check", str(readme)]) == 2
    assert "holds no table" in capsys.readouterr().err
    assert headline.main([str(tmp_path / "nothing"), "--check", str(readme)]) == 2


def test_a_missing_row_names_the_method_and_strategy(run):
    with open(run / "tables" / "E1.csv") as f:
        lines = [line for line in f if "g_ard" not in line]
    (run / "tables" / "E1.csv").write_text("".join(lines))
    with pytest.raises(KeyError, match="E1: no row for g_ard / random"):
        headline.headline_table(run)


def test_readme_holds_the_table_with_a_row_per_experiment_of_the_default_run():
    """The numbers are checked against a fresh default run in CI (.ci/run); here, that the table is there."""
    table = headline.readme_table(README)
    assert table[:2] == list(headline.HEADER)
    assert [line.split("|")[1].strip() for line in table[2:]] == ["E1", "E3", "E4", "E5", "E7", "camera",
                                                                     "MRI lines"]


def test_e5_s_two_images_are_printed_to_one_decimal_and_e3_to_two(run):
    """E5's designed path on two images moves with a CPU's BLAS rounding (0.35 on one machine, 0.28 on another):
    its row says what two images support, one decimal; E3 keeps two."""
    e5 = [(i, json.dumps({"digit": digit}), "gss_ep", strategy, value, 1, "")
          for i, digit, scale in ((0, 3, 0.5), (1, 8, 1.5))
          for strategy, value in (("design", 0.23 * scale), ("random", 0.41 * scale))]
    _write(run, "E5", e5, [96, 224])
    e3 = [(0, "{}", method, strategy, value, 5, "")
          for method, strategy, value in (("gss_ep", "design", 0.123), ("gss_ep", "random", 0.456),
                                          ("gss_ep+learned", "design", 0.135), ("gss_ep+learned", "random", 0.467))]
    _write(run, "E3", e3, [40])
    rows = {line.split("|")[1].strip(): line for line in headline.headline_table(run)[2:]}
    assert rows["E5"] == "| E5 | designed rows on digits | GSS-EP at 224 rows: designed 0.2, random 0.4 (2 images) |"
    assert "designed 0.12, random 0.46; learned: 0.14 / 0.47 (5 signals)" in rows["E3"]
