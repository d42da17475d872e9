"""Speed of the collapsed Gibbs samplers: one E1 run (d = 512, n = 64) of the paper's 11,000 sweeps per
prior, on one core. Prints the median seconds per run and the error of the posterior mean.

Run: ``python benchmarks/bench_gibbs.py`` (``--signals 5`` by default). The first call compiles the numba
kernel (cached on disk afterwards); it is timed separately. Never asserts on time.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from threadpoolctl import threadpool_limits

from adaptcs.experiments import case_estimator, synthetic_case

METHODS = ("gss_mcmc", "g_hs", "bg_lasso")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--signals", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    case = synthetic_case("E1", 0, 0)
    start = time.perf_counter()
    case_estimator("gss_mcmc", case, {"n_samples": 10, "burn_in": 0}).fit(case.problem.X, case.problem.y)
    print(f"first call (loads or compiles the kernel): {time.perf_counter() - start:.1f} s")
    print(f"E1, 11,000 sweeps per run, BLAS threads={args.threads}, {args.signals} signals")
    print("| method | median s / run | s / 1000 sweeps | mean error |")
    print("|---|---:|---:|---:|")
    with threadpool_limits(args.threads):
        for method in METHODS:
            seconds, errors = [], []
            for replicate in range(args.signals):
                case = synthetic_case("E1", 0, replicate)
                p = case.problem
                estimator = case_estimator(method, case)
                start = time.perf_counter()
                estimator.fit(p.X, p.y)
                seconds.append(time.perf_counter() - start)
                errors.append(np.linalg.norm(estimator.coef_ - p.w_true) / np.linalg.norm(p.w_true))
            median = float(np.median(seconds))
            print(f"| {method} | {median:.1f} | {median / 11:.2f} | {np.mean(errors):.3f} |", flush=True)


if __name__ == "__main__":
    main()
