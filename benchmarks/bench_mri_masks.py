"""MRI line design against the masks an MRI user runs, each with its own best reconstructor (issue 73).

Simulated k-space of the 8 Colin27 test slices (``adaptcs.mri.data``, phase regime ``--phase``, noise ``--noise``;
nothing here is recorded scanner data). Per slice: the design (the phase-aware line model, from ``size / 16``
centre lines, exact information gain, refits) up to each budget, and every fixed mask of
``adaptcs.mri.masks.FIXED_MASKS`` at the same line count. Every mask, the design's lines included, is reconstructed
by

- ``line``: the line model the design uses (``--prior gaussian``: ``PhaseLineGaussian`` with the training slices'
  y-scale profile; ``--prior phase_sparse``: ``PhaseLineSpikeSlab`` with that profile, ``p0 = 0.5`` given and ``v0``
  learned, issue 75), which both designs and reconstructs;
- ``l1``: sigpy's L1-wavelet reconstruction, ``tv``: sigpy's total variation, each with its penalty (a multiple of
  the noise's standard deviation) chosen on 2 training slices per mask family (contiguous blocks, random
  densities, equispaced lines, the design's own lines designed on those slices);
- ``pocs``: POCS partial Fourier (the phase of the symmetric centre).

Scores: PSNR of the magnitude inside the brain (peak: the reference's largest magnitude there) and the relative l2
error. The noise variance given to the line model is the simulation's. Raw rows go to ``--out`` (CSV, one per
slice, mask, draw, budget and reconstructor); the summary prints, per budget, every mask's line-model score, its best
reconstructor (the one of largest mean PSNR on the test slices, which favours the mask) and the paired differences
design - mask, mean +- s.e. [slices the design won by more than 0.01 dB].

Run: ``OPENBLAS_NUM_THREADS=1 python benchmarks/bench_mri_masks.py --size 128 --phase gradient_echo --out F.csv``
(CPU time per slice printed; never asserts on time). ``--part design`` or ``--part masks`` writes the rows of the
design or of the fixed masks alone (the masks' line-model fits do not depend on the design, so a changed design
reruns only its own rows). ``--summary F.csv [G.csv ...]`` prints the summary of the files' rows together;
``--summary F.csv --baseline G.csv`` adds, slice by slice, this run's design against the design of another run with
the same slices, masks and budgets (e.g. the sparse prior's against the Gaussian's).
"""

from __future__ import annotations

import argparse
import csv
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
from adaptcs.mri.masks import FIXED_MASKS, fixed_mask
from adaptcs.mri.recon import l1_wavelet_sigpy, pocs_partial_fourier, symmetric_half_width, total_variation_sigpy

PENALTIES = (0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0)  # times the noise's standard deviation
FAMILIES = {"contiguous": ("low_to_high", "partial_fourier_5_8", "partial_fourier_6_8", "partial_fourier_7_8"),
            "random": ("variable_density", "jittered_density", "fastmri_random", "pf_variable_density"),
            "equispaced": ("equispaced", "fastmri_equispaced", "pf_equispaced"),
            "design": ("design",)}
FAMILY = {mask: family for family, masks in FAMILIES.items() for mask in masks}
# drawn at random: two runs with other --masks or --budgets draw other lines
RANDOM_MASKS = FAMILIES["random"] + ("fastmri_equispaced",)
TIE_DB = 0.01
FIELDS = ("size", "phase", "noise", "slice", "mask", "draw", "lines", "reconstructor", "psnr", "relative_error",
          "converged", "columns_not_converged", "cpu_seconds")


def penalised(name: str, acq, lines, factor: float, max_iter: int) -> np.ndarray:
    """The ``l1`` or ``tv`` reconstruction of ``lines`` with penalty ``factor`` x the noise's standard deviation."""
    recon = l1_wavelet_sigpy if name == "l1" else total_variation_sigpy
    return recon(acq.kspace[lines], lines, acq.kspace.shape, factor * np.sqrt(acq.noise_var), max_iter=max_iter)


