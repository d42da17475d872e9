"""What strictness is worth: a warm refit stopped before EP's fixed point against the fixed point (issue 47, point 1).

On the warm refits of the designed E3 loops (the paper's values) that the shipped schedule leaves not converged, the
fixed point is found by Newton's method on the fixed-point equations (``bench_convergent_ep.fixed_point_newton``;
kept only where the library's own test then passes). For each such refit:

(a) **the next row**: the row the design would choose from the stopped iterate (the leading eigenvector of its
    posterior covariance, at the norm of the loop's rows) keeps what fraction of the information gain
    ``1/2 log(1 + x^T V x / s2)`` of the fixed point's own best row, both under the fixed point's covariance V;
(b) **the estimate**: the posterior mean of the stopped iterate and of the fixed point against a long Gibbs run of
    the same model on the same data (``GroupSpikeSlabGibbs``, 11,000 sweeps, the first 1,000 discarded), as
    ``||m - m_gibbs|| / ||m_gibbs||``; a second Gibbs chain (another seed) gives the Monte Carlo floor.

Dense linear algebra on d = 512 (a measurement tool). Everything is simulated (E3's synthetic signals).

Run: ``OPENBLAS_NUM_THREADS=1 python docs/log/investigations/bench_stopped_refits.py --signals 20 --refits 40``
(about 30 CPU minutes). docs/log/convergence.md ("What a stopped refit costs") quotes its
numbers. Never asserts on time.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import scipy.linalg as sl
from scipy.special import expit
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_convergent_ep import capture, fixed_point_newton, undamped_check  # noqa: E402

from adaptcs.models import GroupSpikeSlabGibbs  # noqa: E402


def covariance(X: np.ndarray, noise_var: float, site_var: np.ndarray) -> np.ndarray:
    """The Gaussian approximation's covariance ``(X^T X / s2 + diag(1 / vt))^-1``, shape (d, d)."""
    precision = X.T @ X / noise_var + np.diag(1.0 / site_var)
    factor = sl.cho_factor(precision, lower=True)
    return sl.cho_solve(factor, np.eye(X.shape[1]))


def information_gain(row: np.ndarray, V: np.ndarray, noise_var: float) -> float:
    """``1/2 log(1 + x^T V x / s2)`` in nats."""
    return 0.5 * float(np.log1p(row @ V @ row / noise_var))


def best_row(V: np.ndarray, norm: float) -> np.ndarray:
    """The leading eigenvector of V at ``norm`` (the design's choice with rows on a sphere)."""
    return norm * sl.eigh(V, subset_by_index=[V.shape[0] - 1, V.shape[0] - 1])[1][:, 0]


def gibbs_mean(refit, seed: int, n_samples: int, burn_in: int) -> np.ndarray:
    """Posterior mean of the same model (prior, noise, data) by the Gibbs sampler."""
    p, hyper = refit.problem, refit.hyper
    p0 = expit(p.prior_logit(hyper))
    sampler = GroupSpikeSlabGibbs(p.coef_group, p0=p0, v0=float(hyper.v0[0]), noise_var=hyper.noise_var,
                                  n_samples=n_samples, burn_in=burn_in, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sampler.fit(p.X, p.y).coef_


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--signals", type=int, default=20, help="E3 signals whose design loops are searched")
    parser.add_argument("--refits", type=int, default=40, help="not-converged warm refits captured at most")
    parser.add_argument("--samples", type=int, default=11000, help="Gibbs sweeps (the first 1,000 discarded)")
    args = parser.parse_args()
    with threadpool_limits(1):
        refits = capture(args.signals, args.refits)
        print(f"{len(refits)} not-converged warm refits captured (E3, the paper's values; simulated)")
        print("  n | stopped resid | Newton conv cpu | (a) gain kept | (b) err stopped  err fixed  Gibbs floor | "
              "|m_stop - m_fix|/|m_fix|")
        kept, err_stop, err_fix, floor = [], [], [], []
        for refit in refits:
            p = refit.problem
            start = time.process_time()
            sites, _, _ = fixed_point_newton(refit)
            newton_cpu = time.process_time() - start
            fixed = undamped_check(refit, sites)
            if not fixed.converged:
                print(f"{p.n:3d} | {refit.shipped.residual:6.2g} | no  {newton_cpu:5.1f} | (fixed point not found)")
                continue
            s2 = refit.hyper.noise_var
            V_fix = covariance(p.X, s2, fixed.sites.var)
            V_stop = covariance(p.X, s2, refit.shipped.sites.var)
            norm = float(np.linalg.norm(p.X[-1]))  # the loop's rows all have this norm
            gain = information_gain(best_row(V_stop, norm), V_fix, s2) / information_gain(best_row(V_fix, norm),
                                                                                            V_fix, s2)
            m_stop, m_fix = refit.shipped.post.mean, fixed.post.mean
            chains = [gibbs_mean(refit, seed, args.samples, 1000) for seed in (0, 1)]
            truth = 0.5 * (chains[0] + chains[1])
            size = np.linalg.norm(truth)
            e_stop, e_fix = np.linalg.norm(m_stop - truth) / size, np.linalg.norm(m_fix - truth) / size
            mc = np.linalg.norm(chains[0] - chains[1]) / (2 * size)  # the mean of two chains: half their gap
            kept.append(gain), err_stop.append(e_stop), err_fix.append(e_fix), floor.append(mc)
            gap = np.linalg.norm(m_stop - m_fix) / np.linalg.norm(m_fix)
            print(f"{p.n:3d} | {refit.shipped.residual:6.2g} | yes {newton_cpu:5.1f} | {gain:6.4f} | "
                  f"{e_stop:7.4f} {e_fix:9.4f} {mc:9.4f} | {gap:.4f}", flush=True)
        if kept:
            k, a, b = np.array(kept), np.array(err_stop), np.array(err_fix)
            diff = a - b
            print(f"\n{k.size} refits with a known fixed point: (a) gain kept {k.mean():.4f} +- "
                  f"{k.std(ddof=1) / np.sqrt(k.size) if k.size > 1 else 0:.4f} (min {k.min():.4f}); (b) error of the "
                  f"stopped iterate {a.mean():.4f}, of the fixed point {b.mean():.4f}, paired difference "
                  f"{diff.mean():+.4f} +- {diff.std(ddof=1) / np.sqrt(diff.size) if diff.size > 1 else 0:.4f} "
                  f"[fixed point closer to Gibbs on {int(np.sum(diff > 0))} of {diff.size}]; Gibbs floor "
                  f"{np.mean(floor):.4f}")


if __name__ == "__main__":
    main()
