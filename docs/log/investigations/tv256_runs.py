"""TV at 256 x 256 (simulated; the gradient-echo phase unless ``--phase``): the rows ``ge256_sparse.py`` reads, which
``bench_mri_masks.py`` cannot give at this size in reasonable time (its TV penalty for the design family needs two
designs on the training slices first).

``masks``: the contiguous masks (low-to-high, partial Fourier 5/8, 6/8, 7/8) by TV on the 8 test slices, the
penalty per budget chosen on the 2 training slices by the benchmark's rule for that family (smallest mean relative
error of the magnitude over the family's masks; ~2 CPU minutes for the choice, ~1 CPU s per reconstruction).

``design``: the line model's design exactly as ``bench_mri_masks.py`` makes it (start ny / 16 centre lines, reads at
32 and 64), its line-model and POCS rows (compare them with the benchmark's: the same lines give the same PSNR) and TV
at every penalty of the benchmark's grid. CPU under the gradient-echo phase: the sparse design 235-320 s a slice, the
Gaussian 47-63 s (thirteenth session, AMD EPYC, three jobs on 2 cores).

Run (one BLAS thread), from the repository's root::

    OPENBLAS_NUM_THREADS=1 python docs/log/investigations/tv256_runs.py masks OUT.csv
    OPENBLAS_NUM_THREADS=1 python docs/log/investigations/tv256_runs.py design OUT.csv --prior phase_sparse \
        --only 0 2 4 6
"""

import argparse
import csv
import sys
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
from bench_mri_masks import FAMILIES, FIELDS, PENALTIES, penalised  # noqa: E402

from adaptcs.bases.separable import SeparableWavelet  # noqa: E402
from adaptcs.metrics import magnitude_scores  # noqa: E402
from adaptcs.models.line_phase import PhaseLineGaussian, magnitude_profile  # noqa: E402
from adaptcs.models.line_phase_sparse import PhaseLineSpikeSlab  # noqa: E402
from adaptcs.mri.data import colin27_kspace  # noqa: E402
from adaptcs.mri.design import centre_lines, design_lines  # noqa: E402
from adaptcs.mri.masks import fixed_mask  # noqa: E402
from adaptcs.mri.recon import pocs_partial_fourier  # noqa: E402

N, NOISE, BUDGETS = 256, 0.02, (32, 64)


def masks(out: str, phase: str) -> None:
    kinds = FAMILIES["contiguous"]
    training = colin27_kspace(N, which="train", noise=NOISE, phase=phase)[:2]
    chosen = {}
    for b in BUDGETS:
        cases = [(acq, fixed_mask(k, N, b, N // 16, None)) for acq in training for k in kinds]
        errors = {f: np.mean([magnitude_scores(penalised("tv", acq, lines, f, 100), acq.reference, acq.mask)[0]
                              for acq, lines in cases]) for f in PENALTIES}
        chosen[b] = min(errors, key=errors.get)
        print(f"{b} lines: penalty {chosen[b]} (mean relative errors {errors})", flush=True)
    with open(out, "w", newline="") as fh:
        writer = csv.DictWriter(fh, FIELDS)
        writer.writeheader()
        for s, acq in enumerate(colin27_kspace(N, noise=NOISE, phase=phase)[:8]):
            for b in BUDGETS:
                for kind in kinds:
                    started = time.process_time()
                    err, psnr = magnitude_scores(penalised("tv", acq, fixed_mask(kind, N, b, N // 16, None), chosen[b],
                                                           100), acq.reference, acq.mask)
                    writer.writerow({"size": N, "phase": phase, "noise": NOISE, "slice": s, "mask": kind, "draw": 0,
                                     "lines": b, "reconstructor": "tv", "psnr": round(psnr, 4),
                                     "relative_error": round(err, 6), "converged": True, "columns_not_converged": 0,
                                     "cpu_seconds": round(time.process_time() - started, 2)})
            fh.flush()
            print(f"slice {s}", flush=True)


def design(out: str, phase: str, prior: str, only: list) -> None:
    basis = SeparableWavelet((N, N), "db4", 4)
    profile = magnitude_profile("db4", 4, [np.abs(a.reference) for a in colin27_kspace(N, which="train", noise=NOISE,
                                                                                        phase=phase)])
    acquisitions = colin27_kspace(N, noise=NOISE, phase=phase)
    with open(out, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["slice", "lines", "reconstructor", "penalty", "psnr", "relative_error", "converged",
                         "cpu_seconds"])
        for s in only:
            acq = acquisitions[s]
            model = (PhaseLineSpikeSlab(basis, noise_var=acq.noise_var, profile=profile, p0=0.5, learn=("v0",))
                     if prior == "phase_sparse" else PhaseLineGaussian(basis, noise_var=acq.noise_var, profile=profile))
            started = time.process_time()
            run = design_lines(acq.kspace, model, start=centre_lines(N, N // 16), budget=max(BUDGETS),
                               checkpoints=list(BUDGETS))
            cpu = time.process_time() - started
            for b in BUDGETS:
                fit = run.fits[b]
                err, psnr = magnitude_scores(fit.image_, acq.reference, acq.mask)
                writer.writerow([s, b, "line", "", round(psnr, 4), round(err, 6), fit.converged_, round(cpu, 2)])
                err, psnr = magnitude_scores(pocs_partial_fourier(acq.kspace[run.lines[:b]], run.lines[:b], (N, N)),
                                             acq.reference, acq.mask)
                writer.writerow([s, b, "pocs", "", round(psnr, 4), round(err, 6), True, ""])
                for f in PENALTIES:
                    started = time.process_time()
                    err, psnr = magnitude_scores(penalised("tv", acq, run.lines[:b], f, 100), acq.reference, acq.mask)
                    writer.writerow([s, b, "tv", f, round(psnr, 4), round(err, 6), True,
                                     round(time.process_time() - started, 2)])
            fh.flush()
            print(f"slice {s}: design {cpu:.0f} CPU s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["masks", "design"])
    parser.add_argument("out", help="CSV to write")
    parser.add_argument("--prior", choices=["gaussian", "phase_sparse"], default="phase_sparse")
    parser.add_argument("--only", type=int, nargs="+", default=list(range(8)))
    parser.add_argument("--phase", choices=["spin_echo", "gradient_echo", "susceptibility"], default="gradient_echo")
    args = parser.parse_args()
    with threadpool_limits(1):
        if args.what == "masks":
            masks(args.out, args.phase)
        else:
            design(args.out, args.phase, args.prior, args.only)


if __name__ == "__main__":
    main()
