"""Multi-coil line design against the masks MRI users run with a receive array, each with its own best reconstructor
(issue 76).

Simulated multi-coil k-space of the Colin27 test slices (``adaptcs.mri.data.colin27_kspace(..., coils=C)``: sigpy's
birdcage sensitivities, noise correlated between neighbouring coils; nothing here is recorded scanner data),
prewhitened with the simulation's noise covariance (so every coil's noise is white of variance 1). Every method is
given the same sensitivities: ESPIRiT's of the prewhitened centre lines (``--maps espirit``, the default: what an MRI
user runs; they are 0 outside the object, a support every reconstructor then uses), scored against the noise-free
image as those maps combine it, or the simulation's own maps, whitened (``--maps true``), scored against the
simulated image.

Per slice: the design (:class:`adaptcs.models.line_coils.CoilPhaseLineGaussian`, from ``size / 16`` centre lines, exact
information gain of a line read by every coil, refits) up to each budget, and every fixed mask at the same line count,
reconstructed by

- ``line``: the coil line model (which also designs);
- ``sense``: CG-SENSE (sigpy, 30 iterations), its Tikhonov penalty chosen on ``--train-slices`` (2) training slices
  per mask family and budget;
- ``l1``: L1-wavelet with the coils (L1-ESPIRiT; sigpy), its penalty chosen the same way;
- ``grappa``: GRAPPA (pygrappa) on the centre lines, root sum of squares (equispaced masks only: its kernels need a
  regular pattern), its kernel height and Tikhonov penalty chosen the same way (with pygrappa's default kernel 5 x 5
  and penalty 0.01 it lost 2-5 dB at 256 x 256).

Rows and summary as ``bench_mri_masks.py`` (``--summary`` here prints the same tables; PSNR of the magnitude in the
brain, paired differences design - mask, mean +- s.e. [slices won]).

Run: ``OPENBLAS_NUM_THREADS=1 python benchmarks/bench_mri_coils.py --size 256 --coils 8 --out F.csv`` (CPU time per
slice printed and in the rows; never asserts on time).
"""

from __future__ import annotations

import argparse
import csv
import time

import numpy as np
from bench_mri_masks import FAMILY, FIELDS, complete_rows, mean_psnr, paired, read_specs, summary
from threadpoolctl import threadpool_limits

from adaptcs.bases.separable import SeparableWavelet
from adaptcs.metrics import magnitude_scores
from adaptcs.models.line_coils import CoilPhaseLineGaussian
from adaptcs.models.line_phase import magnitude_profile
from adaptcs.mri.coils import espirit_maps, least_squares_image, prewhiten
from adaptcs.mri.data import PHASE_REGIMES, colin27_kspace
from adaptcs.mri.design import centre_lines, design_lines
from adaptcs.mri.masks import fixed_mask
from adaptcs.mri.recon import cg_sense, grappa_rss, l1_wavelet_sense, symmetric_half_width
from adaptcs.operators import CoilKSpaceLines

MASKS = ("equispaced", "fastmri_equispaced", "low_to_high", "partial_fourier_5_8", "partial_fourier_6_8",
         "variable_density")
RECONSTRUCTORS = ("line", "sense", "l1", "grappa")
#: Penalties tried on the training slices: L1 in units of the noise's standard deviation (1 after prewhitening),
#: SENSE's Tikhonov weight likewise (0: plain least squares by CG, 30 iterations).
L1_PENALTIES = (0.015, 0.03, 0.06, 0.125, 0.25, 0.5, 1.0, 2.0, 4.0)
SENSE_PENALTIES = (0.0, 0.03, 0.1, 0.3, 1.0, 3.0)
#: GRAPPA's (kernel height along y, Tikhonov penalty relative to the calibration matrix's norm; pygrappa's ``lamda``),
#: the kernel 5 wide along the readout.
GRAPPA_SETTINGS = tuple((height, lam) for height in (3, 5) for lam in (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0))


