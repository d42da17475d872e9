"""256 x 256 gradient echo with the sparse phase model (simulated): the design's lines, by its best reconstructor,
against low-to-high, partial Fourier 5/8 and 6/8 and variable density, each mask by its best of the sparse line
model, the Gaussian line model, POCS and (the contiguous masks) TV, by two rules: the mask's best reconstructor on
average over the slices (the rule of ``bench_mri_masks.py --summary``) and its best on each slice (stricter); and
the sparse design against the Gaussian design, each by its best reconstructor. The merge the benchmark's summary
cannot make: the Gaussian line model's rows of the masks come from the Gaussian run, whose ``line`` rows would
collide with this run's. L1 was not run at 256 under this phase.

TV's penalty (times the noise's standard deviation) for the contiguous masks was chosen on the 2 training slices
(the benchmark's rule for that family: 1.0 at 32 lines, 0.5 at 64); the designs' lines were reconstructed by TV at
every penalty of the grid, and the design's TV row here takes the contiguous family's penalty (the benchmark would
choose the design family's on the training slices' designs, not run: two sparse designs at 256). The best penalty
on each slice is printed too, as an upper bound that knows the image.

Sources (benchmarks/results/): the design's rows, ``mri_masks_256_gradient_echo_phase_sparse_design.csv`` and, by
TV, ``..._phase_sparse_design_tv.csv``; the masks' sparse line-model and POCS rows, ``..._phase_sparse_masks.csv``;
the masks' Gaussian line-model rows and the Gaussian design's rows, ``mri_masks_256_gradient_echo.csv``, the
Gaussian design by TV ``mri_masks_256_gradient_echo_design_tv.csv``; the contiguous masks by TV,
``mri_masks_256_gradient_echo_tv_contiguous.csv``.

``--phase susceptibility`` reads that regime's files of the same names (``mri_masks_256_susceptibility...``; the
sparse design's line-model and POCS rows there come from its ``_design_tv.csv``, written by ``tv256_runs.py``, and
the slices are those with every row).

Run: ``python docs/log/investigations/ge256_sparse.py [--phase susceptibility]`` (a second).
"""

import argparse
import csv
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parents[3] / "benchmarks" / "results"
MASKS = ("low_to_high", "partial_fourier_5_8", "partial_fourier_6_8", "variable_density")
TV_PENALTY = {32: 1.0, 64: 0.5}  # the contiguous family's, chosen on the training slices


def rows(name: str):
    if not (RESULTS / name).exists():
        return
    with open(RESULTS / name, newline="") as fh:
        yield from csv.DictReader(fh)


def psnr_table(phase: str = "gradient_echo") -> dict:
    """(slice, case, lines, reconstructor) -> PSNR. Cases: the fixed masks, ``design`` (sparse) and ``gaussian design``;
    the Gaussian run's line rows as reconstructor ``gaussian``; TV at the chosen penalty as ``tv``, at the slice's
    best penalty as ``tv best``."""
    table = {}
    stem = f"mri_masks_256_{phase}"
    for name in (f"{stem}_phase_sparse_design.csv", f"{stem}_phase_sparse_masks.csv", f"{stem}_tv_contiguous.csv"):
        for r in rows(name):
            table[(int(r["slice"]), r["mask"], int(r["lines"]), r["reconstructor"])] = float(r["psnr"])
    for r in rows(f"{stem}.csv"):
        if r["mask"] == "design":
            table[(int(r["slice"]), "gaussian design", int(r["lines"]), r["reconstructor"])] = float(r["psnr"])
        elif r["reconstructor"] == "line":
            table[(int(r["slice"]), r["mask"], int(r["lines"]), "gaussian")] = float(r["psnr"])
    for case, name in (("design", f"{stem}_phase_sparse_design_tv.csv"), ("gaussian design", f"{stem}_design_tv.csv")):
        for r in rows(name):
            key = (int(r["slice"]), case, int(r["lines"]))
            if r["reconstructor"] != "tv":
                table.setdefault((*key, r["reconstructor"]), float(r["psnr"]))
                continue
            if float(r["penalty"]) == TV_PENALTY[key[2]]:
                table[(*key, "tv")] = float(r["psnr"])
            table[(*key, "tv best")] = max(table.get((*key, "tv best"), -np.inf), float(r["psnr"]))
    return table


def described(v: np.ndarray) -> str:
    return f"{v.mean():+.2f} +- {v.std(ddof=1) / np.sqrt(v.size):.2f} [{int(np.sum(v > 0))}/{v.size}]"


def by_reconstructor(psnr: dict, case: str, lines: int, slices: list, recons) -> dict:
    return {r: np.array([psnr[(s, case, lines, r)] for s in slices]) for r in recons
            if all((s, case, lines, r) in psnr for s in slices)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--phase", choices=["gradient_echo", "susceptibility"], default="gradient_echo")
    psnr = psnr_table(parser.parse_args().phase)
    for lines in (32, 64):
        slices = sorted({s for (s, m, b, _r) in psnr if m == "design" and b == lines})
        slices = [s for s in slices if all((s, m, lines, "line") in psnr for m in MASKS)
                  and all((s, case, lines, r) in psnr for case in ("design", "gaussian design") for r in ("line", "tv"))
                  and all((s, m, lines, "tv") in psnr for m in MASKS[:3])]
        designs = {}
        for case in ("design", "gaussian design"):
            recons = by_reconstructor(psnr, case, lines, slices, ("line", "pocs", "tv", "tv best"))
            best = max((r for r in recons if r != "tv best"), key=lambda r: recons[r].mean())
            designs[case] = (best, recons)
            print(f"R = {256 // lines}, slices {slices}: the {case}'s best reconstructor on average: {best} "
                  f"({recons[best].mean():.2f} dB; " + ", ".join(f"{r} {v.mean():.2f}" for r, v in recons.items())
                  + ")")
        best_design, design = designs["design"]
        for mask in MASKS:
            recons = by_reconstructor(psnr, mask, lines, slices, ("line", "gaussian", "pocs", "tv"))
            best = max(recons, key=lambda r: recons[r].mean())
            per_slice = np.max(np.stack(list(recons.values())), axis=0)
            print(f"  - {mask:20s} its best on average ({best}, {recons[best].mean():.2f}): "
                  f"{described(design[best_design] - recons[best])}; its best on each slice: "
                  f"{described(design[best_design] - per_slice)}; the design by TV at the slice's best penalty: "
                  f"{described(design['tv best'] - recons[best])}; under the sparse model (both by it): "
                  f"{described(design['line'] - recons['line'])}")
        gaussian_best, gaussian = designs["gaussian design"]
        print(f"  sparse design ({best_design}) - Gaussian design ({gaussian_best}): "
              f"{described(design[best_design] - gaussian[gaussian_best])}; both by TV: "
              f"{described(design['tv'] - gaussian['tv'])}")


if __name__ == "__main__":
    main()
