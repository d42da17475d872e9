"""256 x 256 gradient echo with the sparse phase model (simulated): the design's lines, by its best reconstructor,
against low-to-high, partial Fourier 5/8 and 6/8 and variable density, each mask by its best of the sparse line
model, the Gaussian line model and POCS, by two rules: the mask's best reconstructor on average over the slices
(the rule of ``bench_mri_masks.py --summary``) and its best on each slice (stricter). The merge the benchmark's
summary cannot make: the Gaussian line model's rows of the masks come from the Gaussian run, whose ``line`` rows
would collide with this run's. TV and L1 were not run at 256 under this phase.

Sources (benchmarks/results/): the design's rows, ``mri_masks_256_gradient_echo_phase_sparse_design.csv``; the
masks' sparse line-model and POCS rows, ``..._phase_sparse_masks.csv``; the masks' Gaussian line-model rows,
``mri_masks_256_gradient_echo.csv``.

Run: ``python docs/log/investigations/ge256_sparse.py`` (a second).
"""

import csv
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parents[3] / "benchmarks" / "results"
MASKS = ("low_to_high", "partial_fourier_5_8", "partial_fourier_6_8", "variable_density")


def psnr_table() -> dict:
    """(slice, mask, lines, reconstructor) -> PSNR; the Gaussian run's line rows as ``gaussian``."""
    table = {}
    gaussian = "mri_masks_256_gradient_echo.csv"
    for name in ("mri_masks_256_gradient_echo_phase_sparse_design.csv",
                 "mri_masks_256_gradient_echo_phase_sparse_masks.csv", gaussian):
        with open(RESULTS / name, newline="") as fh:
            for r in csv.DictReader(fh):
                recon = r["reconstructor"]
                if name == gaussian:  # only the Gaussian line model's rows of the fixed masks
                    if r["mask"] == "design" or recon != "line":
                        continue
                    recon = "gaussian"
                table[(int(r["slice"]), r["mask"], int(r["lines"]), recon)] = float(r["psnr"])
    return table


def described(v: np.ndarray) -> str:
    return f"{v.mean():+.2f} +- {v.std(ddof=1) / np.sqrt(v.size):.2f} [{int(np.sum(v > 0))}/{v.size}]"


def main() -> None:
    psnr = psnr_table()
    for lines in (32, 64):
        slices = sorted({s for (s, m, b, _r) in psnr if m == "design" and b == lines})
        slices = [s for s in slices if all((s, m, lines, "line") in psnr for m in MASKS)]
        design = {r: np.array([psnr[(s, "design", lines, r)] for s in slices]) for r in ("line", "pocs")}
        best_design = max(design, key=lambda r: design[r].mean())
        print(f"R = {256 // lines}, slices {slices}: the design's best reconstructor on average: {best_design} "
              f"({design[best_design].mean():.2f} dB)")
        for mask in MASKS:
            recons = {r: np.array([psnr[(s, mask, lines, r)] for s in slices]) for r in ("line", "gaussian", "pocs")}
            best = max(recons, key=lambda r: recons[r].mean())
            per_slice = np.max(np.stack(list(recons.values())), axis=0)
            print(f"  - {mask:20s} its best on average ({best}, {recons[best].mean():.2f}): "
                  f"{described(design[best_design] - recons[best])}; its best on each slice: "
                  f"{described(design[best_design] - per_slice)}; under the sparse model (both by it): "
                  f"{described(design['line'] - recons['line'])}")


if __name__ == "__main__":
    main()
