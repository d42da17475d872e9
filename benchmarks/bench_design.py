"""Speed of one full E3 run: 32 random initial rows, then 32 designed (or random) rows, refitting GSS-EP
with warm starts after each. Prints the median wall time per run and how it splits into fitting and
choosing rows, and the share of warm refits not converged (counted here, not printed per fit).

Run: ``python benchmarks/bench_design.py`` (``--replicates 50 --threads 1`` by default). Never asserts on time.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from threadpoolctl import threadpool_limits

from adaptcs.data.synthetic import problem_rng
from adaptcs.design import run_sequential_design
from adaptcs.experiments import synthetic_case
from adaptcs.models.registry import make_estimator


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replicates", type=int, default=50)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--methods", nargs="*", default=["gss_ep", "ss_ep", "g_ard"])
    parser.add_argument("--strategies", nargs="*", default=["design", "random"])
    args = parser.parse_args()

    print(f"E3: {args.replicates} signals, 32 + 32 rows, BLAS threads={args.threads}")
    print("| method | strategy | median s / run | max s / run | median fit s | median select s | "
          "refits not converged | mean error at 64 rows |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    with threadpool_limits(args.threads), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for method in args.methods:
            for strategy in args.strategies:
                total, fit, select, error, not_converged = [], [], [], [], []
                for replicate in range(args.replicates):
                    case = synthetic_case("E3", 0, replicate)
                    p = case.problem
                    estimator = make_estimator(method, case.fit_groups, case.prior)
                    start = time.perf_counter()
                    res = run_sequential_design(estimator, p.w_true, p.X, p.y, 32, strategy=strategy,
                                                noise_var=1.0, row_norm=np.sqrt(512),
                                                rng=problem_rng(*case.design_seed))
                    total.append(time.perf_counter() - start)
                    fit.append(res.fit_seconds.sum())
                    select.append(res.select_seconds.sum())
                    error.append(res.errors[-1])
                    not_converged.append(np.mean(res.converged[1:] == 0))
                print(f"| {method} | {strategy} | {np.median(total):.3f} | {np.max(total):.3f} | "
                      f"{np.median(fit):.3f} | {np.median(select):.3f} | {np.mean(not_converged):.1%} | "
                      f"{np.mean(error):.3f} |", flush=True)


if __name__ == "__main__":
    main()
