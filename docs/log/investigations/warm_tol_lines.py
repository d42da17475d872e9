"""Do warm refits to a looser tolerance choose the same lines? The sparse phase model's design
(:class:`adaptcs.models.line_phase_sparse.PhaseLineSpikeSlab`, as ``benchmarks/bench_mri_masks.py --prior
phase_sparse`` makes it) with ``warm_tol`` None (warm refits to ``tol`` = 1e-4) and 1e-3, on the same simulated
Colin27 slices, in one process: the lines, the PSNR of the fits read at the budgets, and the design's CPU seconds
(one BLAS thread). Simulated data.

Run: ``OPENBLAS_NUM_THREADS=1 python docs/log/investigations/warm_tol_lines.py --size 128 --phase gradient_echo``
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
from adaptcs.models.line_phase import magnitude_profile
from adaptcs.models.line_phase_sparse import PhaseLineSpikeSlab
from adaptcs.mri.data import PHASE_REGIMES, colin27_kspace
from adaptcs.mri.design import centre_lines, design_lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--phase", choices=PHASE_REGIMES, default="spin_echo")
    parser.add_argument("--only", type=int, nargs="+", default=list(range(8)))
    parser.add_argument("--warm-tols", type=float, nargs="+", default=[1e-3])
    args = parser.parse_args()
    n = args.size
    budgets = [n // 8, n // 4]
    basis = SeparableWavelet((n, n), "db4", 4)
    profile = magnitude_profile("db4", 4, [np.abs(a.reference) for a in colin27_kspace(
        n, which="train", noise=0.02, phase=args.phase)])
    acquisitions = colin27_kspace(n, noise=0.02, phase=args.phase)
    warnings.simplefilter("ignore", ConvergenceWarning)
    tols = [None, *args.warm_tols]
    print(f"{n} x {n}, {args.phase}, simulated; warm_tol {tols}: design CPU s, PSNR at {budgets} lines, same lines")
    cpu = {t: [] for t in tols}
    with threadpool_limits(1):
        for s in args.only:
            acq = acquisitions[s]
            runs = {}
            for warm_tol in tols:
                model = PhaseLineSpikeSlab(basis, noise_var=acq.noise_var, profile=profile, p0=0.5, learn=("v0",),
                                           warm_tol=warm_tol)
                started = time.process_time()
                runs[warm_tol] = design_lines(acq.kspace, model, start=centre_lines(n, n // 16), budget=max(budgets),
                                              checkpoints=budgets)
                cpu[warm_tol].append(time.process_time() - started)
            line = [f"slice {s}:"]
            for warm_tol, run in runs.items():
                psnr = [magnitude_scores(run.fits[b].image_, acq.reference, acq.mask)[1] for b in budgets]
                same = np.array_equal(run.lines, runs[None].lines)
                line.append(f"warm_tol {warm_tol}: {cpu[warm_tol][-1]:6.1f} s, PSNR "
                            f"{' / '.join(f'{p:.4f}' for p in psnr)}, same lines {same}")
            print("  ".join(line), flush=True)
    for warm_tol in tols[1:]:
        ratio = np.array(cpu[warm_tol]) / np.array(cpu[None])
        print(f"design CPU with warm_tol {warm_tol} / with tol: median {np.median(ratio):.2f}, "
              f"range {ratio.min():.2f}-{ratio.max():.2f}")


if __name__ == "__main__":
    main()
