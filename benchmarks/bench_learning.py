"""GSS-EP with learned hyper-parameters against the oracle (docs/learning.md).

For each problem: the oracle fit (the paper's values from the true signal), type-II maximum likelihood
(``learn=("p0", "v0", "noise_var")``) and 5-fold cross-validation, on the same data, in the same process.
Prints mean +- std of the relative error, the median seconds per fit, the median ratio of a learned fit's time
to the oracle fit's on the same problem, EP runs per fit, and the median learned values.

Run: ``python benchmarks/bench_learning.py --e1 30 --mnist 10`` (E1 signals 0..29; MNIST digit-3 images
0..9 of the E4 protocol, embedded data). One BLAS thread. ``--no-cv`` skips cross-validation. ``--design 8``
also runs the E3 design loop (32 -> 64 rows) on 8 signals, oracle and learned, and prints the cost of a refit;
``--design-mnist 2 --steps 40`` the same for E5 (digit 3, 128 random rows then 40 designed or random ones).
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from threadpoolctl import threadpool_limits

from adaptcs.data.synthetic import problem_rng
from adaptcs.design import run_sequential_design
from adaptcs.experiments import case_estimator, synthetic_case
from adaptcs.experiments.mnist import MNIST, cached_mnist, mnist_case

ALL = ("p0", "v0", "noise_var")


def cases(args):
    for r in range(args.e1):
        yield "E1", synthetic_case("E1", 0, r)
    if args.mnist:
        data = cached_mnist("embedded", None, None)
        setting = MNIST["E4"].digit_settings([3])[0]
        for r in range(args.mnist):
            yield "MNIST digit 3", mnist_case("E4", setting, r, data=data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--e1", type=int, default=30, help="E1 signals (default: %(default)s)")
    parser.add_argument("--mnist", type=int, default=10, help="MNIST digit-3 images (default: %(default)s)")
    parser.add_argument("--no-cv", action="store_true", help="skip cross-validation")
    parser.add_argument("--design", type=int, default=0, help="E3 design-loop signals (default: %(default)s)")
    parser.add_argument("--design-mnist", type=int, default=0, help="E5 design-loop images (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=40, help="E5 design steps (default: %(default)s)")
    args = parser.parse_args()
    kinds = {"oracle": {}, "evidence": {"learn": ALL}}
    if not args.no_cv:
        kinds["5-fold CV"] = {"learn": ALL, "learn_method": "cv"}
    rows: dict[tuple, list] = {}
    with threadpool_limits(1), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence is counted below, not printed per fit
        for name, case in cases(args):
            p = case.problem
            oracle_time = None
            for kind, params in kinds.items():
                est = case_estimator("gss_ep", case, params)
                start = time.perf_counter()
                est.fit(p.X, p.y)
                seconds = time.perf_counter() - start
                oracle_time = seconds if kind == "oracle" else oracle_time
                error = np.linalg.norm(est.coef_ - p.w_true) / np.linalg.norm(p.w_true)
                rows.setdefault((name, kind), []).append(
                    (error, seconds, seconds / oracle_time, est.n_ep_fits_, float(np.mean(est.p0_)), est.v0_,
                     est.noise_var_, est.converged_))
    print("| problem | hyper-parameters | error | s / fit (median) | x oracle time (median) | EP runs | "
          "learned p0, v0, s2 (median) | not converged |")
    print("|---|---|---|---:|---:|---:|---|---:|")
    for (name, kind), values in rows.items():
        a = np.array(values, dtype=float)
        learned = "-" if kind == "oracle" else ", ".join(f"{np.median(a[:, k]):.3g}" for k in (4, 5, 6))
        print(f"| {name} ({len(a)}) | {kind} | {a[:, 0].mean():.3f} +- {a[:, 0].std():.3f} | {np.median(a[:, 1]):.3f} "
              f"| {np.median(a[:, 2]):.1f} | {np.mean(a[:, 3]):.1f} | {learned} | {int(np.sum(a[:, 7] == 0))} |")


    if args.design:
        design_loop("E3", [synthetic_case("E3", 0, r) for r in range(args.design)], 32)
    if args.design_mnist:
        data = cached_mnist("embedded", None, None)
        setting = MNIST["E5"].digit_settings([3])[0]
        design_loop("E5", [mnist_case("E5", setting, r, data=data) for r in range(args.design_mnist)], args.steps)


def design_loop(experiment: str, cases, n_steps: int) -> None:
    """The design loop with oracle and learned GSS-EP: final error, seconds per refit, not-converged refits and
    the learned refit's mean cost in oracle refits of the same strategy."""
    rows: dict[tuple, list] = {}
    with threadpool_limits(1), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for case in cases:
            p = case.problem
            for kind, params in (("oracle", {}), ("evidence", {"learn": ALL})):
                for strategy in ("design", "random"):
                    out = run_sequential_design(case_estimator("gss_ep", case, params), p.w_true, p.X, p.y,
                                                n_steps, strategy=strategy, noise_var=p.noise_var,
                                                row_norm=float(np.sqrt(p.w_true.size)),
                                                rng=problem_rng(*case.design_seed))
                    rows.setdefault((kind, strategy), []).append(
                        (out.errors[-1], np.mean(out.fit_seconds[1:]), np.mean(out.converged[1:] == 0)))
    n0 = cases[0].problem.X.shape[0]
    print(f"\n{experiment} design loop, {len(cases)} problems, {n0} -> {n0 + n_steps} rows")
    print(f"| hyper-parameters | strategy | error at {n0 + n_steps} rows | s / refit (mean) | x oracle refit | "
          "refits not converged |")
    print("|---|---|---|---:|---:|---:|")
    for (kind, strategy), values in rows.items():
        a = np.array(values)
        ratio = a[:, 1].mean() / np.array(rows[("oracle", strategy)])[:, 1].mean()
        print(f"| {kind} | {strategy} | {a[:, 0].mean():.3f} | {a[:, 1].mean():.4f} | {ratio:.1f} | "
              f"{100 * a[:, 2].mean():.0f} % |")


if __name__ == "__main__":
    main()
