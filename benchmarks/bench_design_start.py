"""Sequential design from nothing, as a new user runs it: ask, measure, tell, with every hyper-parameter learned.

Two problems, each over the same signals, noise draws and random-row seeds for every variant (paired):

* ``issue``: d = 300, 60 groups of 5, 10 active with N(0, 1) coefficients, noise variance 0.25, 81 rows;
* ``e3``: signals from E3's generator (d = 512, 128 groups of 4, 4 active, Uniform[-1, 1], noise variance 1), 64 rows.

``--oracle`` gives the true p0, v0 and noise variance instead of learning them. Variants: designed rows after a
random start of ``n_random_start`` rows (0: designed from the second row on, "auto": ``ceil(d / 16)``) and random
rows throughout. Printed per variant: mean final error +- s.e., the paired difference to random rows with the
number of signals where design won, the learned noise variance at the end (range, and how many are within a factor
3 of the truth), its smallest value along the loop and after the first ``ceil(d / 16)`` rows, in how many loops it
fell below a third (a tenth) of the truth there, the share of fits not converged, CPU seconds. ``--no-hyperprior``
learns by type-II ML instead of the default weak priors (docs/learning.md).

Run: ``python benchmarks/bench_design_start.py --signals 20`` (about 15 CPU minutes). One BLAS thread; never
asserts on time.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from threadpoolctl import threadpool_limits

from adaptcs.data.synthetic import make_e1_problem
from adaptcs.design import SequentialDesigner
from adaptcs.models import GroupSpikeSlabEP

LEARN = ("p0", "v0", "noise_var")


def issue_problem(r: int):
    """(groups, w, noise variance, rows, the oracle's p0 and v0) of signal r of the 300-coefficient problem."""
    rng = np.random.default_rng([31, r])
    groups = np.repeat(np.arange(60), 5)
    active = rng.choice(60, 10, replace=False)
    return groups, np.where(np.isin(groups, active), rng.normal(size=300), 0.0), 0.25, 81, (10 / 60, 1.0)


def e3_problem(r: int):
    """(groups, w, noise variance, rows, the oracle's p0 and v0) of an E3-like signal r."""
    p = make_e1_problem(np.random.default_rng([77, r]), d=512, n_groups=128, n_active=4, n=1, noise_var=1.0)
    return p.groups, p.w_true, 1.0, 64, (4 / 128, 1 / 3)


PROBLEMS = {"issue": issue_problem, "e3": e3_problem}


def loop(groups, w, noise, n_rows, oracle, strategy, n_random_start, seed, hyperprior="auto"):
    """One ask/tell loop: (final relative error, final noise variance, smallest noise variance, CPU seconds, share
    of fits not converged, whether the noise variance fell below a third and below a tenth of the truth after the
    first ``ceil(d / 16)`` rows, its smallest value there). ``oracle``: None (learn everything) or the true
    (p0, v0), given with the true noise variance."""
    draws = np.random.default_rng([seed, 1]).normal(0.0, np.sqrt(noise), n_rows)
    estimator = GroupSpikeSlabEP(groups, learn=LEARN, hyperprior=hyperprior) if oracle is None else \
        GroupSpikeSlabEP(groups, p0=oracle[0], v0=oracle[1], noise_var=noise)
    designer = SequentialDesigner(estimator, strategy=strategy, rng=seed, n_random_start=n_random_start)
    start, smallest, not_converged, after_start = time.process_time(), np.inf, 0, np.inf
    random_start = np.ceil(w.shape[0] / 16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # counted below
        for i in range(n_rows):
            row = designer.ask()
            designer.tell(row, row @ w + draws[i])
            smallest = min(smallest, designer.estimator_.noise_var_)
            not_converged += not designer.estimator_.converged_
            if i >= random_start:
                after_start = min(after_start, designer.estimator_.noise_var_)
    est = designer.estimator_
    error = np.linalg.norm(est.coef_ - w) / np.linalg.norm(w)
    return (error, est.noise_var_, smallest, time.process_time() - start, not_converged / n_rows,
            after_start < noise / 3, after_start < noise / 10, after_start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--signals", type=int, default=20)
    parser.add_argument("--problems", nargs="+", default=list(PROBLEMS), choices=list(PROBLEMS))
    parser.add_argument("--starts", nargs="+", default=["0", "auto"], help="n_random_start values of 'design'")
    parser.add_argument("--oracle", action="store_true", help="give the true p0, v0 and noise variance instead")
    parser.add_argument("--no-hyperprior", action="store_true",
                        help="learn by type-II maximum likelihood (hyperprior=None), not with the default weak priors")
    args = parser.parse_args()
    variants = [("design", s if s == "auto" else int(s)) for s in args.starts] + [("random", 0)]
    with threadpool_limits(1):
        for name in args.problems:
            results = {v: [] for v in variants}
            for r in range(args.signals):
                groups, w, noise, n_rows, truth = PROBLEMS[name](r)
                oracle = truth if args.oracle else None
                for v in variants:
                    results[v].append(loop(groups, w, noise, n_rows, oracle, *v, seed=1000 + r,
                                           hyperprior=None if args.no_hyperprior else "auto"))
                print(f"  {name} signal {r}: " + ", ".join(f"{s}/{n}: {results[(s, n)][-1][0]:.3f}"
                                                          for s, n in variants), flush=True)
            random = np.array(results[("random", 0)])
            given = "the oracle's p0, v0 and noise variance" if args.oracle else "everything learned"
            print(f"\n{name}: {args.signals} signals, {n_rows} rows from nothing, {given} (noise variance {noise:g})")
            print("| rows | final error | minus random (+- s.e.) [design won] | final noise (within x3) "
                  "| smallest noise along the loop | smallest after the random start "
                  "| loops below truth/3 (/10) after it | fits not converged | CPU s |\n"
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|")
            for (strategy, start), res in results.items():
                res = np.array(res)
                diff = res[:, 0] - random[:, 0]
                within = np.sum((res[:, 1] > noise / 3) & (res[:, 1] < noise * 3))
                versus = "" if strategy == "random" else \
                    f"{diff.mean():+.3f} +- {diff.std(ddof=1) / np.sqrt(len(diff)):.3f} [{np.sum(diff < 0)}]"
                label = "random" if strategy == "random" else f"designed, random start {start}"
                print(f"| {label} | {res[:, 0].mean():.3f} | {versus} | {res[:, 1].min():.3g}-{res[:, 1].max():.3g} "
                      f"({within}) | {res[:, 2].min():.3g} | {res[:, 7].min():.3g} | {int(res[:, 5].sum())} "
                      f"({int(res[:, 6].sum())}) | {res[:, 4].mean():.1%} "
                      f"| {res[:, 3].mean():.1f} |")


if __name__ == "__main__":
    main()