def acquisition(acq, maps: str, centre: int):
    """The slice's prewhitened k-space (coils, n, n), the sensitivities every method gets (coils, n, n), and the
    noise-free image those sensitivities combine to (n, n): what a reconstruction is scored against.

    ESPIRiT's maps (of the prewhitened centre lines, kernel ``min(6, centre / 2)``: with 8 lines a kernel of 6 crops
    everything) have root sum of squares 1 inside the object, so the image they
    give is the true one times the root sum of squares of the whitened true maps, ``|L^{-1} s|``: the reference is
    the least-squares combination of the noise-free coil images by those maps, ``sum_c conj(m_c) (L^{-1} s)_c x``
    where the maps' root sum of squares is 1, the simulation's image as those maps see it."""
    kspace = prewhiten(acq.kspace, acq.noise_covariance)
    whitened = prewhiten(acq.sensitivities, acq.noise_covariance)
    if maps == "true":
        return kspace, whitened, acq.reference
    espirit = espirit_maps(kspace, centre)
    return kspace, espirit, least_squares_image(whitened * acq.reference, espirit)


def scored(image, reference, acq) -> tuple[float, float]:
    """(relative error, PSNR) of the magnitude in the brain against ``reference``."""
    return magnitude_scores(image, reference, acq.mask)


