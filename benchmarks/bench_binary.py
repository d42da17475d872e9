"""Rows a digital micromirror device can show: +-1 designed rows against +-1 random rows on E3.

Part 1 (selection quality): for GSS-EP fits on E3 signals at 32, 48 and 63 rows, ``x^T V x`` of the designed
+-1 row against the best of 200 random +-1 rows, the continuous bound ``lambda_max d`` and the mean random row
(``tr V``: for a +-1 row ``x^T V x = tr V + sum_{i != j} x_i x_j V_ij``, so only the off-diagonal part of V can
be gained by choosing signs).
Part 2 (error curves): E3 with +-1 rows throughout (32 random +-1 initial rows, then 32 designed or random
+-1 rows), GSS-EP with the paper's hyper-parameters; paired mean error differences with standard errors.

Run: ``python benchmarks/bench_binary.py`` (``--replicates 50``). Never asserts on time.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from threadpoolctl import threadpool_limits

from adaptcs.data.synthetic import problem_rng
from adaptcs.design import binary_rows, run_sequential_design
from adaptcs.experiments import case_estimator, synthetic_case


def selection_quality(replicates: int) -> None:
    print("| rows | designed / best of 200 random (mean, min, max) | designed / lambda_max d | designed - tr V over "
          "best random - tr V | ms per row |")
    print("|---:|---|---:|---:|---:|")
    for n in (32, 48, 63):
        ratio, to_bound, gain, seconds = [], [], [], []
        for replicate in range(replicates):
            case = synthetic_case("E3", 0, replicate)
            p = case.problem
            rng = problem_rng(*case.design_seed)
            X = 2.0 * rng.integers(0, 2, size=(n, 512)) - 1.0
            y = X @ p.w_true + rng.normal(0.0, 1.0, n)
            est = case_estimator("gss_ep", case).fit(X, y)
            start = time.perf_counter()
            chosen = binary_rows(est.cov_matvec, est.coef_var_, 1, est.noise_var_, rng=rng)
            seconds.append(time.perf_counter() - start)
            R = 2.0 * rng.integers(0, 2, size=(200, 512)) - 1.0
            random_scores = np.einsum("ij,ji->i", R, est.cov_matvec(R.T))
            trace = est.coef_var_.sum()
            ratio.append(chosen.scores[0] / random_scores.max())
            to_bound.append(chosen.scores[0] / chosen.bounds[0])
            gain.append((chosen.scores[0] - trace) / (random_scores.max() - trace))
        print(f"| {n} | {np.mean(ratio):.2f} ({np.min(ratio):.2f}, {np.max(ratio):.2f}) | {np.mean(to_bound):.3f} | "
              f"{np.mean(gain):.2f} | {1e3 * np.median(seconds):.0f} |", flush=True)


def error_curves(replicates: int) -> None:
    curves = {}
    for constraint in ("binary", "sphere"):
        for strategy in ("design", "random"):
            errors, seconds = [], []
            for replicate in range(replicates):
                case = synthetic_case("E3", 0, replicate)
                p = case.problem
                X, y = p.X, p.y
                if constraint == "binary":
                    rng = problem_rng(*case.problem_seed, 7)  # +-1 initial rows, the same for both strategies
                    X = 2.0 * rng.integers(0, 2, size=p.X.shape) - 1.0
                    y = X @ p.w_true + rng.normal(0.0, 1.0, X.shape[0])
                start = time.perf_counter()
                res = run_sequential_design(case_estimator("gss_ep", case), p.w_true, X, y, 32, strategy=strategy,
                                            noise_var=1.0, row_norm=np.sqrt(512), rng=problem_rng(*case.design_seed),
                                            row_constraint=constraint)
                seconds.append(time.perf_counter() - start)
                errors.append(res.errors)
            curves[constraint, strategy] = np.array(errors)
            print(f"{constraint} {strategy}: {np.median(seconds):.2f} s per run (median)", flush=True)
    print("\n| rows | binary design | binary random | paired difference (+- s.e.) | sphere design | sphere random |")
    print("|---:|---:|---:|---:|---:|---:|")
    for step in (0, 8, 16, 24, 32):
        bd, br = curves["binary", "design"][:, step], curves["binary", "random"][:, step]
        diff = bd - br
        print(f"| {32 + step} | {bd.mean():.3f} | {br.mean():.3f} | {diff.mean():+.3f} +- "
              f"{diff.std(ddof=1) / np.sqrt(diff.size):.3f} | {curves['sphere', 'design'][:, step].mean():.3f} | "
              f"{curves['sphere', 'random'][:, step].mean():.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replicates", type=int, default=50)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--skip-curves", action="store_true")
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # non-converged fits are counted by the workflow, not here
    with threadpool_limits(args.threads):
        print(f"E3, GSS-EP (paper's hyper-parameters), {args.replicates} signals, BLAS threads={args.threads}\n")
        selection_quality(args.replicates)
        if not args.skip_curves:
            print()
            error_curves(args.replicates)


if __name__ == "__main__":
    main()
