"""MRI line design on simulated k-space of Colin27 slices (issue 48): designed lines against fixed masks, every mask
reconstructed by the same GSS-EP line model (adaptcs.mri).

Per slice of the test set: from the centre lines, the design adds the line of largest exact information gain and
refits, up to each budget; the fixed masks (low-to-high, equispaced + centre, variable-density random) have the same
number of lines, centre included. Error: relative l2 error of the magnitude image inside the brain, and PSNR of the
magnitude (peak = the reference's largest magnitude in the brain). Everything is simulated (docs/mri.md, "Data").

Run: ``OPENBLAS_NUM_THREADS=1 python benchmarks/bench_mri_lines.py --size 64 --slices 4`` (CPU time reported; never
asserts on time).
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from threadpoolctl import threadpool_limits

from adaptcs.bases.separable import SeparableWavelet, zero_filled
from adaptcs.metrics import magnitude_scores
from adaptcs.models.line_phase import PhaseLineGaussian, magnitude_profile
from adaptcs.models.line_spike_slab import LineSpikeSlab, pair_profile
from adaptcs.mri.data import colin27_kspace
from adaptcs.mri.design import (
    centre_lines,
    design_lines,
    equispaced,
    jittered_density,
    low_to_high,
    variable_density,
)
from adaptcs.mri.greedy import offline_greedy, oracle_choice
from adaptcs.mri.l1 import l1_wavelet

L1_FACTORS = (0.25, 0.5, 1.0, 2.0, 4.0)
TIE_DB = 0.01  # paired PSNR differences this small count as ties, not wins


def scores(image: np.ndarray, acq) -> tuple[float, float]:
    """(relative error, PSNR in dB) of the magnitude inside the brain mask."""
    return magnitude_scores(image, acq.reference, acq.mask)


def table(results: dict, budgets) -> None:
    """Mean error and PSNR per mask and budget, and the paired PSNR difference design - mask."""
    for b in budgets:
        d_psnr = np.array([r[1] for r in results["design"][b]])
        for name, by_budget in results.items():
            vals = np.array(by_budget[b])
            diff = d_psnr - vals[:, 1]
            se = lambda v: v.std(ddof=1) / np.sqrt(len(v)) if len(v) > 1 else float("nan")  # noqa: E731
            print(f"{b:4d} lines {name:17s} err {vals[:, 0].mean():.4f} +- {se(vals[:, 0]):.4f}  "
                  f"PSNR {vals[:, 1].mean():6.2f}  design-this {diff.mean():+.2f} +- {se(diff):.2f} "
                  f"[{int(np.sum(diff > TIE_DB))}/{len(diff)}, ties {int(np.sum(np.abs(diff) <= TIE_DB))}]  "
                  f"per slice {np.round(diff, 3).tolist()}")  # runs split by --only pool exactly


def centre_phase(acq, centre: int) -> np.ndarray:
    """The phase of the slice's zero-filled centre lines (what the phase-aware model estimates it from)."""
    lines = centre_lines(acq.kspace.shape[0], centre)
    return np.angle(zero_filled(acq.kspace[lines], lines, acq.kspace.shape))


def l1_record(results: dict, name: str, budget: int, draws, acq, basis, factor: float, phase=None) -> None:
    """Score the L1-wavelet reconstruction of every draw of a mask (mean over draws); phase-constrained with a
    ``phase``."""
    vals = [scores(l1_wavelet(acq.kspace[lines], lines, basis, factor * np.sqrt(acq.noise_var), phase=phase).image,
                   acq) for lines in draws]
    results.setdefault(name, {}).setdefault(budget, []).append(tuple(np.mean(vals, axis=0)))


