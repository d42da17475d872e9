"""The shapes example (``examples/shapes``) in pixels and in a Haar basis: which strategy's rows pay off.

Six 16 x 16 shapes, 32 random rows then 48 rows by each strategy, hyper-parameters learned, as
``config/user-example.yaml`` runs them: GSS-EP in pixels with the example's similarity groups (design, random),
and ``gss_ep_scales`` in a Haar basis (``data.basis: haar``; design, random, top-down, prediction). Prints the
final relative error per image, the mean, the paired difference design minus each other strategy with the number
of images where design won, CPU seconds per job and the refits not converged.

Run: ``OPENBLAS_NUM_THREADS=1 python benchmarks/bench_shapes_basis.py`` (about 80 CPU s).
"""

from __future__ import annotations

import time
import warnings

import numpy as np
from threadpoolctl import threadpool_limits

from adaptcs.experiments import run_job

BASE = {"kind": "user", "images": "examples/shapes/images", "side": 16, "noise_var": 1e-4, "n_initial": 32}
RUNS = (("pixels", "gss_ep", {**BASE, "groups": {"similarity": "examples/shapes/grouping", "size": 4}},
         ("design", "random")),
        ("haar", "gss_ep_scales", {**BASE, "basis": "haar"}, ("design", "random", "topdown", "predict")))


def main() -> None:
    warnings.simplefilter("ignore")  # convergence is counted in the table
    print("| domain | method | strategy | final errors (6 images) | mean | CPU s | refits not converged |")
    print("|---|---|---|---|---:|---:|---:|")
    paired = []
    with threadpool_limits(1):
        for domain, method, options, strategies in RUNS:
            final = {}
            for strategy in strategies:
                started = time.process_time()
                result = run_job("shapes", 0, method, strategy, range(6), n_steps=48, data_options=options,
                                 hyperparameters="learned")
                final[strategy] = result.errors[:, -1]
                unconverged = int(np.sum(result.converged == 0))
                print(f"| {domain} | {method} | {strategy} | {' '.join(f'{e:.3f}' for e in final[strategy])} | "
                      f"{final[strategy].mean():.4f} | {time.process_time() - started:.1f} | {unconverged} of "
                      f"{int(np.sum(result.converged >= 0))} |", flush=True)
            for other in strategies[1:]:
                diff = final["design"] - final[other]
                error = diff.std(ddof=1) / np.sqrt(diff.size)
                paired.append(f"| {domain} | {other} | {diff.mean():+.4f} +- {error:.4f} | "
                              f"{int(np.sum(diff < 0))}/{diff.size} |")
    print("\nPaired: design minus the other strategy, final relative error, mean +- s.e.\n")
    print("| domain | versus | difference | design won |\n|---|---|---:|---:|")
    print("\n".join(paired))


if __name__ == "__main__":
    main()
