"""How well do a learned design loop's first rows determine the noise variance? (issue 47; docs/learning.md)

Runs the learned ask/tell loops of ``bench_design_start.py``'s E3 problem (d = 512, 128 groups of 4, 4 active,
noise variance 1, 64 rows; designed rows after the random start of ``ceil(d / 16)`` = 32 rows, GSS-EP learning p0,
v0 and the noise variance with the shipped weak priors) and profiles the learning objective over the noise
variance: on a grid of noise variances (multiples of the truth) GSS-EP is fitted with the noise variance given and
p0 and v0 learned, each fit from scratch, and the objective at its end is printed.

* At the end of the random start, for every loop: the EP log evidence (type-II ML: the values learned there are the
  centres of the weak priors used for the rest of the loop).
* For every loop whose learned noise variance falls below a tenth of the truth after the random start, at the refit
  where it is smallest: the evidence plus the log prior of that refit's weak priors, and the loop's own point
  (warm-started, tracked) against a learned fit from scratch on the same rows.

If the profile is flat (a few tenths of a nat over a factor 30 of noise variance) the rows do not determine the noise
variance, and where it ends is decided by the prior's centre and by which EP fixed point the loop sits in, not by the
data. Everything is simulated.

Run: ``OPENBLAS_NUM_THREADS=1 python docs/log/investigations/bench_noise_identifiability.py --signals 20`` (about 6
CPU minutes).
Never asserts on time.
"""

from __future__ import annotations

import argparse
import copy
import sys
import warnings
from pathlib import Path

import numpy as np
from scipy.special import logit
from threadpoolctl import threadpool_limits

from adaptcs.design import SequentialDesigner
from adaptcs.metrics import relative_error
from adaptcs.models import GroupSpikeSlabEP, Hyperprior

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))  # the benchmark it builds on
from bench_design_start import LEARN, e3_problem  # noqa: E402

GRID = (0.03, 0.1, 0.3, 1.0, 3.0)  # noise variances, as multiples of the truth


def log_prior(hyperprior: Hyperprior | None, noise_var: float, p0: float, v0: float) -> float:
    """The weak priors' log density (up to a constant) at one value each: normals in log s2, log v0 and logit p0.

    :meth:`adaptcs.models.Hyperprior.log_density` for one prior class without offsets (the E3 problem), written from
    a fitted estimator's values, which is all a benchmark sees of a fit."""
    if hyperprior is None:
        return 0.0
    terms = [(np.log(noise_var), hyperprior.noise_var, np.log), (np.log(v0), hyperprior.v0, np.log),
             (logit(p0), hyperprior.p0, logit)]
    return float(sum(-0.5 * hyperprior.precision * (value - transform(float(np.mean(centre)))) ** 2
                     for value, centre, transform in terms if centre is not None))


def objective(est, hyperprior: Hyperprior | None) -> float:
    """EP log evidence plus the log prior at a fitted GSS-EP's values (one p0 and one v0)."""
    return est.log_evidence_ + log_prior(hyperprior, est.noise_var_, float(est.p0_), float(est.v0_))


def profile(groups, A, y, w, noise: float, hyperprior: Hyperprior | None) -> list[tuple[float, float, float]]:
    """(noise variance / truth, objective, relative error) on :data:`GRID`, p0 and v0 learned at each."""
    rows = []
    for factor in GRID:
        est = GroupSpikeSlabEP(groups, learn=("p0", "v0"), noise_var=factor * noise, hyperprior=hyperprior).fit(A, y)
        rows.append((factor, objective(est, hyperprior), relative_error(est.coef_, w)))
    return rows


def run_loop(r: int):
    """One learned designed loop of signal r: (problem, rows and values at the end of the random start, the refit
    where the noise variance is smallest after it, or None if it never falls below a tenth of the truth)."""
    groups, w, noise, n_rows, _ = e3_problem(r)
    draws = np.random.default_rng([1000 + r, 1]).normal(0.0, np.sqrt(noise), n_rows)
    designer = SequentialDesigner(GroupSpikeSlabEP(groups, learn=LEARN), strategy="design", rng=1000 + r,
                                  n_random_start="auto")
    random_start = int(np.ceil(w.shape[0] / 16))
    at_start, lowest = None, None
    for i in range(n_rows):
        row = designer.ask()
        designer.tell(row, row @ w + draws[i])
        est = designer.estimator_
        if i + 1 == random_start:
            at_start = (designer.X_.copy(), designer.y_.copy())
        if i >= random_start and est.noise_var_ < noise / 10 and (lowest is None or est.noise_var_ < lowest[0]):
            lowest = (est.noise_var_, designer.X_.copy(), designer.y_.copy(), copy.deepcopy(est))
    return (groups, w, noise), at_start, lowest


def spread(rows) -> float:
    """Largest minus smallest objective on the grid from 0.03 to 1 times the truth (nats)."""
    values = [value for factor, value, _ in rows if factor <= 1.0]
    return max(values) - min(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--signals", type=int, default=20)
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # convergence is printed where it matters
    header = " | ".join(f"{f:g}" for f in GRID)
    starts, lows = [], []
    with threadpool_limits(1):
        for r in range(args.signals):
            (groups, w, noise), (A, y), lowest = run_loop(r)
            rows = profile(groups, A, y, w, noise, None)
            starts.append(spread(rows))
            print(f"signal {r}, end of the random start ({A.shape[0]} rows), log evidence at s2 / truth = {header}: "
                  + " | ".join(f"{v:.2f}" for _, v, _ in rows) + f"; spread over 0.03-1: {starts[-1]:.2f} nats",
                  flush=True)
            if lowest is None:
                continue
            noise_var, A, y, est = lowest
            hyperprior = est.hyperprior if isinstance(est.hyperprior, Hyperprior) else None
            cold = GroupSpikeSlabEP(groups, learn=LEARN, hyperprior=hyperprior).fit(A, y)
            rows = profile(groups, A, y, w, noise, hyperprior)
            lows.append(spread(rows))
            centre = "none" if hyperprior is None else f"{hyperprior.noise_var:.3g}"
            print(f"  below a tenth at {A.shape[0]} rows: the loop's s2 {noise_var:.3g} (prior centre {centre}), "
                  f"objective {objective(est, hyperprior):.2f}, error {relative_error(est.coef_, w):.3f}, converged "
                  f"{est.converged_}; learned from scratch: s2 {cold.noise_var_:.3g}, objective "
                  f"{objective(cold, hyperprior):.2f}, error {relative_error(cold.coef_, w):.3f}")
            print("  evidence + log prior at s2 / truth = " + header + ": "
                  + " | ".join(f"{v:.2f} (error {e:.3f})" for _, v, e in rows) + f"; spread {lows[-1]:.2f} nats",
                  flush=True)
    starts = np.array(starts)
    print(f"\nEnd of the random start, {len(starts)} loops: log evidence spread over s2 from 0.03 to 1 times the truth "
          f"(p0, v0 learned at each): median {np.median(starts):.2f} nats, range {starts.min():.2f}-{starts.max():.2f}"
          f"; below 1 nat in {int(np.sum(starts < 1))}.")
    print(f"Loops below a tenth of the truth after the random start: {len(lows)}"
          + (f"; their objective's spread at the lowest refit: {', '.join(f'{s:.2f}' for s in lows)} nats" if lows
             else ""))


if __name__ == "__main__":
    main()
