"""CPU and wall time of a GSS-EP fit with one and two BLAS threads (threadpoolctl), twice each in one process;
and the CPU time of every method's fit on E1 under the package's BLAS rule (one thread) against the same fit
with the process's default threads (``--methods``).

Run it on an idle machine and again beside another busy process (for example
``python -c "while True: pass" &``) to see what more threads cost on a shared machine. Never asserts on time.
The fits use ``blas_threads=None``, so that the limit set around them applies.

Run: ``python benchmarks/bench_blas_threads.py`` (about a minute; ``--methods`` adds the E1 comparison, run it
without OPENBLAS_NUM_THREADS so that the default is the machine's).
"""

from __future__ import annotations

import sys
import time
import warnings

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

from adaptcs.models import GroupSpikeSlabEP

SIZES = ((64, 512), (288, 784), (512, 4096))


def problem(n: int, d: int, rng) -> tuple:
    """A group-sparse problem: groups of 4, 1/8 of them active, unit noise."""
    groups = np.repeat(np.arange(d // 4), 4)
    X = rng.normal(size=(n, d))
    w = np.where(groups < d // 32, rng.normal(size=d), 0.0)
    return groups, X, X @ w + rng.normal(size=n)


def every_method(replicates: int = 5) -> None:
    """Each method's fit on E1 (oracle hyper-parameters): CPU s under the rule and with the default threads (the
    unwrapped fit), in alternating order after one untimed fit, in this process."""
    from adaptcs.experiments import case_estimator
    from adaptcs.experiments.synthetic import synthetic_case
    from adaptcs.models.registry import METHODS

    default = max(p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas")
    print(f"E1, {replicates} signals, oracle values: CPU s per fit, one BLAS thread (the rule) against the "
          f"default ({default} threads)", flush=True)
    for method in (m for m in METHODS if not METHODS[m].scans_only):
        ruled = free = 0.0
        warm = synthetic_case("E1", 0, 0)
        case_estimator(method, warm).fit(warm.problem.X, warm.problem.y)  # compilation and caches, untimed
        for replicate in range(replicates):
            case = synthetic_case("E1", 0, replicate)
            X, y = case.problem.X, case.problem.y
            for limited in ((True, False) if replicate % 2 else (False, True)):
                est = case_estimator(method, case)
                started = time.process_time()
                if limited:
                    est.fit(X, y)
                    ruled += time.process_time() - started
                else:
                    type(est).fit.__wrapped__(est, X, y)
                    free += time.process_time() - started
        print(f"| {method} | {ruled / replicates:.3f} | {free / replicates:.3f} | {free / ruled:.2f} |", flush=True)


def main() -> None:
    if "--methods" in sys.argv[1:]:
        warnings.simplefilter("ignore")
        every_method()
        return
    warnings.simplefilter("ignore")  # 30 iterations at tol 1e-12: every fit warns that it did not converge
    rng = np.random.default_rng(0)
    for n, d in SIZES:
        groups, X, y = problem(n, d, rng)
        cells = []
        for threads in (1, 2, 1, 2):
            with threadpool_limits(threads, user_api="blas"):
                est = GroupSpikeSlabEP(groups, p0=1 / 8, v0=1.0, noise_var=1.0, max_iter=30, tol=1e-12,
                                       blas_threads=None)
                cpu, wall = time.process_time(), time.perf_counter()
                for _ in range(3 if n < 512 else 1):
                    est.fit(X, y)
                cells.append(f"{threads} thread(s): {time.process_time() - cpu:.2f} CPU s, "
                             f"{time.perf_counter() - wall:.2f} wall s")
        print(f"n={n}, d={d}: " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
