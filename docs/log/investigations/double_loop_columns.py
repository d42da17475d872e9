"""Do the k-space columns that EP leaves circling have EP fixed points? A double loop on them (docs/log/mri.md, "The
columns EP leaves circling under the gradient-echo phase").

Fits the sparse phase model (``PhaseLineSpikeSlab``, ``v0`` learned) to designed lines of a simulated gradient-echo
slice (Colin27 test slice 0, 128 x 128, the 32 lines its design chose), takes the columns whose undamped EP update
would still move them, and runs on each alone, at the learned values, the double loop of Heskes & Zoeter (2002):
CCCP on the EP free energy, whose inner problem is convex in the sites (the Gaussian part's log-partition plus the
tilted distributions' at the outer step's marginals), solved by Newton's method with the exact Hessian. Site
precisions may go negative (the library clamps them at ``1 / v_inf``). Prints per column the outer steps, Newton
steps, CPU seconds and the negative site precisions at the end. Dense algebra per column (256 unknowns): a prototype
to decide what to build, not library code. One BLAS thread, CPU time.

Run: ``OPENBLAS_NUM_THREADS=1 python docs/log/investigations/double_loop_columns.py`` (about 8 CPU minutes).
"""

from __future__ import annotations

import time
import warnings

import numpy as np
from scipy.linalg import LinAlgError, cho_factor, cho_solve
from scipy.special import expit
from threadpoolctl import threadpool_limits

from adaptcs.bases.separable import SeparableWavelet
from adaptcs.models import line_phase_sparse
from adaptcs.models._ep import RESIDUAL_FACTOR, undamped_changes
from adaptcs.models.line_phase import magnitude_profile
from adaptcs.mri.data import colin27_kspace

#: The 32 lines the sparse design chose on test slice 0 (gradient echo, 128 x 128, 16 centre lines to start).
DESIGNED = [60, 61, 62, 63, 64, 65, 66, 67, 58, 59, 57, 68, 69, 70, 71, 56, 72, 55, 74, 53, 76, 51, 77, 50, 79, 52,
            49, 73, 47, 45, 81, 43]


def softplus(x):
    return np.logaddexp(0.0, x)


def circling_columns(n=128, phase="gradient_echo"):
    """The learned fit's EP problem, final sites and hyper-parameters, and the columns still moving."""
    basis = SeparableWavelet((n, n), "db4", 4)
    profile = magnitude_profile("db4", 4, [np.abs(a.reference) for a in colin27_kspace(n, which="train", phase=phase)])
    acq = colin27_kspace(n, phase=phase)[0]
    lines = np.array(DESIGNED)
    captured = {}
    fit_lines_ep = line_phase_sparse.fit_lines_ep

    def capture(problem, *args, **kwargs):
        captured["problem"], captured["learned"] = problem, fit_lines_ep(problem, *args, **kwargs)
        return captured["learned"]

    line_phase_sparse.fit_lines_ep = capture
    try:
        line_phase_sparse.PhaseLineSpikeSlab(basis, noise_var=acq.noise_var, profile=profile, p0=0.5,
                                             learn=("v0",)).fit(acq.kspace[lines], lines)
    finally:
        line_phase_sparse.fit_lines_ep = fit_lines_ep
    problem, learned = captured["problem"], captured["learned"]
    mean_change, prob_change = undamped_changes(problem, learned.run)
    n_blocks, b = problem.blocks.n_blocks, problem.blocks.stacked.shape[2]
    per_column = np.maximum(mean_change, prob_change[problem.coef_group]).reshape(n_blocks, b).max(axis=1)
    return problem, learned, np.flatnonzero(per_column > RESIDUAL_FACTOR * 1e-4)


