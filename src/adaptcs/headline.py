"""README's results table, made from a default run's tables, and the check that README still says it.

    python -m adaptcs.headline results                    # print the table of the run in results/
    python -m adaptcs.headline results --check README.md  # exit 1, naming each difference, if README differs

The table is made from ``results/tables/<experiment>.csv`` (the final error or PSNR of every method and strategy)
and ``results/summary/<experiment>_curves.csv`` (how many measurements the final fits had). README holds it
between the lines :data:`BEGIN` and :data:`END`; ``--check`` compares the two cell by cell, allowing each number
one unit in its last printed digit (a rounding boundary may fall between two machines' BLAS). An experiment the
run does not hold is left out of the table, never filled in from elsewhere.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from pathlib import Path

BEGIN = "<!-- headline: python -m adaptcs.headline results -->"
END = "<!-- /headline -->"
HEADER = ("| experiment | what it shows | result (relative error, or PSNR in dB; oracle hyper-parameters unless "
          "learned is said) |", "|---|---|---|")
_IMAGES = {"natural": "a photograph", "mnist": "a digit"}  # E7's image sources, as README names them
#: The paper's Table 1 (its 100 signals) beside E1: GSS-EP, SS-EP, group ARD.
PAPER_E1 = "0.29, 0.71, 0.39"
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")


def _rows(results: Path, experiment: str) -> list[dict] | None:
    path = results / "tables" / f"{experiment}.csv"
    if not path.is_file():
        return None
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _final_measurements(results: Path, experiment: str) -> int:
    """The largest number of measurements in the experiment's curves (the final fits')."""
    with open(results / "summary" / f"{experiment}_curves.csv", newline="") as f:
        return max(int(row["n_measurements"]) for row in csv.DictReader(f))


def _cell(rows: list[dict], method: str, strategy: str, column: str = "mean") -> float:
    """The value of ``column`` for ``method`` and ``strategy``, averaged over the settings weighted by their
    replicates (one setting: its value); KeyError naming what is missing."""
    chosen = [r for r in rows if r["method"] == method and r["strategy"] == strategy]
    if not chosen:
        raise KeyError(f"{rows[0]['experiment'] if rows else '?'}: no row for {method} / {strategy}")
    weights = [int(r["n"]) for r in chosen]
    return sum(float(r[column]) * w for r, w in zip(chosen, weights, strict=True)) / sum(weights)


def _replicates(rows: list[dict], method: str, strategy: str) -> int:
    return sum(int(r["n"]) for r in rows if r["method"] == method and r["strategy"] == strategy)


def _e1(rows, results):
    gss, ss, ard = (_cell(rows, m, "random") for m in ("gss_ep", "ss_ep", "g_ard"))
    return ("E1", "groups help",
            f"GSS-EP {gss:.2f}, SS-EP {ss:.2f}, group ARD {ard:.2f}; learned GSS-EP "
            f"{_cell(rows, 'gss_ep+learned', 'random'):.2f} ({_replicates(rows, 'gss_ep', 'random')} signals; the "
            f"paper, 100 signals: {PAPER_E1})")


def _designed_random(rows, results, experiment, what, learned: bool, decimals: int = 2):
    """``decimals``: E5's two digits run 96 sequential choices each, a path that rounding sends elsewhere on another
    CPU's BLAS kernels (designed 0.35 on an Intel Xeon, 0.28 on an AMD EPYC, the same code): one decimal is what
    two images support."""
    n = _final_measurements(results, experiment)
    text = (f"GSS-EP at {n} rows: designed {_cell(rows, 'gss_ep', 'design'):.{decimals}f}, random "
            f"{_cell(rows, 'gss_ep', 'random'):.{decimals}f}")
    if learned:
        text += (f"; learned: {_cell(rows, 'gss_ep+learned', 'design'):.2f} / "
                 f"{_cell(rows, 'gss_ep+learned', 'random'):.2f}")
    return (experiment, what, f"{text} ({_replicates(rows, 'gss_ep', 'design')} "
                              f"{'signals' if experiment == 'E3' else 'images'})")


def _e4(rows, results):
    gss, ss, ard = (_cell(rows, m, "random") for m in ("gss_ep", "ss_ep", "g_ard"))
    digits = sorted({json.loads(r["setting"]).get("digit") for r in rows} - {None})
    return ("E4", "MNIST digits",
            f"GSS-EP {gss:.2f}, SS-EP {ss:.2f}, group ARD {ard:.2f} ({_replicates(rows, 'gss_ep', 'random')} images "
            f"of digit{'s' if len(digits) > 1 else ''} {', '.join(map(str, digits))})")


def _e7(rows, results):
    method = "gss_ep_profile+learned"
    parts, sides = [], set()
    for index, setting in sorted({(int(r["setting_index"]), r["setting"]) for r in rows}):
        chosen = [r for r in rows if int(r["setting_index"]) == index]
        scores = ", ".join(f"{name} {_cell(chosen, method, s):.3f}"
                           for s, name in (("design", "designed"), ("topdown", "top-down"), ("random", "random")))
        setting = json.loads(setting)
        sides.add(setting["side"])
        parts.append(f"{_IMAGES.get(setting['images'], setting['images'])}: {scores}")
    n, d = _final_measurements(results, "E7"), max(sides) ** 2
    return ("E7", "images, prior per scale (learned)",
            f"{' x '.join([str(max(sides))] * 2)} pixels, {n} of {d} measurements; {'; '.join(parts)}")


def _camera(rows, results):
    method = "wavelet_tree_prediction+learned"
    setting = json.loads(rows[0]["setting"])
    share = _final_measurements(results, "camera") / setting["side"] ** 2
    return ("camera", "a simulated single-pixel scan (photon noise, a photograph; not a recorded scan; learned)",
            f"PSNR at {100 * share:.0f} % of the patterns: designed {_cell(rows, method, 'design', 'psnr'):.1f} dB, "
            f"prediction scan {_cell(rows, method, 'predict', 'psnr'):.1f} dB, top-down "
            f"{_cell(rows, method, 'topdown', 'psnr'):.1f} dB, random {_cell(rows, method, 'random', 'psnr'):.1f} dB")


def _mri(rows, results):
    setting = json.loads(rows[0]["setting"])
    lines = _final_measurements(results, "mri")  # a measurement is a line
    strategies = (("design", "design"), ("partial_fourier_6_8", "partial Fourier 6/8"),
                  ("low_to_high", "low-to-high"), ("variable_density", "variable density"))

    def scores(method):
        present = [(s, name) for s, name in strategies if any(r["strategy"] == s and r["method"] == method
                                                                for r in rows)]
        return ", ".join(f"{name} {_cell(rows, method, s, 'psnr'):.2f}" for s, name in present)

    return ("MRI lines",
            f"simulated k-space of {_replicates(rows, 'lines_phase+learned', 'design')} Colin27 slices, "
            f"{setting['size']} x {setting['size']}, R = {setting['size'] // lines} ({lines} lines), PSNR (dB) in the "
            "brain, every mask by the same line model (learned)",
            f"phase model: {scores('lines_phase+learned')}; its phase-blind end: {scores('lines_gaussian+learned')}")


#: (experiment, how its row is made), in README's order.
ROWS = (("E1", _e1),
        ("E3", lambda rows, results: _designed_random(rows, results, "E3", "designed rows pay", learned=True)),
        ("E4", _e4),
        ("E5", lambda rows, results: _designed_random(rows, results, "E5", "designed rows on digits",
                                                      learned=False, decimals=1)),
        ("E7", _e7), ("camera", _camera), ("mri", _mri))


def headline_table(results) -> list[str]:
    """The markdown lines of the table (header included) of the run in ``results``."""
    results = Path(results)
    if not (results / "tables").is_dir():
        raise FileNotFoundError(f"{results}/tables does not exist: give the results folder of a finished run")
    lines = list(HEADER)
    for experiment, make in ROWS:
        rows = _rows(results, experiment)
        if rows:
            lines.append("| " + " | ".join(make(rows, results)) + " |")
    return lines


def readme_table(readme) -> list[str]:
    """The lines between :data:`BEGIN` and :data:`END` in ``readme``; ValueError if the markers are missing."""
    text = Path(readme).read_text().splitlines()
    if BEGIN not in text or END not in text or text.index(BEGIN) > text.index(END):
        raise ValueError(f"{readme} holds no table between {BEGIN!r} and {END!r}")
    return [line for line in text[text.index(BEGIN) + 1:text.index(END)] if line.strip()]


def differences(expected: list[str], found: list[str]) -> list[str]:
    """Lines of ``found`` that are not ``expected`` (the same words, and each number within one unit of its last
    printed digit); one message per difference, empty if none."""
    out = []
    if len(expected) != len(found):
        out.append(f"{len(found)} lines where the run gives {len(expected)}")
    for i, (want, got) in enumerate(zip(expected, found, strict=False)):  # a length mismatch is said above
        if _NUMBER.sub("#", want) != _NUMBER.sub("#", got):
            out.append(f"line {i + 1}: {got!r} where the run gives {want!r}")
            continue
        for a, b in zip(_NUMBER.findall(want), _NUMBER.findall(got), strict=True):
            unit = 10.0 ** -len(a.partition(".")[2])
            if abs(float(a) - float(b)) > unit * 1.0001:
                out.append(f"line {i + 1}: {b} where the run gives {a} ({got!r})")
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m adaptcs.headline", description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="the results folder of a finished run (its tables/ and summary/)")
    parser.add_argument("--check", type=Path, metavar="README", help="compare with the table in this file")
    args = parser.parse_args(argv)
    try:
        table = headline_table(args.results)
        found = readme_table(args.check) if args.check else None
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if found is None:
        print("\n".join(table))
        return 0
    problems = differences(table, found)
    for problem in problems:
        print(f"{args.check}: {problem}", file=sys.stderr)
    if problems:
        print(f"{args.check}'s results table is not the run's: replace it by `python -m adaptcs.headline "
              f"{args.results}`", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
