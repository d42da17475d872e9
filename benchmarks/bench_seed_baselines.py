"""The seed baselines VG (variational garrote) and FLAS against GSS-EP: accuracy and time per fit.

E1 (``--e1`` signals): mean +- std relative error and median time per fit, grouped and ungrouped, the paper's
hyper-parameters (VG's gamma matched to them, FLAS's r0 = 1e-3 v0). MNIST (``--mnist`` images of digit 3, E4's
288 rows): the same. E3 (``--e3`` signals): 32 random rows then 32 designed or random rows, mean error at 64 rows
(VG has no posterior covariance: random rows only).

Run: ``python benchmarks/bench_seed_baselines.py`` (one BLAS thread). Never asserts on time.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from threadpoolctl import threadpool_limits

from adaptcs.data.synthetic import problem_rng
from adaptcs.design import has_posterior_covariance, run_sequential_design
from adaptcs.experiments import case_estimator, synthetic_case
from adaptcs.experiments.mnist import MNIST, cached_mnist, mnist_case

METHODS = ["gss_ep", "vg", "vg_ungrouped", "flas", "flas_ungrouped"]


def single_fits(label: str, cases, methods) -> None:
    print(f"\n{label}\n\n| method | mean error +- std | median s per fit | not converged |\n|---|---:|---:|---:|")
    for method in methods:
        errors, seconds, bad = [], [], 0
        for case in cases:
            p = case.problem
            est = case_estimator(method, case)
            start = time.process_time()
            est.fit(p.X, p.y)
            seconds.append(time.process_time() - start)
            errors.append(np.linalg.norm(est.coef_ - p.w_true) / np.linalg.norm(p.w_true))
            bad += not getattr(est, "converged_", True)
        print(f"| {method} | {np.mean(errors):.3f} +- {np.std(errors):.3f} | {np.median(seconds):.3f} | "
              f"{bad} of {len(cases)} |", flush=True)


def design_runs(n_signals: int, methods) -> None:
    print(f"\nE3, {n_signals} signals: mean error at 32 / 48 / 64 rows, CPU s per run\n")
    print("| method | strategy | 32 | 48 | 64 | s per run |\n|---|---|---:|---:|---:|---:|")
    for method in methods:
        designs = has_posterior_covariance(case_estimator(method, synthetic_case("E3", 0, 0)))
        strategies = ("design", "random") if designs else ("random",)
        for strategy in strategies:
            errors, seconds = [], []
            for r in range(n_signals):
                case = synthetic_case("E3", 0, r)
                p = case.problem
                start = time.process_time()
                res = run_sequential_design(case_estimator(method, case), p.w_true, p.X, p.y, 32, strategy=strategy,
                                            noise_var=1.0, row_norm=np.sqrt(512), rng=problem_rng(*case.design_seed))
                seconds.append(time.process_time() - start)
                errors.append(res.errors)
            e = np.mean(errors, axis=0)
            print(f"| {method} | {strategy} | {e[0]:.3f} | {e[16]:.3f} | {e[32]:.3f} | {np.median(seconds):.2f} |",
                  flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--e1", type=int, default=100)
    parser.add_argument("--mnist", type=int, default=10)
    parser.add_argument("--e3", type=int, default=50)
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # convergence is counted in the tables instead
    with threadpool_limits(1):
        if args.e1:
            single_fits(f"E1, {args.e1} signals", [synthetic_case("E1", 0, r) for r in range(args.e1)], METHODS)
        if args.mnist:
            data = cached_mnist("embedded", None, None)
            setting = MNIST["E4"].digit_settings([3])[0]
            cases = [mnist_case("E4", setting, r, data=data) for r in range(args.mnist)]
            single_fits(f"E4 digit 3, {args.mnist} images (288 rows, 784 pixels)", cases, METHODS)
        if args.e3:
            design_runs(args.e3, ["gss_ep", "g_ard", "flas", "flas_ungrouped", "vg", "vg_ungrouped"])


if __name__ == "__main__":
    main()