def choose_l1_factor(basis, n: int, centre: int, budgets, noise: float, phased: bool = False) -> float:
    """The penalty factor (times the noise's standard deviation) of smallest mean error on 2 training slices, over
    variable-density masks at every budget (phase-constrained with ``phased``, each slice's phase from its centre
    lines)."""
    training = colin27_kspace(n, which="train", noise=noise)[:2]
    rng = np.random.default_rng(12345)
    masks = [variable_density(n, b, centre, rng) for b in budgets]
    errors = {}
    for factor in L1_FACTORS:
        errors[factor] = np.mean([scores(l1_wavelet(a.kspace[m], m, basis, factor * np.sqrt(a.noise_var),
                                                    phase=centre_phase(a, centre) if phased else None).image,
                                         a)[0] for a in training for m in masks])
    return min(errors, key=errors.get)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--slices", type=int, default=4)
    parser.add_argument("--only", type=int, nargs="+", help="run only these of the first --slices slices")
    parser.add_argument("--centre", type=int, default=None, help="centre lines to start from (default size / 16)")
    parser.add_argument("--budgets", type=int, nargs="+", default=None, help="default size / 8 and size / 4")
    parser.add_argument("--noise", type=float, default=0.02)
    parser.add_argument("--learn", choices=("none", "v0", "p0v0"), default="none")
    parser.add_argument("--p0", type=float, default=0.3)
    parser.add_argument("--level", type=int, default=3)
    parser.add_argument("--vd-draws", type=int, default=3)
    parser.add_argument("--profile", action="store_true",
                        help="slab variances per pair of scales in the proportions of the training slices")
    parser.add_argument("--l1", action="store_true",
                        help="also reconstruct every mask by L1-wavelet FISTA, its penalty (a multiple of the noise's "
                             "standard deviation) chosen on two training slices")
    parser.add_argument("--model", choices=("line", "phase"), default="line",
                        help="line: GSS-EP on lines (--p0, --learn, --profile); phase: the phase-aware Gaussian "
                             "(adaptcs.models.line_phase, its y-scale profile from the training slices), with "
                             "low-to-high "
                             "also reconstructed by the phase-blind Gaussian line model for comparison")
    parser.add_argument("--oracle-criterion", choices=("brain", "complex"), default="brain",
                        help="what the greedy oracle minimises one step ahead: the magnitude error in the brain (what "
                             "the tables report; default) or the complex image's error over the field of view")
    parser.add_argument("--greedy", action="store_true",
                        help="also the oracle greedy order (knows the image) and the offline greedy order learned "
                             "on the training slices")
    args = parser.parse_args()
    n = args.size
    centre = args.centre or n // 16
    budgets = args.budgets or [n // 8, n // 4]
    basis = SeparableWavelet((n, n), "db4", args.level)
    learn = {"none": (), "v0": ("v0",), "p0v0": ("p0", "v0")}[args.learn]
    acquisitions = colin27_kspace(n, noise=args.noise)[: args.slices]
    indices = list(range(len(acquisitions))) if args.only is None else args.only  # --only: a share of the slices
    acquisitions = [acquisitions[i] for i in indices]  # (to run them in several processes; same draws per slice)
    y_profile = magnitude_profile("db4", args.level, [np.abs(a.reference) for a in colin27_kspace(
        n, which="train", noise=args.noise)]) if args.model == "phase" else None
    profile = None
    if args.profile or args.model == "phase":
        profile = pair_profile(basis, [a.reference for a in colin27_kspace(n, which="train", noise=args.noise)])
    results: dict[str, dict[int, list]] = {}
    l1_results: dict[str, dict[int, list]] = {}
    phased = args.model == "phase"  # its masks may leave out one side of k-space: L1 with the same phase estimate
    l1_factor = choose_l1_factor(basis, n, centre, budgets, args.noise, phased) if args.l1 else None
    not_converged = {}
    cpu = {}

    columns = {}  # name -> [columns not converged, columns] over the fits read

    def count(name, fit):
        not_converged[name] = not_converged.get(name, 0) + int(not fit.converged_)
        tally = columns.setdefault(name, [0, 0])
        tally[0] += fit.columns_not_converged_
        tally[1] += n

    def record(name, budget, fit, acq):
        results.setdefault(name, {}).setdefault(budget, []).append(scores(fit.image_, acq))
        count(name, fit)

    def make_model(noise_var):
        if args.model == "phase":
            return PhaseLineGaussian(basis, noise_var=noise_var, profile=y_profile)
        return LineSpikeSlab(basis, noise_var=noise_var, p0=args.p0, learn=learn, profile=profile)

    warnings.simplefilter("ignore", ConvergenceWarning)
    with threadpool_limits(1):
        offline = None
        if args.greedy:
            start = time.process_time()
            training_slices = colin27_kspace(n, which="train", noise=args.noise)
            noises = iter([a.noise_var for a in training_slices])  # each training slice's own noise
            offline = offline_greedy([(a.kspace, a.reference) for a in training_slices],
                                     lambda: make_model(next(noises)), start=centre, budget=max(budgets))
            print(f"offline greedy order on {len(training_slices)} training slices "
                  f"({time.process_time() - start:.0f} CPU s): {offline[centre:].tolist()}", flush=True)
        for s, acq in zip(indices, acquisitions, strict=True):
            def model(noise_var=acq.noise_var):
                return make_model(noise_var)
            phase = centre_phase(acq, centre) if phased else None
            start = time.process_time()
            run = design_lines(acq.kspace, model(), start=centre_lines(n, centre), budget=max(budgets),
                               checkpoints=budgets)
            cpu.setdefault("design", []).append(time.process_time() - start)
            for b in budgets:
                record("design", b, run.fits[b], acq)
                if l1_factor is not None:
                    l1_record(l1_results, "design", b, [run.lines[:b]], acq, basis, l1_factor, phase)
            print(f"slice {acq.name}: design {cpu['design'][-1]:.1f} CPU s, refits stopped "
                  f"{run.refits_stopped}/{run.refits}, lines {run.lines[centre:].tolist()}", flush=True)
            if args.greedy:
                start = time.process_time()
                region = acq.mask if args.oracle_criterion == "brain" else None
                oracle = design_lines(acq.kspace, model(), start=centre_lines(n, centre), budget=max(budgets),
                                      checkpoints=budgets, choose=oracle_choice(acq.kspace, acq.reference, region))
                cpu.setdefault("oracle", []).append(time.process_time() - start)
                for b in budgets:
                    record("oracle greedy", b, oracle.fits[b], acq)
                    if l1_factor is not None:
                        l1_record(l1_results, "oracle greedy", b, [oracle.lines[:b]], acq, basis, l1_factor,
                                  phase)
            rng = np.random.default_rng(s)  # the slice's index among the first --slices, wherever it runs
            for b in budgets:
                masks = {"low-to-high": [low_to_high(n, b)], "equispaced": [equispaced(n, b, centre)],
                         "variable density": [variable_density(n, b, centre, rng) for _ in range(args.vd_draws)],
                         "jittered density": [jittered_density(n, b, centre, rng) for _ in range(args.vd_draws)]}
                if offline is not None:
                    masks["offline greedy"] = [offline[:b]]
                if args.model == "phase":  # the same low-pass lines under the phase-blind Gaussian line model
                    fit = LineSpikeSlab(basis, noise_var=acq.noise_var, p0=0.999, learn=("v0",),
                                        profile=profile).fit(acq.kspace[masks["low-to-high"][0]],
                                                             masks["low-to-high"][0])
                    results.setdefault("low-to-high, phase-blind", {}).setdefault(b, []).append(scores(fit.image_, acq))
                    count("low-to-high, phase-blind", fit)
                for name, draws in masks.items():
                    vals = []
                    for lines in draws:
                        fit = model().fit(acq.kspace[lines], lines)
                        vals.append(scores(fit.image_, acq))
                        count(name, fit)
                    results.setdefault(name, {}).setdefault(b, []).append(tuple(np.mean(vals, axis=0)))
                    if l1_factor is not None:
                        l1_record(l1_results, name, b, draws, acq, basis, l1_factor, phase)
    print(f"\n{n} x {n}, {len(acquisitions)} simulated Colin27 slices, noise {args.noise}, model {args.model}, "
          f"learn={args.learn}, p0={args.p0}, profile={args.profile}, "
          f"start {centre} centre lines; relative error / PSNR dB of the magnitude in the brain, mean +- s.e.; "
          "paired PSNR difference design - mask [slices design won by more than 0.01 dB, ties]")
    table(results, budgets)
    if l1_factor is not None:
        how = " with the phase of the centre lines" if phased else ""
        print(f"\nthe same masks reconstructed by L1-wavelet FISTA{how} (penalty {l1_factor:g} x the noise's "
              "standard deviation, chosen on 2 training slices):")
        table(l1_results, budgets)
    per_slice = {k: round(float(np.mean(v)), 1) for k, v in cpu.items()}
    print(f"CPU s per slice: {per_slice}; fits read not converged: {not_converged}; "
          f"columns (independent blocks) not converged, of all columns of those fits: {columns}")


if __name__ == "__main__":
    main()
