"""What the greedy oracle minimises and what the tables report are not the same (docs/mri.md).

The greedy oracle (:func:`adaptcs.mri.greedy.oracle_choice`) takes, one step ahead, the line that leaves the
smallest error against the true image: of the *complex* image over the whole field of view (``complex``), or of
the *magnitude* inside the brain, what the tables score (``brain``). On the simulated Colin27 test slices with the
phase-aware model this prints, per slice and in the mean, both errors of the designed and the oracle orders at every
budget, how many chosen lines lie on the negative-ky side of the centre (a one-sided, partial-Fourier acquisition
takes nearly all there), and the paired PSNR difference oracle - design in the brain (the same reference and peak:
``20 log10(err_design / err_oracle)``).

Run: ``OPENBLAS_NUM_THREADS=1 python benchmarks/bench_mri_oracle_criterion.py --size 128 --budgets 32`` (all
three orders), or ``--size 256 --budgets 32 64 --orders design brain --only 0 1 2 3`` (a share of the slices).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from threadpoolctl import threadpool_limits

from adaptcs.bases.separable import SeparableWavelet
from adaptcs.models.line_phase import PhaseLineGaussian, magnitude_profile
from adaptcs.mri.data import colin27_kspace
from adaptcs.mri.design import centre_lines, design_lines
from adaptcs.mri.greedy import oracle_choice

ORDERS = ("design", "complex", "brain")


def relative(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--budgets", type=int, nargs="+", default=[32])
    parser.add_argument("--level", type=int, default=4)
    parser.add_argument("--noise", type=float, default=0.02)
    parser.add_argument("--orders", nargs="+", choices=ORDERS, default=list(ORDERS))
    parser.add_argument("--only", type=int, nargs="+", help="run only these of the 8 test slices")
    args = parser.parse_args()
    n, start, budgets = args.size, args.size // 16, sorted(args.budgets)
    orders = ["design"] + [o for o in args.orders if o != "design"]
    basis = SeparableWavelet((n, n), "db4", args.level)
    profile = magnitude_profile("db4", args.level, [np.abs(a.reference) for a in colin27_kspace(
        n, which="train", noise=args.noise)])
    slices = colin27_kspace(n, noise=args.noise)
    slices = slices if args.only is None else [slices[i] for i in args.only]
    table = {(o, b): [] for o in orders for b in budgets}  # (complex error, magnitude error in brain, lines ky < 0)
    with threadpool_limits(1):
        for acq in slices:
            cells = []
            for order in orders:
                choose = None if order == "design" else oracle_choice(
                    acq.kspace, acq.reference, acq.mask if order == "brain" else None)
                started = time.process_time()
                run = design_lines(acq.kspace, PhaseLineGaussian(basis, noise_var=acq.noise_var, profile=profile),
                                   start=centre_lines(n, start), budget=budgets[-1], checkpoints=budgets,
                                   choose=choose)
                seconds = time.process_time() - started
                for b in budgets:
                    image = run.fits[b].image_
                    table[order, b].append((relative(image, acq.reference),
                                            relative(np.abs(image)[acq.mask], np.abs(acq.reference)[acq.mask]),
                                            int(np.sum(run.lines[start:b] < n // 2))))
                last = table[order, budgets[-1]][-1]
                cells.append(f"{order}: complex {last[0]:.4f}, brain {last[1]:.4f}, {last[2]} of "
                             f"{budgets[-1] - start} at ky < 0 ({seconds:.1f} CPU s)")
            print(f"{acq.name} ({budgets[-1]} lines): " + "; ".join(cells), flush=True)
    print(f"\n{n} x {n}, {len(slices)} simulated slices, phase-aware model, from {start} centre lines: relative error "
          "of the complex image over the field of view / of the magnitude in the brain; PSNR oracle - design in the "
          "brain, mean +- s.e. [slices the oracle won], per slice")
    for b in budgets:
        design = np.array(table["design", b], dtype=float)
        for order in orders:
            rows = np.array(table[order, b], dtype=float)
            line = (f"{b:4d} lines {order:7s} {rows[:, 0].mean():.4f} / {rows[:, 1].mean():.4f}; lines at ky < 0: "
                    f"{rows[:, 2].mean():.1f} of {b - start}")
            if order != "design":
                diff = 20 * np.log10(design[:, 1] / rows[:, 1])
                se = diff.std(ddof=1) / np.sqrt(len(diff)) if len(diff) > 1 else float("nan")
                line += (f"; oracle - design {diff.mean():+.2f} +- {se:.2f} dB [{int(np.sum(diff > 0))}/{len(diff)}] "
                         f"per slice {np.round(diff, 3).tolist()}")
            print(line)


if __name__ == "__main__":
    main()
