"""The block-diagonal line posterior against the dense one at a size the tests cannot afford (issue 48, point 1).

A spike-and-slab fit of ``LineSpikeSlab`` (p0 and v0 given, EP run to its strict fixed-point test) on the
block-diagonal path (nx independent blocks) and on the dense path (one ``2 m nx x 2 ny nx`` matrix through the
general GSS-EP engine) of the same random sparse image: the largest difference of the posterior means relative to
their largest entry, of the log evidence, of the posterior variances, and the CPU of each path. The tests do this
at 16 x 16 and 32 x 32 (``tests/test_mri_lines.py``).

Run: ``OPENBLAS_NUM_THREADS=1 python benchmarks/bench_mri_dense.py --size 64 --lines 8`` (CPU time; the dense
path costs minutes at 64 x 64). Never asserts on time; exits 1 if the two paths differ by more than 1e-8.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from threadpoolctl import threadpool_limits

from adaptcs.bases.separable import SeparableWavelet, to_kspace
from adaptcs.models.line_spike_slab import LineSpikeSlab


def sparse_acquisition(n: int, seed: int = 3, noise: float = 0.05):
    """A random complex image sparse in a Haar basis (15 % of the coefficients on, the coarsest block always),
    its noisy centred k-space and the noise variance per complex sample."""
    rng = np.random.default_rng(seed)

    def complex_normal(shape):
        return rng.normal(size=shape) + 1j * rng.normal(size=shape)

    basis = SeparableWavelet((n, n), "haar", 2)
    C = np.where(rng.random((n, n)) < 0.15, complex_normal((n, n)), 0.0)
    C[: n // 4, : n // 4] = complex_normal((n // 4, n // 4)) * 3
    return basis, to_kspace(basis.inverse(C)) + noise * complex_normal((n, n)), 2 * noise**2


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--lines", type=int, default=8, help="random lines measured")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    basis, K, noise_var = sparse_acquisition(args.size)
    lines = np.sort(np.random.default_rng(args.seed).choice(args.size, args.lines, replace=False))
    fits, cpu, variances = {}, {}, {}
    with threadpool_limits(1):
        for name, dense in (("block", False), ("dense", True)):
            model = LineSpikeSlab(basis, noise_var=noise_var, p0=0.5, v0=1.0, learn=(), dense_rows=dense)
            started = time.process_time()
            fits[name] = model.fit(K[lines], lines)
            cpu[name] = time.process_time() - started
            variances[name] = model._run.post.var * model._scale**2
            print(f"{name}: converged {fits[name].converged_} after {fits[name].n_iter_} EP iterations, "
                  f"{cpu[name]:.1f} CPU s", flush=True)
    block, dense = fits["block"], fits["dense"]
    mean_diff = float(np.max(np.abs(block.coef_ - dense.coef_)) / np.max(np.abs(dense.coef_)))
    var_diff = float(np.max(np.abs(variances["block"] - variances["dense"])) / np.max(variances["dense"]))
    evidence_diff = abs(block.log_evidence_ - dense.log_evidence_) / abs(dense.log_evidence_)
    print(f"{args.size} x {args.size}, {args.lines} lines ({lines.tolist()}), d = {2 * args.size**2} real unknowns, "
          f"n = {2 * args.lines * args.size} real rows: max |mean difference| / max |mean| = {mean_diff:.2e}, "
          f"max |variance difference| / max variance = {var_diff:.2e}, relative log-evidence difference = "
          f"{evidence_diff:.2e}; CPU dense / block = {cpu['dense'] / cpu['block']:.0f}")
    same = block.converged_ and dense.converged_ and max(mean_diff, var_diff, evidence_diff) <= 1e-8
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
