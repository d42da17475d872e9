"""The gate of issue 47, point 2: does the variance-decoupled EP reach EP's fixed point on the warm refits that the
parallel schedule leaves circling, within 5 times the parallel run's CPU?

Captures, during designed loops with the paper's values (E3 signals and E5 images of digit 3; simulated data), the
warm refits that the shipped parallel schedule leaves not converged when the fallback is off (every ``--stride``-th
of them, so that they spread over the loops), and runs each again from the same warm sites:

- the parallel schedule alone (no fallback, what the capture saw);
- the shipped :func:`adaptcs.models._ep.run_ep`, whose fallback (:mod:`adaptcs.models._ep_fallback`: the
  variance-decoupled loop, then Anderson-accelerated EP; ``--decoupled-only``: the first alone, as the gate was first
  run) takes over where the parallel update stalls.

"Converged" is the library's strict test (an undamped parallel update from the result moves the mean by less than
``10 tol`` of the largest coefficient), judged independently here by :func:`undamped_check`. Prints per refit and a
summary: converged share, CPU ratio to the parallel run (median and largest), and how many reached the strict test
within 5x. One BLAS thread, CPU time. Never asserts on time.

Run: ``OPENBLAS_NUM_THREADS=1 python docs/log/investigations/bench_decoupled_ep.py --e3 30 --e5 2`` (about 10 minutes).
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from threadpoolctl import threadpool_limits

import adaptcs.models._ep as ep
from adaptcs.experiments import run_job
from adaptcs.models._ep_decoupled import decoupled_ep
from adaptcs.models._ep_fallback import stable_ep


def capture(experiment: str, setting: int, replicates: int, limit: int, stride: int) -> list[dict]:
    """Every ``stride``-th warm refit that the parallel schedule (no fallback) leaves not converged, at most
    ``limit``, from designed loops with the paper's values."""
    found, seen = [], [0]
    original = ep.run_ep

    def recording(problem, hyper, sites, **kw):
        problem.fallback = None
        start_sites = sites.copy()
        run = original(problem, hyper, sites, **kw)
        if kw.get("schedule") == "adaptive" and kw.get("adapt") is None and not run.converged:
            seen[0] += 1
            if seen[0] % stride == 0 and len(found) < limit:
                found.append(dict(problem=problem.rows(np.arange(problem.n)), hyper=hyper, sites=start_sites,
                                  kw=dict(kw), name=f"{experiment} n={problem.n}"))
        return run

    ep.run_ep = recording
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for r in range(replicates):
                run_job(experiment, setting, "gss_ep", "design", [r], hyperparameters="oracle")
                if len(found) >= limit:
                    break
    finally:
        ep.run_ep = original
    return found


def undamped_check(refit: dict, sites: ep.EPSites) -> ep.EPRun:
    """One undamped parallel update from ``sites``; its ``converged`` is the library's strict test."""
    p = refit["problem"]
    plain = p.rows(np.arange(p.n))
    plain.damping, plain.damping_decay, plain.fallback = 1.0, 1.0, None
    return ep.run_ep(plain, refit["hyper"], sites, tol=refit["kw"]["tol"], max_iter=1)


def timed_run(refit: dict, fallback) -> tuple[ep.EPRun, float]:
    refit["problem"].fallback = fallback
    start = time.process_time()
    run = ep.run_ep(refit["problem"], refit["hyper"], refit["sites"].copy(), **refit["kw"])
    return run, time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--e3", type=int, default=30, help="E3 signals to capture from")
    parser.add_argument("--e5", type=int, default=2, help="E5 images (digit 3) to capture from")
    parser.add_argument("--limit", type=int, default=30, help="refits per experiment at most")
    parser.add_argument("--stride", type=int, default=2, help="keep every stride-th refit not converged")
    parser.add_argument("--decoupled-only", action="store_true", help="the fallback without its Anderson stage")
    args = parser.parse_args()
    rows = []
    with threadpool_limits(1), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for experiment, count, setting in (("E3", args.e3, 0), ("E5", args.e5, 3)):
            if not count:
                continue
            refits = capture(experiment, setting, count, args.limit, args.stride)
            print(f"{experiment}: {len(refits)} refits captured", flush=True)
            for refit in refits:
                parallel, cpu_parallel = timed_run(refit, fallback=None)
                shipped, cpu_shipped = timed_run(refit, fallback=decoupled_ep if args.decoupled_only else stable_ep)
                check = undamped_check(refit, shipped.sites)
                ratio = cpu_shipped / cpu_parallel
                rows.append((experiment, check.converged, ratio, parallel.converged))
                print(f"  {refit['name']}: parallel {parallel.n_iter} it {cpu_parallel:.3f} s "
                      f"(converged {parallel.converged}); with the fallback {shipped.n_iter} it "
                      f"({shipped.n_fallback} in it) {cpu_shipped:.3f} s, strict test {check.converged} "
                      f"(residual {check.residual:.1e}), CPU x{ratio:.2f}", flush=True)
    for experiment in ("E3", "E5", "all"):
        part = [r for r in rows if experiment in ("all", r[0])]
        if not part:
            continue
        ok = np.array([r[1] for r in part])
        ratio = np.array([r[2] for r in part])
        print(f"{experiment}: {ok.sum()} of {ok.size} reach the strict test ({ok.mean():.0%}); within 5x the "
              f"parallel run's CPU: {np.sum(ok & (ratio <= 5))} ({np.mean(ok & (ratio <= 5)):.0%}); CPU ratio median "
              f"{np.median(ratio):.2f}, largest {ratio.max():.2f}")


if __name__ == "__main__":
    main()
