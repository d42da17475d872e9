"""How far the phase-aware line model trusts its phase: the tolerance rule of ``eps_x``, on the TRAINING slices.

``adaptcs.models.line_phase`` keeps, per column, the smallest ``eps`` whose conditional evidence is within
``max(EPS_TOLERANCE, EPS_TOLERANCE_PER_LINE * k)`` nats of the best (``k`` lines outside the phase band). This
benchmark designs lines on the 8 simulated Colin27 training slices (never the test slices) under each rule
``FLOOR:PER_LINE`` given, reconstructs low-to-high and partial Fourier 5/8 and 6/8 under the same rule, and prints
the paired PSNR differences (magnitude in the brain) design - mask, mean +- s.e., at R = 8 and R = 4.

Run: ``OPENBLAS_NUM_THREADS=1 python benchmarks/bench_mri_phase_trust.py --phase spin_echo --rules 2:0 4:0 0:0.3
2:0.2 2:0.3`` (128 x 128; about 8 CPU s per slice and rule). Never asserts on time.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from threadpoolctl import threadpool_limits

import adaptcs.models.line_phase as phase_model
from adaptcs.bases.separable import SeparableWavelet
from adaptcs.metrics import magnitude_scores
from adaptcs.mri.data import PHASE_REGIMES, colin27_kspace
from adaptcs.mri.design import centre_lines, design_lines, fixed_mask

MASKS = ("low_to_high", "partial_fourier_5_8", "partial_fourier_6_8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--phase", choices=PHASE_REGIMES, default="spin_echo")
    parser.add_argument("--noise", type=float, default=0.02)
    parser.add_argument("--rules", nargs="+", default=["2:0", "2:0.3"], help="FLOOR:PER_LINE tolerances (nats)")
    args = parser.parse_args()
    rules = [tuple(float(x) for x in rule.split(":")) for rule in args.rules]
    n = args.size
    budgets = (n // 8, n // 4)
    basis = SeparableWavelet((n, n), "db4", 4)
    train = colin27_kspace(n, which="train", noise=args.noise, phase=args.phase)
    profile = phase_model.magnitude_profile("db4", 4, [np.abs(a.reference) for a in train])
    psnr = {}
    with threadpool_limits(1):
        for i, acq in enumerate(train):
            started = time.process_time()
            for rule in rules:
                phase_model.EPS_TOLERANCE, phase_model.EPS_TOLERANCE_PER_LINE = rule

                def model(noise_var=acq.noise_var):
                    return phase_model.PhaseLineGaussian(basis, noise_var=noise_var, profile=profile)

                run = design_lines(acq.kspace, model(), start=centre_lines(n, n // 16), budget=budgets[1],
                                   checkpoints=budgets)
                for b in budgets:
                    psnr[rule, "design", b, i] = magnitude_scores(run.fits[b].image_, acq.reference, acq.mask)[1]
                    for kind in MASKS:
                        lines = fixed_mask(kind, n, b, n // 16, np.random.default_rng(0))
                        fit = model().fit(acq.kspace[lines], lines)
                        psnr[rule, kind, b, i] = magnitude_scores(fit.image_, acq.reference, acq.mask)[1]
            print(f"training slice {i}: {time.process_time() - started:.0f} CPU s", flush=True)
    print(f"\n{n} x {n}, phase {args.phase}, noise {args.noise}, {len(train)} simulated Colin27 TRAINING slices; "
          "design - mask, PSNR (dB) of the magnitude in the brain, mean +- s.e., both under the same rule")
    for b in budgets:
        print(f"\n{b} lines (R = {n // b})")
        for rule in rules:
            design = np.array([psnr[rule, "design", b, i] for i in range(len(train))])
            cells = []
            for kind in MASKS:
                diff = design - np.array([psnr[rule, kind, b, i] for i in range(len(train))])
                cells.append(f"- {kind} {diff.mean():+.2f} +- {diff.std(ddof=1) / np.sqrt(diff.size):.2f}")
            print(f"max({rule[0]:g}, {rule[1]:g} k): design {design.mean():.2f}  " + "  ".join(cells))


if __name__ == "__main__":
    main()