def choose_penalties(args, make_model, budgets) -> dict:
    """(reconstructor, family, budget) -> the factor of smallest mean relative error on 2 training slices."""
    training = colin27_kspace(args.size, which="train", noise=args.noise, phase=args.phase)[:2]
    rng = np.random.default_rng(777)
    masks = {}  # family -> list of (acq, lines) at each budget
    for b in budgets:
        for acq in training:
            for family, kinds in FAMILIES.items():
                if family == "design":
                    continue
                for kind in kinds:
                    masks.setdefault((family, b), []).append((acq, fixed_mask(kind, args.size, b, args.centre, rng)))
    for acq in training:
        run = design_lines(acq.kspace, make_model(acq.noise_var), start=centre_lines(args.size, args.centre),
                           budget=max(budgets), checkpoints=budgets)
        for b in budgets:
            masks.setdefault(("design", b), []).append((acq, run.lines[:b]))
    chosen = {}
    for (family, b), cases in masks.items():
        for name in ("l1", "tv"):
            errors = {f: np.mean([magnitude_scores(penalised(name, acq, lines, f, args.max_iter), acq.reference,
                                                   acq.mask)[0] for acq, lines in cases]) for f in PENALTIES}
            chosen[(name, family, b)] = min(errors, key=errors.get)
    return chosen


def mean_psnr(rows: list[dict], score: str = "psnr") -> dict:
    """(slice, mask, budget, reconstructor) -> PSNR (or another ``score`` column), the mean over a random mask's
    draws."""
    psnr = {}
    for r in rows:
        psnr.setdefault((int(r["slice"]), r["mask"], int(r["lines"]), r["reconstructor"]), []).append(float(r[score]))
    return {k: float(np.mean(v)) for k, v in psnr.items()}


#: Seeger et al. (MRM 2010)'s error ratios, designed over each mask, both reconstructed by the same sparse model
#: (issue 75's bars): the mask and the largest ratio that meets the bar.
ERROR_RATIO_BARS = (("low_to_high", 0.66), ("variable_density", 0.8))


def error_ratios(rows: list[dict], b: int) -> str:
    """The design's relative error over that of each mask of :data:`ERROR_RATIO_BARS` at budget ``b``, both
    reconstructed by the line model: mean (min-max) [slices at or below the bar]."""
    error = mean_psnr(rows, "relative_error")
    out = []
    for mask, bar in ERROR_RATIO_BARS:
        slices = sorted(k[0] for k in error if k[1:] == ("design", b, "line") and (k[0], mask, b, "line") in error)
        if slices:
            q = np.array([error[(s, "design", b, "line")] / error[(s, mask, b, "line")] for s in slices])
            out.append(f"design / {mask} {q.mean():.2f} ({q.min():.2f}-{q.max():.2f}) [{int(np.sum(q <= bar))}/"
                       f"{len(q)} <= {bar}]")
    return "; ".join(out)


def complete_rows(rows: list[dict]) -> tuple[list[dict], list[int]]:
    """The rows of the slices that have every (mask, budget, reconstructor) some slice has (a run stopped mid-slice
    leaves its last slice incomplete), and the slices left out."""
    psnr = mean_psnr(rows)
    cases = {k[1:] for k in psnr}
    left_out = sorted({k[0] for k in psnr if any((k[0], *c) not in psnr for c in cases)})
    return [r for r in rows if int(r["slice"]) not in left_out], left_out


def paired(a, b) -> str:
    """``a - b`` per slice: mean +- s.e. [slices where a won by more than TIE_DB]."""
    d = np.array(a) - np.array(b)
    se = d.std(ddof=1) / np.sqrt(len(d)) if len(d) > 1 else float("nan")
    return f"{d.mean():+6.2f} +- {se:4.2f} [{int(np.sum(d > TIE_DB))}/{len(d)}]"


