"""The sparse phase-aware line model (``PhaseLineSpikeSlab``) against the Gaussian one (``PhaseLineGaussian``): as
designers and as reconstructors, on simulated k-space of the Colin27 test slices (nothing here is scanner data).

Per slice: the design of each model from ``size / 16`` centre lines to ``size / 4`` lines (R = 4), and the fixed
masks low-to-high, partial Fourier 6/8 and variable density at that count; every mask reconstructed by both models.
Prints PSNR (dB) of the magnitude in the brain, whether each fit converged, CPU seconds of each design, and the paired
differences (mean +- s.e. [slices won]). One BLAS thread.

Run: ``OPENBLAS_NUM_THREADS=1 python benchmarks/bench_mri_sparse_lines.py --size 128 --slices 4``; the halves of a
run split with ``--only`` are summarised together by ``--summary OUT1 OUT2`` (with the run's ``--size``, ``--phase``).
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from threadpoolctl import threadpool_limits

from adaptcs.bases.separable import SeparableWavelet
from adaptcs.metrics import magnitude_scores
from adaptcs.models.line_phase import PhaseLineGaussian, magnitude_profile
from adaptcs.models.line_phase_sparse import PhaseLineSpikeSlab
from adaptcs.mri.data import PHASE_REGIMES, colin27_kspace
from adaptcs.mri.design import centre_lines, design_lines
from adaptcs.mri.masks import fixed_mask

MASKS = ("low_to_high", "partial_fourier_6_8", "variable_density")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--phase", choices=PHASE_REGIMES, default="spin_echo")
    parser.add_argument("--slices", type=int, default=4)
    parser.add_argument("--only", type=int, nargs="+", help="run only these of the first --slices slices")
    parser.add_argument("--level", type=int, default=4)
    parser.add_argument("--p0", type=float, default=0.5, help="the sparse model's spike probability (given)")
    parser.add_argument("--learn", nargs="*", default=["v0"], help="what the sparse model learns (p0, v0)")
    parser.add_argument("--summary", nargs="+", metavar="OUTPUT",
                        help="print the summary of these runs' printed output (e.g. two halves run with --only)")
    args = parser.parse_args()
    n = args.size
    if args.summary:
        summary(read_printed(args.summary), n, args.phase)
        return
    basis = SeparableWavelet((n, n), "db4", args.level)
    profile = magnitude_profile("db4", args.level, [np.abs(a.reference) for a in colin27_kspace(
        n, which="train", phase=args.phase)])
    models = {
        "gaussian": lambda s2: PhaseLineGaussian(basis, noise_var=s2, profile=profile),
        "sparse": lambda s2: PhaseLineSpikeSlab(basis, noise_var=s2, profile=profile, p0=args.p0,
                                                learn=tuple(args.learn)),
    }
    warnings.simplefilter("ignore", ConvergenceWarning)
    psnr = {}
    with threadpool_limits(1):
        for s, acq in enumerate(colin27_kspace(n, phase=args.phase)[: args.slices]):
            if args.only is not None and s not in args.only:
                continue
            masks = {m: fixed_mask(m, n, n // 4, n // 16, np.random.default_rng(1000 + s)) for m in MASKS}
            for name, make in models.items():
                started = time.process_time()
                run = design_lines(acq.kspace, make(acq.noise_var), start=centre_lines(n, n // 16), budget=n // 4)
                masks[f"design_{name}"] = run.lines
                fit = run.fits[n // 4]
                psnr[(s, f"design_{name}", name)] = magnitude_scores(fit.image_, acq.reference, acq.mask)[1]
                print(f"slice {s}: {name} design {time.process_time() - started:.0f} CPU s, converged "
                      f"{fit.converged_} ({fit.columns_not_converged_} columns short), lines on the negative side "
                      f"{int(np.sum(run.lines[n // 16:] < n // 2))} of {n // 4 - n // 16}", flush=True)
            for mask, lines in masks.items():
                for name, make in models.items():
                    if (s, mask, name) in psnr:
                        continue
                    fit = make(acq.noise_var).fit(acq.kspace[lines], lines)
                    psnr[(s, mask, name)] = magnitude_scores(fit.image_, acq.reference, acq.mask)[1]
                    if not fit.converged_:
                        print(f"slice {s}: {mask} by {name} not converged ({fit.columns_not_converged_} columns)")
            print("  " + "  ".join(f"{m}/{r} {psnr[(s, m, r)]:.2f}" for m in masks for r in models), flush=True)
    summary(psnr, n, args.phase)


def summary(psnr: dict, n: int, phase: str) -> None:
    """Mean PSNR of every mask under both models and the paired differences; ``psnr`` maps (slice, mask, model)
    to dB."""
    slices = sorted({k[0] for k in psnr})

    def paired(a, b):
        d = np.array([psnr[(s, *a)] - psnr[(s, *b)] for s in slices])
        se = d.std(ddof=1) / np.sqrt(len(d)) if len(d) > 1 else float("nan")
        return f"{d.mean():+.2f} +- {se:.2f} [{int(np.sum(d > 0.01))}/{len(d)}]"

    print(f"\n{n} x {n}, {phase}, R = 4, {len(slices)} simulated slices {slices}; PSNR (dB), mean over slices")
    for mask in list(MASKS) + ["design_gaussian", "design_sparse"]:
        print(f"{mask:22s} gaussian {np.mean([psnr[(s, mask, 'gaussian')] for s in slices]):6.2f}  sparse "
              f"{np.mean([psnr[(s, mask, 'sparse')] for s in slices]):6.2f}  sparse - gaussian "
              f"{paired((mask, 'sparse'), (mask, 'gaussian'))}")
    for mask in MASKS:
        print(f"sparse design (sparse) - {mask} (sparse): {paired(('design_sparse', 'sparse'), (mask, 'sparse'))}")
    print(f"sparse design (sparse) - gaussian design (gaussian): "
          f"{paired(('design_sparse', 'sparse'), ('design_gaussian', 'gaussian'))}")


def read_printed(paths: list[str]) -> dict:
    """(slice, mask, model) -> PSNR from the per-slice lines this script printed (runs of parts of the slices,
    ``--only``, read together)."""
    psnr, s = {}, None
    for path in paths:
        with open(path) as fh:
            for line in fh:
                if line.startswith("slice "):
                    s = int(line.split(":")[0].split()[1])
                elif line.startswith("  ") and s is not None:
                    words = line.split()
                    for key, value in zip(words[::2], words[1::2], strict=True):
                        mask, model = key.split("/")
                        psnr[(s, mask, model)] = float(value)
    return psnr


if __name__ == "__main__":
    main()
