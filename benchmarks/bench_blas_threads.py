"""CPU and wall time of a GSS-EP fit with one and two BLAS threads (threadpoolctl), twice each in one process.

Run it on an idle machine and again beside another busy process (for example
``python -c "while True: pass" &``) to see what more threads cost on a shared machine. Never asserts on time.
The fits use ``blas_threads=None``, so that the limit set around them applies.

Run: ``python benchmarks/bench_blas_threads.py`` (about a minute).
"""

from __future__ import annotations

import time
import warnings

import numpy as np
from threadpoolctl import threadpool_limits

from adaptcs.models import GroupSpikeSlabEP

SIZES = ((64, 512), (288, 784), (512, 4096))


def problem(n: int, d: int, rng) -> tuple:
    """A group-sparse problem: groups of 4, 1/8 of them active, unit noise."""
    groups = np.repeat(np.arange(d // 4), 4)
    X = rng.normal(size=(n, d))
    w = np.where(groups < d // 32, rng.normal(size=d), 0.0)
    return groups, X, X @ w + rng.normal(size=n)


def main() -> None:
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