def versus_baseline(rows: list[dict], baseline: list[dict]) -> None:
    """This run's design against another run's design (same slices, masks and budgets; another line model), under
    each run's own line model and under the best reconstructor of either design's lines; and the two line models
    as reconstructors of the same fixed masks."""
    psnr, other = mean_psnr(complete_rows(rows)[0]), mean_psnr(complete_rows(baseline)[0])
    slices = sorted({k[0] for k in psnr} & {k[0] for k in other})
    recons = sorted({k[3] for k in psnr} & {k[3] for k in other})
    print(f"\nthis run's design against the baseline run's design, slices {slices}")

    def pair(mask, b, recon):
        return paired([psnr[(s, mask, b, recon)] for s in slices], [other[(s, mask, b, recon)] for s in slices])

    for b in sorted({k[2] for k in psnr}):
        print(f"{b} lines: design (its line model) - baseline design (its line model) {pair('design', b, 'line')}")
        for r in recons:  # those that reconstructed both designs (a mask may have one the design has not)
            if all((s, "design", b, r) in psnr and (s, "design", b, r) in other for s in slices):
                print(f"  both designs reconstructed by {r:5s}: {pair('design', b, r)}")
        for m in sorted({k[1] for k in psnr if k[1] != "design"} - set(RANDOM_MASKS)):  # the same lines in both runs
            if all((s, m, b, "line") in psnr and (s, m, b, "line") in other for s in slices):
                print(f"  {m:22s} this line model - the baseline's: {pair(m, b, 'line')}")


def summary(rows: list[dict]) -> None:
    """Per budget: each mask's line-model PSNR, its best reconstructor, and the paired differences with the design."""
    if not any(r["mask"] == "design" and r["reconstructor"] == "line" for r in rows):
        raise SystemExit("--summary: no design rows reconstructed by the line model; give the design's CSV too "
                         "(a --part masks run has none)")
    rows, left_out = complete_rows(rows)
    if left_out:
        print(f"\nslices {left_out} left out: their run stopped before every row was written")
    psnr = mean_psnr(rows)
    slices = sorted({k[0] for k in psnr})
    masks = [m for m in dict.fromkeys(k[1] for k in psnr) if m != "design"] + ["design"]
    recons = ["line"] + [r for r in dict.fromkeys(k[3] for k in psnr) if r != "line"]
    head = rows[0]
    print(f"\n{head['size']} x {head['size']}, phase {head['phase']}, noise {head['noise']}, {len(slices)} simulated "
          "Colin27 slices; PSNR (dB) of the magnitude in the brain; design = the line model's design, reconstructed "
          "by the line model; differences paired per slice, mean +- s.e. [slices design won]")

    def scored(m, b):
        """Every reconstructor's PSNR per slice of mask m, their means, and the best reconstructor."""
        by = {r: [psnr.get((s, m, b, r), np.nan) for s in slices] for r in recons}
        means = {r: float(np.mean(v)) for r, v in by.items() if not np.any(np.isnan(v))}
        return by, means, max(means, key=means.get)

    for b in sorted({k[2] for k in psnr}):
        fits = [r for r in rows if r["reconstructor"] == "line" and int(r["lines"]) == b]
        short = [r for r in fits if str(r["converged"]) != "True"]  # a bool in memory, a string read from a CSV
        columns = (f"{sum(int(r['columns_not_converged']) for r in short)} columns short"
                   if all(r.get("columns_not_converged") not in (None, "") for r in short) else "columns not recorded")
        design = [psnr[(s, "design", b, "line")] for s in slices]
        design_by, _, design_best = scored("design", b)
        print(f"\n{b} lines (R = {int(head['size']) / b:g}); last column: the design reconstructed by its own best "
              f"reconstructor ({design_best})")
        print(f"line-model fits not converged: {len(short)} of {len(fits)} ({columns}), the design's "
              f"{sum(r['mask'] == 'design' for r in short)}")
        print(f"relative error under the line model: {error_ratios(rows, b)}")
        print(f"{'mask':22s} {'line':>6s} {'best':>6s} {'by':5s} {'design - mask (line)':>24s} "
              f"{'design - mask (its best)':>26s}  " + " ".join(f"{r:>6s}" for r in recons)
              + f"  {'design (its best) - mask (its best)':>36s}")
        without_line = [m for m in masks if any(k[1:3] == (m, b) for k in psnr)
                        and not any(k[1:] == (m, b, "line") for k in psnr)]
        for m in [m for m in masks if any(k[1:] == (m, b, "line") for k in psnr)]:  # a mask run at some budgets only
            by, means, best = scored(m, b)
            print(f"{m:22s} {means['line']:6.2f} {means[best]:6.2f} {best:5s} {paired(design, by['line']):>24s} "
                  f"{paired(design, by[best]):>26s}  " + " ".join(f"{means.get(r, np.nan):6.2f}" for r in recons)
                  + f"  {paired(design_by[design_best], by[best]):>36s}")
        if without_line:
            print(f"(not shown, no line-model rows at {b} lines: {', '.join(without_line)})")


