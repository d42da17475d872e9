"""The design loop of GSS-EP on E3 (32 + 32 rows, d = 512) and E5 (128 + 160 rows of an MNIST digit, d = 784):
CPU time per signal or image, EP iterations per refit, time choosing rows, fits not converged (the reported ones,
at the checkpoints a table shows, apart from the intermediate refits that only choose rows), error.

``--save F.npz`` keeps the per-replicate numbers; ``--compare F.npz`` (from another commit or setting, same
replicates) adds paired differences of the error curves: the mean difference at every checkpoint with its
standard error, so "the same within sampling error" can be read off. One BLAS thread; CPU time of the whole
``run_job`` call (data loading included).

Run: ``python benchmarks/bench_design_loop.py --e3 50 --e5 20`` (about 10 minutes; ``--e5 0`` to skip MNIST).
``--params '{"warm_schedule": "decay"}'`` runs the paper's schedule for warm refits; ``--learned`` learns p0, v0 and
the noise variance (the workflow's learned variant). Never asserts on time.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

import numpy as np
from threadpoolctl import threadpool_limits

from adaptcs.experiments import run_job

CHECKPOINTS = {"E3": (40, 48, 56, 64), "E5": (160, 192, 224, 256, 288)}


def run(experiment: str, setting: int, replicates: int, params: dict, hyperparameters: str) -> dict:
    out = {k: [] for k in ("cpu", "errors", "n_iter", "converged", "select", "n", "kept")}
    for r in range(replicates):
        start = time.process_time()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            job = run_job(experiment, setting, "gss_ep", "design", [r], method_params=params,  # MNIST: embedded
                          hyperparameters=hyperparameters)
        out["cpu"].append(time.process_time() - start)
        out["errors"].append(job.errors[0])
        out["n_iter"].append(job.n_iter[0])
        out["converged"].append(job.converged[0])
        out["select"].append(np.nansum(job.select_seconds[0]))
        out["n"] = job.n_measurements
        out["kept"] = np.array([] if job.checkpoint_n is None else job.checkpoint_n, dtype=int)
        print(f"  {experiment} replicate {r}: {out['cpu'][-1]:.1f} s CPU, error {job.errors[0, -1]:.4f}", flush=True)
    return {k: np.asarray(v) for k, v in out.items()}


def reported(res: dict) -> np.ndarray:
    """Which fits of a loop are read (``run_sequential_design``'s ``settle_reported``): the first (cold) one, the
    job's checkpoints (E5: the images kept) and the last one; shape (steps,)."""
    n = np.asarray(res["n"])
    kept = res["kept"] if "kept" in res else np.array([], dtype=int)
    return (n == n[0]) | (n == n[-1]) | np.isin(n, kept)


def report(experiment: str, res: dict, other: dict | None) -> None:
    warm = res["n_iter"][:, 1:]  # the first fit is cold (the paper's schedule)
    conv = res["converged"][:, 1:]
    shown = reported(res)
    print(f"\n{experiment}: {len(res['cpu'])} replicates")
    print("| CPU s per replicate (median / mean) | warm refit iterations (median / mean / max) "
          "| select s per replicate | warm refits not converged | fits read (cold, checkpoints, last) not converged "
          "| intermediate refits stopped | final error |")
    print("|---|---|---:|---:|---:|---:|---:|")
    print(f"| {np.median(res['cpu']):.2f} / {np.mean(res['cpu']):.2f} | {np.median(warm):.0f} / {np.mean(warm):.1f} / "
          f"{np.max(warm)} | {np.median(res['select']):.3f} | {np.mean(conv == 0):.1%} | "
          f"{np.mean(res['converged'][:, shown] == 0):.1%} "
          f"| {np.mean(res['converged'][:, 1:][:, ~shown[1:]] == 0):.1%} "
          f"| {np.mean(res['errors'][:, -1]):.4f} |")
    if other is None:
        return
    k = min(len(res["cpu"]), len(other["cpu"]))
    print(f"paired with the comparison file ({k} replicates): error here minus error there")
    print("| rows | here | there | difference +- s.e. [here better] |\n|---:|---:|---:|---:|")
    for n in CHECKPOINTS[experiment]:
        i = list(res["n"]).index(n)
        diff = res["errors"][:k, i] - other["errors"][:k, i]
        print(f"| {n} | {res['errors'][:k, i].mean():.4f} | {other['errors'][:k, i].mean():.4f} | "
              f"{diff.mean():+.4f} +- {diff.std(ddof=1) / np.sqrt(k):.4f} [{np.sum(diff < 0)}] |")
    cpu = res["cpu"][:k] - other["cpu"][:k]
    print(f"CPU s per replicate there: median {np.median(other['cpu'][:k]):.2f}, mean {np.mean(other['cpu'][:k]):.2f} "
          f"(here minus there {cpu.mean():+.2f} +- {cpu.std(ddof=1) / np.sqrt(k):.2f}); warm refits not converged "
          f"there: {np.mean(other['converged'][:k, 1:] == 0):.1%}, reported fits: "
          f"{np.mean(other['converged'][:k][:, reported(other)] == 0):.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--e3", type=int, default=50, help="E3 signals (setting 0)")
    parser.add_argument("--e5", type=int, default=20, help="E5 images of --digit")
    parser.add_argument("--digit", type=int, default=3)
    parser.add_argument("--params", default="{}", help="estimator parameters as JSON")
    parser.add_argument("--learned", action="store_true",
                        help="learn p0, v0 and the noise variance (the workflow's learned variant)")
    parser.add_argument("--save", help="keep the per-replicate numbers in this .npz")
    parser.add_argument("--compare", help="an .npz from --save to pair with")
    args = parser.parse_args()
    params = json.loads(args.params)
    other = np.load(args.compare) if args.compare else None
    saved = {}
    with threadpool_limits(1):
        for experiment, count, setting in (("E3", args.e3, 0), ("E5", args.e5, args.digit)):
            if not count:
                continue
            res = run(experiment, setting, count, params, "learned" if args.learned else "oracle")
            saved.update({f"{experiment}/{k}": v for k, v in res.items()})
            theirs = None
            if other is not None and f"{experiment}/cpu" in other:
                theirs = {k: other[f"{experiment}/{k}"] for k in res if f"{experiment}/{k}" in other}
            report(experiment, res, theirs)
    if args.save:
        np.savez(args.save, **saved)


if __name__ == "__main__":
    main()
