"""Experiment E1 of EXPERIMENTS.md (paper section 7.1, Table 3) for gss_ep and ss_ep.

100 signals, d = 512 in 128 round-robin groups of 4, 4 active groups with Uniform[-1, 1] coefficients,
64 rows on the sphere of radius sqrt(d), unit noise. Prints the mean +- std of the relative error
||w_hat - w|| / ||w|| and the median fit time next to the paper's numbers.

Run: ``python benchmarks/reproduce_e1.py`` (``--signals 20`` for a quick look). BLAS runs single-threaded by
default, as the workflow's grid jobs do.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from threadpoolctl import threadpool_limits

from adaptcs.data.synthetic import experiment_rng, make_e1_problem
from adaptcs.models import GroupSpikeSlabEP, SpikeSlabEP

D, N_GROUPS, N_ACTIVE, N_ROWS, V0 = 512, 128, 4, 64, 1 / 3
PAPER = {"gss_ep": (0.29, 0.11, 1.6), "ss_ep": (0.71, 0.20, None)}  # mean, std, seconds per fit (R code)


def make_estimator(method: str, groups: np.ndarray):
    if method == "gss_ep":
        return GroupSpikeSlabEP(groups, p0=N_ACTIVE / N_GROUPS, v0=V0, noise_var=1.0)
    if method == "ss_ep":
        active_coefs = N_ACTIVE * D // N_GROUPS
        return SpikeSlabEP(p0=active_coefs / D, v0=V0, noise_var=1.0)
    raise ValueError(f"unknown method {method!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--signals", type=int, default=100, help="number of signals (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=1, help="BLAS threads (default: %(default)s)")
    parser.add_argument("--layout", default="round_robin", choices=["round_robin", "contiguous"])
    args = parser.parse_args()

    errors = {m: [] for m in PAPER}
    seconds = {m: [] for m in PAPER}
    iterations = {m: [] for m in PAPER}
    with threadpool_limits(args.threads):
        for replicate in range(args.signals):
            problem = make_e1_problem(experiment_rng("E1", 0, replicate), d=D, n_groups=N_GROUPS,
                                      n_active=N_ACTIVE, n=N_ROWS, layout=args.layout)
            for method in PAPER:
                estimator = make_estimator(method, problem.groups)
                start = time.perf_counter()
                estimator.fit(problem.X, problem.y)
                seconds[method].append(time.perf_counter() - start)
                iterations[method].append(estimator.n_iter_)
                err = np.linalg.norm(estimator.coef_ - problem.w_true) / np.linalg.norm(problem.w_true)
                errors[method].append(err)

    print(f"E1: {args.signals} signals, d={D}, {N_GROUPS} groups ({args.layout}), n={N_ROWS}, "
          f"BLAS threads={args.threads}")
    print("| method | error (mean +- std) | paper | median ms / fit | paper s / fit | median iterations |")
    print("|---|---|---|---:|---:|---:|")
    for method, (paper_mean, paper_std, paper_s) in PAPER.items():
        e = np.asarray(errors[method])
        paper_time = "" if paper_s is None else f"{paper_s:g}"
        print(f"| {method} | {e.mean():.3f} +- {e.std():.3f} | {paper_mean:.2f} +- {paper_std:.2f} | "
              f"{1e3 * np.median(seconds[method]):.1f} | {paper_time} | {np.median(iterations[method]):.0f} |")


if __name__ == "__main__":
    main()
