"""Speed of the eigenvalues-and-weights decomposition the Gaussian line models learn their scale by
(:func:`adaptcs.models._spectral.spectral_weights`: a reflection, a tridiagonal reduction, the tridiagonal
eigenproblem; no eigenvectors formed) against ``numpy.linalg.eigh`` with its eigenvectors, then ``(U^T y)^2`` (what
the models did before), timed in one process on the per-column sizes of the coil line model (``2 ny``: 256 at 128 x
128, 512 at 256 x 256) and of the single-coil model (``2 m``).

Run: ``OPENBLAS_NUM_THREADS=1 python benchmarks/bench_spectral.py`` (half a minute). CPU seconds
(``time.process_time``) per matrix, the smallest of ``--repeats``; prints a Markdown table, never asserts on time.
"""

from __future__ import annotations

import argparse
import platform

import numpy as np
from bench_blocks import smallest_cpu
from threadpoolctl import threadpool_limits

from adaptcs.models._spectral import spectral_weights

#: (matrices, n, rank): the coil model's columns at 128 and 256 (full rank and, with few lines, rank deficient),
#: the single-coil model's data space at 32 lines
SIZES = [(16, 64, 64), (16, 256, 256), (16, 256, 96), (8, 512, 512), (8, 512, 256)]


def eigh_weights(A, y):
    """The reference: every eigenvector, then the squared projections."""
    w, U = np.linalg.eigh(A)
    return w, np.einsum("kab,ka->kb", U, y) ** 2


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"machine: {platform.processor() or platform.machine()}, one BLAS thread, CPU ms per matrix (smallest of "
          f"{args.repeats})\n")
    print("| n | rank | spectral_weights (ms) | eigh + projections (ms) | ratio | max rel. diff. of sum rho/(1+w) |")
    print("|---|---|---|---|---|---|")
    with threadpool_limits(1):
        for k, n, rank in SIZES:
            X = rng.standard_normal((k, n, rank)) * np.logspace(0, -4, rank)
            A = X @ X.transpose(0, 2, 1)
            y = np.einsum("kab,kb->ka", X, rng.standard_normal((k, rank)))
            new = smallest_cpu(lambda: spectral_weights(A, y), args.repeats) / k  # noqa: B023
            old = smallest_cpu(lambda: eigh_weights(A, y), args.repeats) / k  # noqa: B023
            (w, rho), (w_ref, rho_ref) = spectral_weights(A, y), eigh_weights(A, y)
            diff = np.max(np.abs(np.sum(rho / (1 + w), 1) - np.sum(rho_ref / (1 + w_ref), 1)) / np.sum(rho_ref, 1))
            print(f"| {n} | {rank} | {1e3 * new:.1f} | {1e3 * old:.1f} | {new / old:.2f} | {diff:.1e} |")


if __name__ == "__main__":
    main()