def reconstruct(name: str, kspace, maps, lines, centre: int, penalty, max_iter: int):
    """The image of ``lines`` by ``name`` (not ``line``): None where the reconstructor does not apply. ``penalty``:
    a float for ``sense`` and ``l1``, ``(kernel height, Tikhonov)`` for ``grappa`` (falsy: pygrappa's defaults)."""
    if name == "sense":
        return cg_sense(kspace[:, lines], lines, maps, lam=penalty, max_iter=30)
    if name == "l1":
        return l1_wavelet_sense(kspace[:, lines], lines, maps, penalty, max_iter=max_iter)
    rows = np.zeros(kspace.shape[1], bool)
    rows[lines] = True
    half = symmetric_half_width(rows)  # GRAPPA calibrates on the mask's contiguous centre
    if half < 2:
        return None
    calibration = np.arange(kspace.shape[1] // 2 - half, kspace.shape[1] // 2 + half + 1)
    height, lam = penalty if penalty else (5, 0.01)  # pygrappa's defaults where nothing was chosen
    return grappa_rss(kspace[:, lines], lines, kspace.shape[1:], calibration, kernel=(height, 5), lam=lam)


def choose_penalties(args, budgets, make_model) -> dict:
    """(reconstructor, family, budget) -> the penalty of smallest mean relative error on ``--train-slices`` training
    slices."""
    training = colin27_kspace(args.size, which="train", noise=args.noise, phase=args.phase,
                              coils=args.coils)[:args.train_slices]
    rng = np.random.default_rng(777)
    cases = {}
    for acq in training:
        kspace, maps, reference = acquisition(acq, args.maps, args.centre)
        for b in budgets:
            for kind in args.masks:
                cases.setdefault((FAMILY[kind], b), []).append((acq, kspace, maps, reference,
                                                                fixed_mask(kind, args.size, b, args.centre, rng)))
        if "design" in args.families and not args.design_by_model_only:
            run = design_lines(kspace, make_model(maps), start=centre_lines(args.size, args.centre),
                               budget=max(budgets), checkpoints=budgets,
                               operator=CoilKSpaceLines(make_model(maps).basis, maps, n_first=args.centre))
            for b in budgets:
                cases.setdefault(("design", b), []).append((acq, kspace, maps, reference, run.lines[:b]))
    chosen = {}
    for (family, b), items in cases.items():
        for name, grid in (("sense", SENSE_PENALTIES), ("l1", L1_PENALTIES), ("grappa", GRAPPA_SETTINGS)):
            if name not in args.reconstructors or (name == "grappa" and family != "equispaced"):
                continue
            images = {p: [(reconstruct(name, k, m, lines, args.centre, p, args.max_iter), ref, acq)
                          for acq, k, m, ref, lines in items] for p in grid}
            errors = {p: np.mean([scored(image, ref, acq)[0] for image, ref, acq in cases])
                      for p, cases in images.items() if all(image is not None for image, _, _ in cases)}
            if errors:
                chosen[(name, family, b)] = min(errors, key=errors.get)
    return chosen


def headline(rows: list[dict]) -> None:
    """Issue 76's comparisons per budget: the design (by the coil model) against equispaced + centre by CG-SENSE, and
    against the best fixed mask by its best reconstructor (the mask and reconstructor of largest mean PSNR), paired
    per slice; the design's CPU seconds per slice."""
    rows, _ = complete_rows(rows)
    psnr = mean_psnr(rows)
    slices = sorted({k[0] for k in psnr})
    cpu = [float(r["cpu_seconds"]) for r in rows if r["mask"] == "design" and r["reconstructor"] == "line"]
    print(f"\nissue 76: the design by the coil model, {len(slices)} slices; design CPU per slice "
          f"{min(cpu):.0f}-{max(cpu):.0f} s")
    for b in sorted({k[2] for k in psnr}):
        design = [psnr[(s, "design", b, "line")] for s in slices]
        sense = [psnr.get((s, "equispaced", b, "sense"), np.nan) for s in slices]
        fixed = {(m, r): [psnr.get((s, m, b, r), np.nan) for s in slices]
                 for (_s, m, bb, r) in psnr if bb == b and m != "design"}
        complete = [k for k in fixed if not np.any(np.isnan(fixed[k]))]
        if not complete:  # the design's rows only (--part design)
            continue
        best = max(complete, key=lambda k: np.mean(fixed[k]))
        print(f"R = {int(rows[0]['size']) / b:.3g}: - equispaced by CG-SENSE {paired(design, sense)}; - the best fixed "
              f"mask ({best[0]} by {best[1]}, {np.mean(fixed[best]):.2f} dB) {paired(design, fixed[best])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--coils", type=int, default=8)
    parser.add_argument("--phase", choices=list(PHASE_REGIMES), default="spin_echo")
    parser.add_argument("--noise", type=float, default=0.02)
    parser.add_argument("--slices", type=int, default=8)
    parser.add_argument("--only", type=int, nargs="+", help="run only these of the first --slices slices")
    parser.add_argument("--maps", choices=["espirit", "true"], default="espirit",
                        help="the sensitivities every method gets: the simulation's, or ESPIRiT's of the centre lines")
    parser.add_argument("--masks", nargs="+", default=list(MASKS), choices=sorted(FAMILY))
    parser.add_argument("--reconstructors", nargs="+", default=list(RECONSTRUCTORS), choices=RECONSTRUCTORS)
    parser.add_argument("--line-masks", nargs="+", choices=sorted(FAMILY),
                        help="fit the coil model to these of --masks only (every mask is still drawn, so that the "
                             "random masks are those of a run with every mask; a fit at 256 costs about a minute)")
    parser.add_argument("--budgets", type=int, nargs="+", help="line counts (default: size / 8, size / 6, size / 4)")
    parser.add_argument("--max-iter", type=int, default=100, help="iterations of sigpy's L1")
    parser.add_argument("--train-slices", type=int, default=2, help="training slices the penalties are chosen on")
    parser.add_argument("--design-by-model-only", action="store_true",
                        help="reconstruct the design's lines by the coil model alone (no penalties to choose for them: "
                             "no design on the training slices)")
    parser.add_argument("--relearn-every", type=int, default=8, help="the coil model's relearn_every")
    parser.add_argument("--part", choices=["all", "design", "masks"], default="all")
    parser.add_argument("--out", help="CSV of the raw rows")
    parser.add_argument("--summary", nargs="+", help="print the summary of these CSVs (PATH[:PART[:RECONS]]) and stop")
    args = parser.parse_args()
    if args.summary:
        rows = read_specs(args.summary)
        summary(rows)
        headline(rows)
        return
    n = args.size
    args.centre = n // 16
    args.families = {FAMILY[k] for k in args.masks} | ({"design"} if args.part != "masks" else set())
    budgets = sorted(args.budgets or [n // 8, round(n / 6), n // 4])
    basis = SeparableWavelet((n, n), "db4", 4)
    profile = magnitude_profile("db4", 4, [np.abs(a.reference) for a in colin27_kspace(
        n, which="train", noise=args.noise, phase=args.phase)])

    def make_model(maps):
        return CoilPhaseLineGaussian(basis, sensitivities=maps, noise_var=1.0, profile=profile,
                                     relearn_every=args.relearn_every)

    out = open(args.out, "w", newline="") if args.out else None  # noqa: SIM115 (rows written as they come)
    writer = csv.DictWriter(out, FIELDS) if out else None
    if writer:
        writer.writeheader()
    rows = []
    with threadpool_limits(1):
        started = time.process_time()
        penalised = {"sense", "l1", "grappa"} & set(args.reconstructors)
        penalties = choose_penalties(args, budgets, make_model) if penalised else {}
        print(f"penalties chosen on {args.train_slices} training slices ({time.process_time() - started:.0f} CPU s): "
              f"{ {'/'.join(map(str, k)): v for k, v in penalties.items()} }", flush=True)
        acquisitions = colin27_kspace(n, noise=args.noise, phase=args.phase, coils=args.coils)[: args.slices]
        for s in (range(len(acquisitions)) if args.only is None else args.only):
            acq = acquisitions[s]
            kspace, maps, reference = acquisition(acq, args.maps, args.centre)
            started = time.process_time()
            run = None if args.part == "masks" else design_lines(
                kspace, make_model(maps), start=centre_lines(n, args.centre), budget=max(budgets),
                checkpoints=budgets, operator=CoilKSpaceLines(basis, maps, n_first=args.centre))
            design_cpu = time.process_time() - started
            rng = np.random.default_rng(1000 + s)  # the slice's draws, wherever it runs
            for b in budgets:
                cases = [] if run is None else [("design", run.lines[:b])]
                cases += [] if args.part == "design" else [(kind, fixed_mask(kind, n, b, args.centre, rng))
                                                           for kind in args.masks]
                for mask, lines in cases:
                    for recon in args.reconstructors:
                        if (recon == "grappa" and FAMILY[mask] != "equispaced") or \
                                (mask == "design" and recon != "line" and args.design_by_model_only) or \
                                (recon == "line" and mask != "design" and args.line_masks is not None
                                 and mask not in args.line_masks):
                            continue
                        t0 = time.process_time()
                        converged, columns = True, 0
                        if recon == "line":
                            fit = run.fits[b] if mask == "design" else make_model(maps).fit(
                                np.moveaxis(kspace[:, lines], 0, 1), lines)
                            image, converged, columns = fit.image_, fit.converged_, fit.columns_not_converged_
                        else:
                            try:
                                image = reconstruct(recon, kspace, maps, lines, args.centre,
                                                    penalties.get((recon, FAMILY[mask], b), 0.0), args.max_iter)
                            except np.linalg.LinAlgError:  # a failure is a row too (NaN scores)
                                image, converged = None, False
                            if image is None and converged:
                                continue  # the reconstructor does not apply to this mask
                        error, psnr = (np.nan, np.nan) if image is None else scored(image, reference, acq)
                        cpu = design_cpu if (mask == "design" and recon == "line") else time.process_time() - t0
                        row = {"size": n, "phase": args.phase, "noise": args.noise, "slice": s, "mask": mask,
                               "draw": 0, "lines": b, "reconstructor": recon, "psnr": round(psnr, 4),
                               "relative_error": round(error, 6), "converged": converged,
                               "columns_not_converged": columns, "cpu_seconds": round(cpu, 2)}
                        rows.append(row)
                        if writer:
                            writer.writerow(row)
                            out.flush()
            print(f"slice {s}: design {design_cpu:.1f} CPU s", flush=True)
    if out:
        out.close()
    if any(r["mask"] == "design" for r in rows):
        summary(rows)
        headline(rows)


if __name__ == "__main__":
    main()
