"""MNIST experiments E4 and E5 (docs/experiments.md) on one digit, outside the workflow.

E4: ``--images`` images (default 100) reconstructed from 288 random rows; prints mean +- std of the relative
error, PSNR, SSIM and the median fit time at n = 288, d = 784. E5: ``--design-images`` images (default 8)
measured from 128 to 288 rows with designed and with random rows; prints the mean error curve.
``--methods gss_ep g_lasso --hyperparameters oracle learned`` compares the paper's oracle values with values
learned from the measurements (G-LASSO's oracle is the k chosen per digit on the digit's grouping images).

Run: ``python benchmarks/reproduce_mnist.py --digit 3`` (embedded data; ``--source auto`` for the official
files). One BLAS thread, as in the workflow's jobs.
"""

from __future__ import annotations

import argparse

import numpy as np
from threadpoolctl import threadpool_limits

from adaptcs.experiments import run_job


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--digit", type=int, default=3)
    parser.add_argument("--images", type=int, default=100)
    parser.add_argument("--design-images", type=int, default=8)
    parser.add_argument("--methods", nargs="*", default=["gss_ep"])
    parser.add_argument("--source", default="embedded")
    parser.add_argument("--skip", choices=["E4", "E5"], default=None)
    parser.add_argument("--hyperparameters", nargs="*", default=["oracle"], choices=["oracle", "learned"],
                        help="the paper's oracle values and/or learned from the measurements (default: oracle)")
    args = parser.parse_args()
    options = {"source": args.source}
    with threadpool_limits(1):
        if args.skip != "E4":
            print(f"E4, digit {args.digit}, {args.images} images, n=288 ({args.source} data)")
            print("| method | hyper-parameters | error (mean +- std) | PSNR dB | SSIM | median s / fit | "
                  "not converged |")
            print("|---|---|---|---:|---:|---:|---:|")
            for method in args.methods:
                for hyper in args.hyperparameters:
                    job = run_job("E4", args.digit, method, "random", range(args.images), data_options=options,
                                  hyperparameters=hyper)
                    e = job.errors[:, -1]
                    calibrated = "g_lasso_k_errors" in job.config
                    chosen = f" (k = {job.config['method_params']['k']:.3g})" if calibrated else ""
                    print(f"| {method} | {hyper}{chosen} | {e.mean():.3f} +- {e.std():.3f} | {job.psnr.mean():.1f} | "
                          f"{job.ssim.mean():.3f} | {np.median(job.fit_seconds):.3f} | "
                          f"{int(np.sum(job.converged[:, -1] == 0))} of {e.size} |", flush=True)
        if args.skip != "E5":
            print(f"\nE5, digit {args.digit}, {args.design_images} images, mean error from 128 to 288 rows")
            marks = [128, 160, 192, 224, 256, 288]
            print("| method | strategy | " + " | ".join(f"n={m}" for m in marks) + " | s / image |")
            print("|---|---|" + "---:|" * (len(marks) + 1))
            for method in args.methods:
                for strategy in ("design", "random"):
                    job = run_job("E5", args.digit, method, strategy, range(args.design_images), data_options=options)
                    mean = job.errors.mean(axis=0)
                    cols = [mean[list(job.n_measurements).index(m)] for m in marks]
                    seconds = (job.fit_seconds.sum(axis=1) + job.select_seconds.sum(axis=1)).mean()
                    print(f"| {method} | {strategy} | " + " | ".join(f"{c:.3f}" for c in cols) + f" | {seconds:.0f} |",
                          flush=True)


if __name__ == "__main__":
    main()
