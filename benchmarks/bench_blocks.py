"""Speed of the block-diagonal posterior (:mod:`adaptcs.models._blocks`), the kernel of every EP iteration on
k-space lines: one factorisation of all B blocks, at the sizes the MRI line fits have (B columns of b = 2 ny
coefficients, r = 2 x lines real rows), against the same factorisation with the triangular factors inverted as
general matrices (``np.linalg.inv``, what it did before), timed in one process.

Run: ``OPENBLAS_NUM_THREADS=1 python benchmarks/bench_blocks.py`` (a minute). CPU seconds (``time.process_time``),
the smallest of ``--repeats``; prints a Markdown table, never asserts on time.
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np
from threadpoolctl import threadpool_limits

from adaptcs.models._blocks import BlockGaussianModel, BlockRows, _factorise

#: (B, r, b): 128 x 128 at 16 and 32 lines, 256 x 256 at 32 and 64 lines
SIZES = [(128, 32, 256), (128, 64, 256), (256, 64, 512), (256, 128, 512)]


def factorise_general_inverse(stacked, block_prior_var, s2):
    """The factorisation with ``C_q^{-1}`` by ``np.linalg.inv`` (LU of a general matrix): the reference."""
    r = stacked.shape[1]
    sqrt_l = np.sqrt(block_prior_var)
    scaled = stacked * sqrt_l[:, None, :]
    K = np.matmul(scaled, scaled.transpose(0, 2, 1))
    K[:, np.arange(r), np.arange(r)] += s2
    chol = np.linalg.cholesky(K)
    chol_inv = np.linalg.inv(chol)
    return chol, chol_inv, np.matmul(chol_inv, scaled) * sqrt_l[:, None, :]


def smallest_cpu(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.process_time()
        fn()
        times.append(time.process_time() - started)
    return min(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"machine: {platform.processor() or platform.machine()}, one BLAS thread, CPU seconds (smallest of "
          f"{args.repeats})\n")
    print("| B | r | b | factorisation (s) | with np.linalg.inv (s) | ratio | max abs difference of G |")
    print("|---|---|---|---|---|---|---|")
    with threadpool_limits(1):
        for B, r, b in SIZES:
            stacked = rng.standard_normal((B, r, b))
            prior_var = rng.uniform(0.1, 2.0, (B, b))
            new = smallest_cpu(lambda: _factorise(stacked, prior_var, 0.5), args.repeats)  # noqa: B023
            old = smallest_cpu(lambda: factorise_general_inverse(stacked, prior_var, 0.5), args.repeats)  # noqa: B023
            diff = np.max(np.abs(_factorise(stacked, prior_var, 0.5)[2]
                                 - factorise_general_inverse(stacked, prior_var, 0.5)[2]))
            print(f"| {B} | {r} | {b} | {new:.3f} | {old:.3f} | {new / old:.2f} | {diff:.1e} |")
        # one whole posterior (the factorisation, the variances and the mean) at the largest size
        B, r, b = SIZES[-1]
        model = BlockGaussianModel(BlockRows(rng.standard_normal((B, r, b))), rng.standard_normal(B * r), 0.5)
        prior_var, shift = rng.uniform(0.1, 2.0, B * b), np.zeros(B * b)
        whole = smallest_cpu(lambda: model.posterior(prior_var, shift), args.repeats)
        print(f"\none whole posterior at B = {B}, r = {r}, b = {b}: {whole:.3f} CPU s")


if __name__ == "__main__":
    main()
