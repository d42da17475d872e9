"""Experiment E1 (docs/experiments.md) (paper section 7.1, Table 3): every registered method on the same signals.

100 signals, d = 512 in 128 round-robin groups of 4, 4 active groups with Uniform[-1, 1] coefficients,
64 rows on the sphere of radius sqrt(d), unit noise; the paper's hyper-parameters (adaptcs.models.registry).
Prints the mean +- std of the relative error ||w_hat - w|| / ||w|| and the median fit time next to the
paper's numbers. The first fit of each method is timed separately (skglm compiles with numba on first use).

Run: ``python benchmarks/reproduce_e1.py`` (``--signals 20`` for a quick look, ``--methods gss_ep g_ard``).
BLAS runs single-threaded by default, as the workflow's grid jobs do.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from threadpoolctl import threadpool_limits

from adaptcs.experiments import case_estimator, synthetic_case
from adaptcs.models.registry import METHODS

# mean, std of the error and seconds per fit of the paper's R code (Table 3 and section 7.1)
PAPER = {"gss_ep": (0.29, 0.11, 1.6), "ss_ep": (0.71, 0.20, None), "g_ard": (0.39, 0.12, 2.56),
         "g_lasso": (0.54, 0.11, 2.39), "gss_mcmc": (0.29, 0.10, None), "g_hs": (0.35, 0.12, None),
         "bg_lasso": (0.92, 0.03, None)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--signals", type=int, default=100, help="number of signals (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=1, help="BLAS threads (default: %(default)s)")
    parser.add_argument("--methods", nargs="*", default=list(METHODS), choices=list(METHODS))
    args = parser.parse_args()

    errors = {m: [] for m in args.methods}  # a NaN estimate shows as a NaN mean, never dropped
    seconds = {m: [] for m in args.methods}
    not_converged = {m: [] for m in args.methods}  # None for methods without a convergence test
    first_fit = {}
    with threadpool_limits(args.threads):
        for replicate in range(args.signals):
            case = synthetic_case("E1", 0, replicate)
            p = case.problem
            for method in args.methods:
                estimator = case_estimator(method, case)
                start = time.perf_counter()
                estimator.fit(p.X, p.y)
                elapsed = time.perf_counter() - start
                if method not in first_fit:
                    first_fit[method] = elapsed
                seconds[method].append(elapsed)
                errors[method].append(np.linalg.norm(estimator.coef_ - p.w_true) / np.linalg.norm(p.w_true))
                flag = getattr(estimator, "converged_", None)
                not_converged[method].append(None if flag is None else not flag)

    print(f"E1: {args.signals} signals, d=512, 128 groups of 4 (round robin), n=64, BLAS threads={args.threads}")
    print("| method | error (mean +- std) | paper | median ms / fit | first fit s | paper s / fit | not converged |")
    print("|---|---|---|---:|---:|---:|---:|")
    for method in args.methods:
        e = np.asarray(errors[method])
        paper_mean, paper_std, paper_s = PAPER.get(method, (np.nan, np.nan, None))
        paper_time = "" if paper_s is None else f"{paper_s:g}"
        print(f"| {method} | {e.mean():.3f} +- {e.std():.3f} | {paper_mean:.2f} +- {paper_std:.2f} | "
              f"{1e3 * np.median(seconds[method]):.1f} | {first_fit[method]:.2f} | {paper_time} | "
              f"{_count(not_converged[method])} |")


def _count(flags) -> str:
    """``k of N`` fits not converged, or ``no test`` for a method without a convergence test (samplers)."""
    if any(f is None for f in flags):
        return "no test"
    return f"{sum(flags)} of {len(flags)}"


if __name__ == "__main__":
    main()
