"""E7's digits at 32 x 32 with a prior per wavelet scale: designed rows against random, top-down, PCA and the
prediction scan.

Eight digit-3 MNIST images (embedded subset), Haar basis, ``gss_ep_scales`` with every hyper-parameter learned,
E7's protocol (d/16 random rows, then 48 steps of d/256 rows to d/4), the same images, initial rows and noise for
every strategy (``run_job``). Prints the mean relative error at n = d/8 and d/4 per strategy with its CPU seconds,
and the paired differences design minus each other strategy (mean +- s.e. [images where design won]).

Run: ``OPENBLAS_NUM_THREADS=1 python benchmarks/bench_e7_digits_scales.py`` (about 14 CPU minutes).
"""

from __future__ import annotations

import time
import warnings

import numpy as np
from threadpoolctl import threadpool_limits

from adaptcs.experiments import run_job
from adaptcs.experiments.wavelet import E7

STRATEGIES = ("design", "random", "topdown", "pca", "predict")
IMAGES = 8


def main() -> None:
    warnings.simplefilter("ignore")
    setting = next(i for i, s in enumerate(E7.settings) if s == {"images": "mnist", "side": 32})
    errors = {}
    print("| strategy | d/8 | d/4 | CPU s |\n|---|---:|---:|---:|")
    with threadpool_limits(1):
        for strategy in STRATEGIES:
            started = time.process_time()
            result = run_job("E7", setting, "gss_ep_scales", strategy, range(IMAGES), hyperparameters="learned")
            n = np.asarray(result.n_measurements)
            columns = [int(np.argmin(np.abs(n - 1024 // k))) for k in (8, 4)]
            errors[strategy] = result.errors[:, columns]
            mean = errors[strategy].mean(axis=0)
            print(f"| {strategy} | {mean[0]:.4f} | {mean[1]:.4f} | {time.process_time() - started:.0f} |",
                  flush=True)
    print("\n| design minus | d/8 | d/4 |\n|---|---:|---:|")
    for other in STRATEGIES[1:]:
        diff = errors["design"] - errors[other]
        cells = [f"{diff[:, k].mean():+.4f} +- {diff[:, k].std(ddof=1) / np.sqrt(IMAGES):.4f} "
                 f"[{int(np.sum(diff[:, k] < 0))}/{IMAGES}]" for k in (0, 1)]
        print(f"| {other} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
