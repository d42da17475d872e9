"""One slab variance for every wavelet scale against a prior per scale, on E7's natural photographs.

For each of E7's natural images (32 x 32 by default, Haar, E7's 64 random initial rows and noise variance 0.01)
and each prior, with every hyper-parameter learned from the measurements:

- ``one``: today's E7 prior (one p0, one v0 for every coefficient);
- ``each``: ``scales=basis.scales()``, one p0 and one v0 per scale learned (the approximation always on);
- ``profile``: the fixed profile ``v0_s = v0 2^(-2 alpha (s - 1))`` (alpha = 1.2, the approximation 100 v0), the
  common multiplier and level learned (docs/model.md, "Priors per scale");
- ``training``: E7's ``gss_ep_profile``, the profile the per-scale second moments of the PCA rows' training crops
  (never a test image), the common multiplier and level learned;
- ``tree``: ``each`` with a hidden Markov tree over the scales (``parents=basis.parents()``): per scale, the spike
  probability given the parent group on and off, and the slab variance, learned;
- ``tree_training``: ``training`` with the tree (transitions per scale and the profile's multiplier learned);
- ``tree_coef``: SS-EP (a state per coefficient) with the tree of the coefficients themselves, per scale the
  transitions and the slab variance learned.

Non-adaptive rows (random, top-down, PCA) are fitted cold at n = d/8 and d/4; ``design`` and ``predict`` (the
wavelet prediction scan, Rousset et al. 2017) run the sequential loop (d/256 rows per step, warm learned
refits). Rows, noise draws and initial rows are the same for every prior (paired). Prints the mean +- standard
error of the relative error of the image, the paired differences against ``one`` with the number of images
that improved, the learned noise variances and the CPU seconds; then, within each prior, designed rows against
every other strategy (paired difference, images where design won).

Run: ``OPENBLAS_NUM_THREADS=1 python benchmarks/bench_scale_priors.py`` (``--images 4`` or ``--only 2 5``,
``--side 64``, ``--priors one each``, ``--strategies random topdown pca``; ``--json out.json`` keeps every image's
numbers,
``--tables a.json b.json`` prints the tables of saved runs merged, without running anything).
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

import numpy as np
from sklearn.base import clone
from threadpoolctl import threadpool_limits

from adaptcs.design import run_sequential_design
from adaptcs.experiments import case_estimator
from adaptcs.experiments.wavelet import E7, NATURAL_IMAGES, sequence_rows, wavelet_case
from adaptcs.measurement import sphere_rows
from adaptcs.metrics import relative_error
from adaptcs.models import SpikeSlabEP

PRIORS = ("one", "each", "profile", "training", "tree", "tree_training", "tree_coef")
STRATEGIES = ("design", "random", "topdown", "pca", "predict")
ALPHA = 1.2  # decay of the per-scale second moments of photographs (MULTISCALE-PRIORS.md)


def estimator(prior: str, case, basis):
    """E7's learned GSS-EP, with the prior asked for."""
    if prior in ("training", "tree_training"):
        est = case_estimator("gss_ep_profile", case, hyperparameters="learned")
        return est.set_params(parents=basis.parents()) if prior == "tree_training" else est
    est = case_estimator("gss_ep", case, hyperparameters="learned")
    if prior == "one":
        return est
    if prior == "tree_coef":
        start = est.get_params()
        return SpikeSlabEP(scales=basis.scales(), parents=basis.parents(), p0=float(np.mean(start["p0"])),
                           v0=start["v0"], noise_var=start["noise_var"], learn=start["learn"])
    scales = basis.scales()
    est = clone(est).set_params(scales=scales, parents=basis.parents() if prior == "tree" else None)
    if prior == "profile":
        labels = np.unique(scales)
        profile = np.where(labels == 0, 100.0, 2.0 ** (-2 * ALPHA * (labels - 1)))
        est.set_params(scale_learning="profile", v0=float(est.v0) * profile)
    return est


def run_image(setting: int, r: int, args) -> dict:
    """Errors, learned noise variances and CPU seconds of every (prior, strategy, n) on image ``r``."""
    case, basis = wavelet_case(setting, r)
    x, d = case.problem.w_true, basis.d
    X0, y0 = case.problem.X, case.problem.y
    noise_rng = np.random.default_rng([7, setting, r, 99])
    checkpoints = (d // 8, d // 4)
    n_new = checkpoints[-1] - X0.shape[0]
    noise = noise_rng.normal(0.0, np.sqrt(E7.noise_var), n_new)
    fixed = {"random": sphere_rows(np.random.default_rng([7, setting, r, 98]), n_new, d)}
    for strategy in ("topdown", "pca"):
        fixed[strategy] = sequence_rows(strategy, E7.settings[setting], basis, n_new)
    out = {}
    for prior in args.priors:
        est = estimator(prior, case, basis)
        for strategy in args.strategies:
            started = time.process_time()
            if strategy in ("design", "predict"):
                result = run_sequential_design(est, x, X0, y0, n_new // E7.batch_size(setting), strategy=strategy,
                                               noise_var=E7.noise_var, row_norm=np.sqrt(d),
                                               rng=np.random.default_rng([7, setting, r, 97]),
                                               batch_size=E7.batch_size(setting), checkpoints=checkpoints,
                                               basis=basis)
                for n, coef in zip(result.checkpoint_n, result.checkpoint_coef, strict=True):
                    out[prior, strategy, int(n)] = (relative_error(coef, x),  # already Psi^T c
                                                    result.hyperparameters.get("noise_var", np.nan))
            else:
                for n in checkpoints:
                    rows = np.vstack([X0, fixed[strategy][:n - X0.shape[0]]])
                    y = np.concatenate([y0, rows[X0.shape[0]:] @ x + noise[:n - X0.shape[0]]])
                    fit = clone(est).fit(basis.analyze(rows), y)
                    out[prior, strategy, n] = (relative_error(basis.synthesize(fit.coef_), x), fit.noise_var_)
            out[prior, strategy, "cpu"] = time.process_time() - started
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=len(NATURAL_IMAGES))
    parser.add_argument("--only", type=int, nargs="+", metavar="R", help="run these images only (0-based)")
    parser.add_argument("--side", type=int, default=32, choices=(32, 64))
    parser.add_argument("--priors", nargs="+", default=list(PRIORS), choices=PRIORS)
    parser.add_argument("--strategies", nargs="+", default=list(STRATEGIES), choices=STRATEGIES)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", help="write every image's numbers here")
    parser.add_argument("--tables", nargs="+", metavar="JSON", help="print the tables of saved runs (merged)")
    args = parser.parse_args()
    if args.tables:
        results = load(args.tables, args)
    else:
        results = run(args)
        args.images = len(results)  # --only may run fewer than --images
        if args.json:
            save(results, args)
    print_tables(results, args)


