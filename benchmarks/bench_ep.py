"""Speed of the GSS-EP engine: time per iteration, time per fit, and an iteration's cost relative to
one ``(X * l) @ X.T`` product (the O(n^2 d) kernel every iteration needs) timed in the same process.

Run: ``python benchmarks/bench_ep.py`` (add ``--threads 1`` for single-threaded BLAS, ``--sizes 64x512`` to
pick sizes). Prints a Markdown table; never asserts on time.
"""

from __future__ import annotations

import argparse
import platform
import time
import warnings

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

from adaptcs.data.synthetic import group_labels, group_sparse_signal
from adaptcs.measurement import sphere_rows
from adaptcs.models import GroupSpikeSlabEP

DEFAULT_SIZES = [(64, 512), (288, 784), (1000, 16384)]
GROUP_SIZE = 4
ACTIVE_FRACTION = 4 / 128  # as in experiment E1


def best_of(fn, repeats: int) -> float:
    """Smallest wall time of ``repeats`` calls, in seconds."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def make_problem(n: int, d: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    groups = group_labels(d, d // GROUP_SIZE)
    n_active = max(1, round(ACTIVE_FRACTION * d / GROUP_SIZE))
    w = group_sparse_signal(rng, groups, n_active)
    X = sphere_rows(rng, n, d)
    y = X @ w + rng.normal(size=n)
    return X, y, groups, n_active / (d // GROUP_SIZE), w


def bench_size(n: int, d: int, repeats: int) -> dict:
    X, y, groups, p0, w = make_problem(n, d)
    estimator = GroupSpikeSlabEP(groups, p0=p0, v0=1 / 3, noise_var=1.0)

    def fit_capped(n_iter: int):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # capped fits do not converge, by design
            estimator.set_params(max_iter=n_iter, tol=1e-300).fit(X, y)

    # Iteration cost as a difference of two capped fits, so set-up and the final evidence cancel out.
    few, many = 2, 12
    t_few = best_of(lambda: fit_capped(few), repeats)
    t_many = best_of(lambda: fit_capped(many), repeats)
    per_iter = (t_many - t_few) / (many - few)

    estimator.set_params(max_iter=1000, tol=1e-4)
    t_fit = best_of(lambda: estimator.fit(X, y), repeats)
    n_iter = estimator.n_iter_
    error = np.linalg.norm(estimator.coef_ - w) / np.linalg.norm(w)

    lam = np.random.default_rng(1).uniform(0.1, 1.0, d)
    t_gemm = best_of(lambda: (X * lam) @ X.T, repeats)
    return dict(n=n, d=d, per_iter=per_iter, fit=t_fit, n_iter=n_iter, gemm=t_gemm, error=error)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="*", default=[f"{n}x{d}" for n, d in DEFAULT_SIZES],
                        help="problem sizes as NxD (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=None, help="BLAS threads (default: as the library sets)")
    parser.add_argument("--repeats", type=int, default=3, help="best of this many timings (default: 3)")
    args = parser.parse_args()
    sizes = [tuple(int(v) for v in s.lower().split("x")) for s in args.sizes]

    with threadpool_limits(args.threads):
        blas = [(i["internal_api"], i.get("version"), i["num_threads"], i.get("architecture"))
                for i in threadpool_info() if i["user_api"] == "blas"]
        print(f"machine: {platform.processor() or platform.machine()}, python {platform.python_version()}, "
              f"numpy {np.__version__}, BLAS {blas}")
        print()
        print("| n | d | ms / iteration | (X*l)@X.T ms | iteration / product | iterations | ms / fit | error |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|")
        for n, d in sizes:
            r = bench_size(n, d, args.repeats)
            print(f"| {r['n']} | {r['d']} | {1e3 * r['per_iter']:.3f} | {1e3 * r['gemm']:.3f} | "
                  f"{r['per_iter'] / r['gemm']:.2f} | {r['n_iter']} | {1e3 * r['fit']:.1f} | {r['error']:.3f} |",
                  flush=True)


if __name__ == "__main__":
    main()
