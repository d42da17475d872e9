"""E7 at scale: GSS-EP on images of d = 1024, 4096 and 16384 pixels (32 x 32 to 128 x 128), never a d x d matrix.

1. For each d: time per EP iteration against one ``(X * l) @ X.T`` product (the O(n^2 d) kernel of an
   iteration) in the same process, with that product's flop count (2 n^2 d) and rate; n = min(d / 4, 1024).
2. E7 at 64 x 64 (d = 4096): one designed step (warm refit with learned hyper-parameters, then the next 16
   designed rows) at n = 256, 512 and 1024 rows of the first natural image, and the process's peak memory.

Run: ``python benchmarks/bench_e7_scale.py`` (``--threads 1`` for one BLAS thread, ``--dims 1024 4096`` to skip
the largest). Prints Markdown tables; never asserts on time.
"""

from __future__ import annotations

import argparse
import platform
import resource
import time
import warnings

import numpy as np
from bench_ep import bench_size
from threadpoolctl import threadpool_info, threadpool_limits

from adaptcs.design import SequentialDesigner
from adaptcs.experiments import case_estimator
from adaptcs.experiments.wavelet import E7, wavelet_case


def peak_memory_mb() -> float:
    """Peak resident memory of this process so far (Linux reports kilobytes)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def design_step_64(n: int, setting_index: int = 2) -> dict:
    """One designed step of E7 at 64 x 64 once ``n`` rows are measured: fit (cold, then the warm refit after the
    step's rows, the one a running loop pays) and the selection of the step's rows."""
    case, basis = wavelet_case(setting_index, 0)
    p = case.problem
    rng = np.random.default_rng(0)
    X = np.vstack([p.X, rng.normal(size=(n - p.X.shape[0], basis.d))])
    X *= np.sqrt(basis.d) / np.linalg.norm(X, axis=1, keepdims=True)
    y = X @ p.w_true + rng.normal(0.0, np.sqrt(E7.noise_var), size=n)
    designer = SequentialDesigner(case_estimator("gss_ep", case, hyperparameters="learned"), strategy="design",
                                  batch_size=E7.batch_size(setting_index), basis=basis, rng=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        designer.tell(X, y)
        cold = time.perf_counter() - start
        start = time.perf_counter()
        rows = designer.ask()
        select = time.perf_counter() - start
        start = time.perf_counter()
        designer.tell(rows, rows @ p.w_true + rng.normal(0.0, np.sqrt(E7.noise_var), size=rows.shape[0]))
        warm = time.perf_counter() - start
    told = designer.last_fit
    return dict(n=n, cold=cold, warm=warm, select=select, n_iter=told.n_iter, converged=told.converged,
                error=np.linalg.norm(designer.reconstruction() - p.w_true) / np.linalg.norm(p.w_true))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dims", nargs="*", type=int, default=[1024, 4096, 16384])
    parser.add_argument("--rows", nargs="*", type=int, default=[256, 512, 1024], help="n for the 64 x 64 steps")
    parser.add_argument("--threads", type=int, default=None, help="BLAS threads (default: as the library sets)")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    with threadpool_limits(args.threads):
        blas = [(i["internal_api"], i.get("version"), i["num_threads"]) for i in threadpool_info()
                if i["user_api"] == "blas"]
        print(f"machine: {platform.processor() or platform.machine()}, python {platform.python_version()}, "
              f"numpy {np.__version__}, BLAS {blas}\n")
        print("| d | n | ms / EP iteration | (X*l)@X.T ms | iteration / product | product GFLOP | GFLOP/s | "
              "iterations | s / fit |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for d in args.dims:
            n = min(d // 4, 1024)
            r = bench_size(n, d, args.repeats)
            flops = 2.0 * n * n * d
            print(f"| {d} | {n} | {1e3 * r['per_iter']:.1f} | {1e3 * r['gemm']:.1f} | {r['per_iter'] / r['gemm']:.2f} "
                  f"| {flops / 1e9:.2f} | {flops / r['gemm'] / 1e9:.1f} | {r['n_iter']} | {r['fit']:.2f} |",
                  flush=True)
        print(f"\npeak memory after the sweep: {peak_memory_mb():.0f} MB (one {max(args.dims)}^2 matrix of doubles "
              f"would be {max(args.dims) ** 2 * 8 / 1e6:.0f} MB)\n")
        print("E7, 64 x 64 natural image, gss_ep+learned, design, 16 rows per step:\n")
        print("| n | cold fit s | warm refit s | EP iterations (warm) | converged | select s | step s | error |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|")
        for n in args.rows:
            r = design_step_64(n)
            print(f"| {r['n']} | {r['cold']:.2f} | {r['warm']:.2f} | {r['n_iter']} | {r['converged']} | "
                  f"{r['select']:.2f} | {r['warm'] + r['select']:.2f} | {r['error']:.3f} |", flush=True)
        print(f"\npeak memory: {peak_memory_mb():.0f} MB (a 4096^2 matrix of doubles is 134 MB)")


if __name__ == "__main__":
    main()