def read_rows(spec: str) -> list[dict]:
    """The rows of a CSV named by ``spec``: ``PATH``, or ``PATH:PART`` / ``PATH:PART:RECON,RECON...`` for some of them
    (PART ``design``, ``masks`` or ``all``; the reconstructors to keep), so that one summary can take the design's
    rows from one run and the fixed masks' from others (a mask's l1, tv and pocs rows do not depend on the line
    model). Rows of the same (slice, mask, draw, lines, reconstructor) in two specs are an error."""
    path, _, selection = spec.partition(":")
    part, _, recons = selection.partition(":")
    if part not in ("", "all", "design", "masks"):
        raise SystemExit(f"--summary {spec}: the part after ':' must be design, masks or all; got {part!r}")
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    if part in ("design", "masks"):
        rows = [r for r in rows if (r["mask"] == "design") == (part == "design")]
    if recons:
        rows = [r for r in rows if r["reconstructor"] in recons.split(",")]
    return rows


def read_specs(specs: list[str]) -> list[dict]:
    """The rows of every spec of :func:`read_rows` together; a row that two specs both give is an error."""
    rows, seen = [], {}
    for spec in specs:
        for r in read_rows(spec):
            key = (r["size"], r["phase"], r["slice"], r["mask"], r["draw"], r["lines"], r["reconstructor"])
            if key in seen:
                raise SystemExit(f"--summary: {spec} and {seen[key]} both have the row {key}; select rows with "
                                 "PATH:PART:RECONS")
            seen[key] = spec
            rows.append(r)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--phase", choices=PHASE_REGIMES, default="spin_echo")
    parser.add_argument("--noise", type=float, default=0.02)
    parser.add_argument("--slices", type=int, default=8)
    parser.add_argument("--only", type=int, nargs="+", help="run only these of the first --slices slices")
    parser.add_argument("--level", type=int, default=4)
    parser.add_argument("--draws", type=int, default=1, help="draws of every random mask per slice")
    parser.add_argument("--max-iter", type=int, default=100, help="iterations of sigpy's L1 and TV")
    parser.add_argument("--masks", nargs="+", default=list(FIXED_MASKS), choices=list(FIXED_MASKS))
    parser.add_argument("--reconstructors", nargs="+", default=["line", "l1", "tv", "pocs"],
                        choices=["line", "l1", "tv", "pocs"])
    parser.add_argument("--prior", choices=["gaussian", "phase_sparse"], default="gaussian",
                        help="the line model that designs and reconstructs (the `line` reconstructor)")
    parser.add_argument("--budgets", type=int, nargs="+", help="line counts (default: size / 8 and size / 4)")
    parser.add_argument("--warm-tol", type=float,
                        help="with --prior phase_sparse: EP's tolerance in the design's warm refits (default: tol)")
    parser.add_argument("--relearn-at", type=int, nargs="+", default=[],
                        help="line counts where the design loop refits from scratch (a model that relearns its "
                             "values only when read, as the sparse phase model, learns them again there)")
    parser.add_argument("--part", choices=["all", "design", "masks"], default="all",
                        help="rows of the design only, or of the fixed masks only (their line-model fits do not "
                             "depend on the design: a changed design reruns the design rows alone; pass both CSVs to "
                             "--summary); the masks' random draws are the same in every part")
    parser.add_argument("--out", help="CSV of the raw rows")
    parser.add_argument("--summary", nargs="+",
                        help="print the summary of these CSVs (their rows together) and stop; PATH:PART:RECONS takes "
                             "only some rows of a file (PART design, masks or all; RECONS e.g. l1,tv,pocs)")
    parser.add_argument("--baseline", nargs="+",
                        help="with --summary: a run (its CSVs) of the other prior to pair this run's design with")
    args = parser.parse_args()
    if args.summary:
        rows = read_specs(args.summary)
        summary(rows)
        if args.baseline:
            versus_baseline(rows, read_specs(args.baseline))
        return
    n = args.size
    args.centre = n // 16
    budgets = sorted(args.budgets or [n // 8, n // 4])
    basis = SeparableWavelet((n, n), "db4", args.level)
    profile = magnitude_profile("db4", args.level, [np.abs(a.reference) for a in colin27_kspace(
        n, which="train", noise=args.noise, phase=args.phase)])

    def make_model(noise_var):
        if args.prior == "phase_sparse":
            return PhaseLineSpikeSlab(basis, noise_var=noise_var, profile=profile, p0=0.5, learn=("v0",),
                                      warm_tol=args.warm_tol)
        return PhaseLineGaussian(basis, noise_var=noise_var, profile=profile)

    warnings.simplefilter("ignore", ConvergenceWarning)
    rows = []
    out = open(args.out, "w", newline="") if args.out else None  # noqa: SIM115 (rows written as they come)
    writer = csv.DictWriter(out, FIELDS) if out else None
    if writer:
        writer.writeheader()
    with threadpool_limits(1):
        started = time.process_time()
        penalties = choose_penalties(args, make_model, budgets) if {"l1", "tv"} & set(args.reconstructors) else {}
        print(f"penalties chosen on 2 training slices ({time.process_time() - started:.0f} CPU s): "
              f"{ {'/'.join(map(str, k)): v for k, v in penalties.items()} }", flush=True)
        acquisitions = colin27_kspace(n, noise=args.noise, phase=args.phase)[: args.slices]
        indices = list(range(len(acquisitions))) if args.only is None else args.only
        for s in indices:
            acq = acquisitions[s]
            started = time.process_time()
            run = None if args.part == "masks" else design_lines(
                acq.kspace, make_model(acq.noise_var), start=centre_lines(n, args.centre), budget=max(budgets),
                checkpoints=sorted(set(budgets) | set(args.relearn_at)))
            design_cpu = time.process_time() - started
            rng = np.random.default_rng(1000 + s)  # the slice's draws, wherever it runs
            for b in budgets:
                cases = [] if run is None else [("design", 0, run.lines[:b])]
                for kind in args.masks:
                    draws = args.draws if kind in FAMILIES["random"] or kind.startswith("fastmri") else 1
                    drawn = [(kind, d, fixed_mask(kind, n, b, args.centre, rng)) for d in range(draws)]
                    cases += drawn if args.part != "design" else []
                for mask, draw, lines in cases:
                    for recon in args.reconstructors:
                        t0 = time.process_time()
                        converged, columns = True, 0
                        if recon == "line":
                            fit = run.fits[b] if mask == "design" else make_model(acq.noise_var).fit(
                                acq.kspace[lines], lines)
                            image, converged, columns = fit.image_, fit.converged_, fit.columns_not_converged_
                        elif recon == "pocs":
                            rows_measured = np.zeros(n, bool)
                            rows_measured[lines] = True
                            if symmetric_half_width(rows_measured) < 2:
                                continue
                            image = pocs_partial_fourier(acq.kspace[lines], lines, (n, n))
                        else:
                            image = penalised(recon, acq, lines, penalties[(recon, FAMILY[mask], b)], args.max_iter)
                        err, psnr = magnitude_scores(image, acq.reference, acq.mask)
                        cpu = design_cpu if (mask == "design" and recon == "line") else time.process_time() - t0
                        row = {"size": n, "phase": args.phase, "noise": args.noise, "slice": s, "mask": mask,
                               "draw": draw, "lines": b, "reconstructor": recon, "psnr": round(psnr, 4),
                               "relative_error": round(err, 6), "converged": converged,
                               "columns_not_converged": columns, "cpu_seconds": round(cpu, 2)}
                        rows.append(row)
                        if writer:
                            writer.writerow(row)
                            out.flush()
            negative = "" if run is None else f"design {design_cpu:.1f} CPU s, lines on the negative side " \
                f"{int(np.sum(run.lines[args.centre:] < n // 2))} of {max(budgets) - args.centre}, "
            print(f"slice {s} ({acq.name}): {negative}whole slice {time.process_time() - started:.0f} CPU s",
                  flush=True)
    if out:
        out.close()
    if args.part == "all":
        summary(rows)


if __name__ == "__main__":
    main()