class Column:
    """One column's EP problem: rows A (r, b), data y, noise s2, groups, prior log-odds and slab variances."""

    def __init__(self, problem, learned, c):
        n_blocks, r, b = problem.blocks.stacked.shape
        hyper = learned.hyper
        self.A, self.y = problem.blocks.stacked[c], problem.y.reshape(n_blocks, r)[c]
        self.s2, self.b = hyper.noise_var, b
        idx = c * b + np.arange(b)
        groups, self.group = np.unique(problem.coef_group[idx], return_inverse=True)
        cls = problem.group_class[groups]
        self.prior_logit = np.where(cls < 0, 40.0, hyper.level[np.maximum(cls, 0)] + problem.offsets[groups])
        self.v0 = hyper.v0[0] * problem.slab_profile[idx]
        sites = learned.run.sites
        self.start = np.concatenate([sites.mean[idx] / sites.var[idx], 1 / sites.var[idx], sites.logit[idx]])

    def q(self, lam):
        """log Z, mean, covariance, group probabilities and log-odds of the Gaussian part with sites ``lam``."""
        h, pi, logit = np.split(lam, 3)
        P = self.A.T @ self.A / self.s2 + np.diag(pi)
        try:
            cf = cho_factor(P, lower=True)
        except LinAlgError:
            return None
        eta = h + self.A.T @ self.y / self.s2
        m, S = cho_solve(cf, eta), cho_solve(cf, np.eye(self.b))
        L = self.prior_logit + np.bincount(self.group, weights=logit, minlength=self.prior_logit.size)
        log_z = 0.5 * eta @ m - np.sum(np.log(np.diag(cf[0]))) + np.sum(softplus(L) - softplus(self.prior_logit))
        return log_z, m, S, expit(L), L

    def tilted(self, rho):
        """log Z of the tilted distributions at cavities ``rho`` and their moments (None where one is improper)."""
        hc, pc, lc = np.split(rho, 3)
        t = 1 + pc * self.v0
        if np.any(t <= 0):
            return None
        a = lc - 0.5 * np.log(t) + hc**2 * self.v0 / (2 * t)
        w1, vs = expit(a), self.v0 / t
        ms = hc * vs
        moments = (w1 * ms, w1 * (vs + ms**2), w1, w1 * (ms**3 + 3 * ms * vs),
                   w1 * (ms**4 + 6 * ms**2 * vs + 3 * vs**2), ms)
        return np.sum(softplus(a)), moments

    def inner(self, lam, sigma, hessian=False):
        """The inner objective (convex in the sites ``lam``), its gradient and Hessian."""
        q, t = self.q(lam), self.tilted(sigma - lam)
        if q is None or t is None:
            return np.inf, None, None
        (log_zq, m, S, p, _), (log_zr, (e1, e2, w1, e3, e4, ms)) = q, t
        b, g = self.b, self.group
        grad = np.concatenate([m - e1, -(np.diag(S) + m**2) / 2 + e2 / 2, p[g] - w1])
        if not hessian:
            return log_zq + log_zr, grad, None
        H = np.zeros((3 * b, 3 * b))
        H[:b, :b] = S
        H[:b, b:2 * b] = -S * m[None, :]
        H[b:2 * b, :b] = H[:b, b:2 * b].T
        H[b:2 * b, b:2 * b] = 0.5 * S**2 + np.outer(m, m) * S
        H[2 * b:, 2 * b:] = (g[:, None] == g[None, :]) * (p[g] * (1 - p[g]))[:, None]
        j = np.arange(b)
        cov = {(0, 0): e2 - e1**2, (0, 1): -0.5 * (e3 - e1 * e2), (1, 1): 0.25 * (e4 - e2**2),
               (0, 2): w1 * ms - e1 * w1, (1, 2): -0.5 * (e2 - e2 * w1), (2, 2): w1 * (1 - w1)}
        for (u, v), value in cov.items():
            H[u * b + j, v * b + j] += value
            if u != v:
                H[v * b + j, u * b + j] += value
        return log_zq + log_zr, grad, H

    def change(self, old, new):
        """EP's scale-free change between the posteriors of two site vectors (the library's test)."""
        _, m0, _, p0, _ = self.q(old)
        _, m1, S1, p1, _ = self.q(new)
        return max(np.max(np.abs(m1 - m0)) / np.sqrt(np.max(m1**2 + np.diag(S1))), np.max(np.abs(p1 - p0)))


def double_loop(col: Column, max_outer=800, tol=1e-7):
    lam, b, n_newton, outer = col.start.copy(), col.b, 0, 0
    while outer < max_outer:
        outer += 1
        _, m, S, _, L = col.q(lam)
        v = np.diag(S)
        sigma = np.concatenate([m / v, 1 / v, L[col.group]])
        x = lam.copy()
        limit = sigma[b:2 * b] + 1.0 / col.v0  # a tilted distribution is proper while pi_j < limit
        x[b:2 * b] = np.minimum(x[b:2 * b], limit - 1e-6 * np.abs(limit))
        for _ in range(50):
            f, g, H = col.inner(x, sigma, hessian=True)
            n_newton += 1
            # a tiny ridge: the Hessian is singular in the log-odds of groups that are always on (p = 1)
            step = -np.linalg.solve(H + 1e-12 * np.eye(3 * b), g)
            decrease = -(g @ step)
            if decrease < 1e-14:
                break
            t = 1.0
            while t > 1e-12 and col.inner(x + t * step, sigma)[0] > f - 1e-4 * t * decrease:
                t *= 0.5
            x = x + t * step
        change, lam = col.change(lam, x), x
        if change < tol:
            break
    return lam, outer, n_newton, change


def main():
    warnings.simplefilter("ignore")
    with threadpool_limits(1):
        problem, learned, columns = circling_columns()
        print(f"learned v0 {learned.hyper.v0[0]:.4g} (unit data); columns not converged: {columns.tolist()}")
        for c in columns:
            started = time.process_time()
            col = Column(problem, learned, c)
            lam, outer, n_newton, change = double_loop(col)
            pi = np.split(lam, 3)[1]
            cpu = time.process_time() - started
            print(f"column {c}: {outer} outer steps, {n_newton} Newton steps, {cpu:.1f} CPU s, "
                  f"last change {change:.2g}; {np.sum(pi < 0)} negative site precisions (smallest {pi.min():.4g})")


if __name__ == "__main__":
    main()