def run(args) -> list[dict]:
    """Every image's numbers (a dict per image keyed by (prior, strategy, n or "cpu"))."""
    setting = next(i for i, s in enumerate(E7.settings) if s == {"images": "natural", "side": args.side})
    warnings.simplefilter("ignore")
    results = []
    with threadpool_limits(args.threads):
        for r in args.only if args.only else range(args.images):
            results.append(run_image(setting, r, args))
            print(f"image {r} ({NATURAL_IMAGES[r]}) done", flush=True)
    return results


def save(results: list[dict], args) -> None:
    images = args.only if args.only else range(len(results))
    rows = [{"image": r, "prior": k[0], "strategy": k[1], "n": k[2], "value": v}
            for r, res in zip(images, results, strict=True) for k, v in res.items()]
    with open(args.json, "w") as f:
        json.dump({"side": args.side, "rows": rows}, f)


def load(paths: list[str], args) -> list[dict]:
    """Saved runs merged (later files win); sets args.side, priors, strategies and images from them."""
    results: dict[int, dict] = {}
    for path in paths:
        with open(path) as f:
            saved = json.load(f)
        args.side = saved["side"]
        for row in saved["rows"]:
            value = tuple(row["value"]) if isinstance(row["value"], list) else row["value"]
            results.setdefault(row["image"], {})[row["prior"], row["strategy"], row["n"]] = value
    merged = [results[r] for r in sorted(results)]
    keys = set.intersection(*(set(res) for res in merged))
    args.priors = [p for p in PRIORS if any(k[0] == p for k in keys)]
    args.strategies = [s for s in STRATEGIES if any(k[1] == s for k in keys)]
    args.images = len(merged)
    return merged


def print_tables(results: list[dict], args) -> None:
    d = args.side**2
    print(f"\nE7 natural {args.side} x {args.side}, {args.images} images; relative error mean +- s.e. "
          "[paired difference against 'one': mean +- s.e., images improved]; learned noise variance (truth 0.01) "
          "median [min, max]; CPU s per image")
    print("| prior | strategy | n | error | vs one | noise variance | CPU s |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for prior in args.priors:
        for strategy in args.strategies:
            if (prior, strategy, "cpu") not in results[0]:
                continue
            for n in (d // 8, d // 4):
                err = np.array([res[prior, strategy, n][0] for res in results])
                noise = np.array([res[prior, strategy, n][1] for res in results])
                se = err.std(ddof=1) / np.sqrt(len(err)) if len(err) > 1 else np.nan
                versus = ""
                if prior != "one" and ("one", strategy, n) in results[0]:
                    diff = err - np.array([res["one", strategy, n][0] for res in results])
                    versus = (f"{diff.mean():+.3f} +- {diff.std(ddof=1) / np.sqrt(len(diff)):.3f} "
                              f"[{np.sum(diff < 0)}/{len(diff)}]") if len(diff) > 1 else f"{diff.mean():+.3f}"
                cpu = np.mean([res[prior, strategy, "cpu"] for res in results])
                print(f"| {prior} | {strategy} | d/{d // n} | {err.mean():.3f} +- {se:.3f} | {versus} | "
                      f"{np.median(noise):.3g} [{noise.min():.2g}, {noise.max():.2g}] | {cpu:.1f} |")
    if "design" in args.strategies and len(args.strategies) > 1:
        print_design_against_fixed(results, args, d)


def paired(a: np.ndarray, b: np.ndarray) -> str:
    """``mean(a - b) +- s.e. [images where a < b]``."""
    diff = a - b
    se = diff.std(ddof=1) / np.sqrt(len(diff)) if len(diff) > 1 else np.nan
    return f"{diff.mean():+.3f} +- {se:.3f} [{np.sum(diff < 0)}/{len(diff)}]"


def print_design_against_fixed(results: list[dict], args, d: int) -> None:
    """Within each prior: designed rows minus each other strategy's rows, paired over the images."""
    others = [s for s in args.strategies if s != "design"]
    print("\nDesigned rows against the others, same prior: paired difference of the relative error "
          "(negative: design better), mean +- s.e. [images where design won]")
    print("| prior | n | " + " | ".join(f"design - {s}" for s in others) + " |")
    print("|---|---:|" + "---:|" * len(others))
    for prior in args.priors:
        if (prior, "design", "cpu") not in results[0]:
            continue
        for n in (d // 8, d // 4):
            design = np.array([res[prior, "design", n][0] for res in results])
            cells = [paired(design, np.array([res[prior, s, n][0] for res in results])) for s in others]
            print(f"| {prior} | d/{d // n} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
