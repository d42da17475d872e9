"""256 x 256 spin echo on all 8 slices (simulated): the design's lines by POCS (its best reconstructor there) against
partial Fourier 5/8, 6/8 and low-to-high, each by its best of the line model, POCS and TV, by two rules: the mask's
best reconstructor on average over the slices (the rule of ``bench_mri_masks.py --summary``) and its best on each
slice (stricter). A merge the benchmark's summary cannot make: the masks' line-model rows of slices 6 and 7 are
incomplete for other masks, so its ``complete_rows`` drops those slices.

Sources (benchmarks/results/): the design's and masks' line and POCS rows of slices 0-5,
``mri_masks_256_spin_echo_phase_sparse_follow_6slices.csv``; the design's rows of slices 6 and 7 (line, POCS, TV;
this session's code), ``..._phase_sparse_design_slices67.csv``; the masks' line and POCS rows of slices 6 and 7,
``..._phase_sparse_masks_slices2367_part.csv``; every mask's TV, ``mri_masks_256_spin_echo_tv_masks.csv``.

Run: ``python docs/log/investigations/se256_eight_slices.py`` (a second).
"""

import csv
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parents[3] / "benchmarks" / "results"
RECONSTRUCTORS = ("line", "pocs", "tv")


def rows(name: str, keep=lambda r: True) -> list[dict]:
    with open(RESULTS / name, newline="") as fh:
        return [r for r in csv.DictReader(fh) if keep(r)]


def main() -> None:
    merged = (rows("mri_masks_256_spin_echo_phase_sparse_follow_6slices.csv")
              + rows("mri_masks_256_spin_echo_phase_sparse_design_slices67.csv")
              + rows("mri_masks_256_spin_echo_phase_sparse_masks_slices2367_part.csv", lambda r: r["slice"] in "67")
              + rows("mri_masks_256_spin_echo_tv_masks.csv", lambda r: r["reconstructor"] == "tv"))
    psnr: dict = {}
    for r in merged:
        psnr.setdefault((int(r["slice"]), r["mask"], int(r["lines"]), r["reconstructor"]), []).append(float(r["psnr"]))
    psnr = {k: float(np.mean(v)) for k, v in psnr.items()}

    def described(v: np.ndarray) -> str:
        return f"{v.mean():+.2f} +- {v.std(ddof=1) / np.sqrt(v.size):.2f} [{int(np.sum(v > 0))}/{v.size}]"

    for b in (32, 64):
        for mask in ("partial_fourier_6_8", "partial_fourier_5_8", "low_to_high"):
            slices = [s for s in range(8) if (s, "design", b, "pocs") in psnr
                      and all((s, mask, b, r) in psnr for r in RECONSTRUCTORS)]
            design = np.array([psnr[(s, "design", b, "pocs")] for s in slices])
            on_average = max(RECONSTRUCTORS, key=lambda r: np.mean([psnr[(s, mask, b, r)] for s in slices]))
            by_average = design - np.array([psnr[(s, mask, b, on_average)] for s in slices])
            per_slice = design - np.array([max(psnr[(s, mask, b, r)] for r in RECONSTRUCTORS) for s in slices])
            print(f"R = {256 // b}, design by POCS - {mask}, slices {slices}: its best on average ({on_average}) "
                  f"{described(by_average)}; its best on each slice {described(per_slice)}")


if __name__ == "__main__":
    main()
