"""Two convergent alternatives to parallel EP, measured on the E3 warm refits that parallel EP does not converge on.

Issue 31 asks for an EP that reaches its fixed point after every new row. On the refits where the shipped parallel
update circles (about one in eight on E3), this script runs, from the same warm sites:

- **the double-loop EP** (Heskes & Zoeter; Opper & Winther): the outer step freezes ``nu_j``, the natural
  parameters of the current approximation's marginals (the tangent of the free energy's concave part); the inner
  step minimises the convex ``L(lam) = log Z_Q(lam) + sum_j log Z_j(nu_j - lam_j)`` over the sites' natural
  parameters ``lam_j = (h_j, pi_j, rho_j)`` exactly, by projected Newton steps with the dense Hessian
  (``pi_j >= 1 / v_inf``: the paper's clamp). Every outer step lowers a bound on the EP free energy, so it
  converges; the question is how fast.
- **Newton's method on the fixed-point equations** ``lam = Phi(lam)`` (``Phi`` the undamped parallel update), its
  Jacobian by finite differences, with a backtracking line search on the scaled residual.

Both are dense (d x d and 3d x 3d matrices, d = 512): measurement tools, not candidates for the library. "Converged"
is the library's own test (one undamped EP step from the result moves the mean by less than ``10 tol``). The
refits are captured by wrapping :func:`adaptcs.models._ep.run_ep` during the designed E3 loops (the paper's values).

Run: ``python docs/log/investigations/bench_convergent_ep.py --signals 10 --refits 6 --outer 50`` (about 10 minutes).
docs/log/convergence.md ("Why warm refits can be slow") quotes its numbers. Never asserts on time.
"""

from __future__ import annotations

import argparse
import time
import warnings
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sl
from scipy.special import expit
from threadpoolctl import threadpool_limits

import adaptcs.models._ep as ep
from adaptcs.experiments import run_job


@dataclass
class Refit:
    problem: ep.EPProblem
    hyper: ep.Hyper
    sites: ep.EPSites
    kw: dict
    shipped: ep.EPRun
    cpu: float  # CPU seconds of the shipped run


def capture(signals: int, limit: int) -> list[Refit]:
    """The first ``limit`` warm refits of the designed E3 loops of ``signals`` signals that the shipped schedule
    leaves not converged."""
    found: list[Refit] = []
    original = ep.run_ep

    def recording(problem, hyper, sites, **kw):
        start = time.process_time()
        run = original(problem, hyper, sites, **kw)
        cpu = time.process_time() - start
        if kw.get("schedule") == "adaptive" and not run.converged and len(found) < limit:
            own = problem.rows(np.arange(problem.n))  # a copy: the loop's arrays may change afterwards
            found.append(Refit(own, hyper, sites.copy(), dict(kw), run, cpu))
        return run

    ep.run_ep = recording
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for r in range(signals):
                run_job("E3", 0, "gss_ep", "design", [r], hyperparameters="oracle")
                if len(found) >= limit:
                    break
    finally:
        ep.run_ep = original
    return found


def undamped_check(refit: Refit, sites: ep.EPSites) -> ep.EPRun:
    """One undamped parallel EP step from ``sites``: its ``residual`` and ``converged`` are the library's test."""
    p = refit.problem
    plain = ep.EPProblem(p.X, p.y, p.coef_group, p.offsets, v_inf_ratio=p.v_inf_ratio, damping=1.0,
                         damping_decay=1.0)
    return ep.run_ep(plain, refit.hyper, sites, tol=refit.kw["tol"], max_iter=1)


def _solve(A: np.ndarray, b: np.ndarray, positive: bool) -> np.ndarray:
    """``A^-1 b``. A positive semi-definite ``A`` gets a growing ridge until Cholesky succeeds (it is singular in
    directions without curvature, such as the log-odds of a group surely on); least squares if nothing works.
    The line searches guard against poor steps."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sl.LinAlgWarning)
        ridges = (0.0, 1e-12, 1e-9, 1e-6) if positive else (0.0,)
        top = np.max(np.abs(np.diag(A)), initial=1.0)
        for ridge in ridges:
            try:
                return sl.solve(A + ridge * top * np.eye(A.shape[0]), b, assume_a="pos" if positive else "gen")
            except np.linalg.LinAlgError:
                pass
        return sl.lstsq(A, b)[0]


def natural(sites: ep.EPSites) -> np.ndarray:
    """``(h, pi, rho) = (mt / vt, 1 / vt, pt)``, shape (3d,)."""
    return np.concatenate([sites.mean / sites.var, 1.0 / sites.var, sites.logit])


def from_natural(x: np.ndarray) -> ep.EPSites:
    h, pi, rho = np.split(x, 3)
    return ep.EPSites(var=1.0 / pi, mean=h / pi, logit=rho.copy())


class DoubleLoop:
    """Double-loop EP for the group spike-and-slab sites with a dense, exact inner solver (small d only)."""

    def __init__(self, refit: Refit):
        p, hyper = refit.problem, refit.hyper
        _, self.v0, v_inf = ep._at(p, hyper)
        self.lower = 1.0 / v_inf
        self.group, self.n_groups = p.coef_group, p.offsets.shape[0]
        self.prior_logit = p.prior_logit(hyper)
        self.precision = p.X.T @ p.X / hyper.noise_var  # X^T X / s2, (d, d)
        self.shift = p.X.T @ p.y / hyper.noise_var
        self.same_group = (self.group[:, None] == self.group[None, :]).astype(float)
        self.n_factorisations = 0

    def approximation(self, h, pi, rho):
        """Mean, covariance, group log-odds and ``log Z_Q`` (up to a constant) of Q at sites (h, pi, rho)."""
        self.n_factorisations += 1
        factor = sl.cho_factor(self.precision + np.diag(pi), lower=True)
        eta = self.shift + h
        mean = sl.cho_solve(factor, eta)
        cov = sl.cho_solve(factor, np.eye(h.shape[0]))
        logit = self.prior_logit + np.bincount(self.group, weights=rho, minlength=self.n_groups)
        log_z = 0.5 * eta @ mean - np.sum(np.log(np.diag(factor[0]))) + np.sum(np.logaddexp(0.0, logit))
        return mean, cov, logit, log_z

    def tilted(self, hc, pic, rhoc):
        """log-normaliser and moments of (spike-and-slab factor) x (cavity in natural parameters); None outside
        the domain (the slab's normaliser needs ``1 + v0 pic > 0``)."""
        den = 1.0 + self.v0 * pic
        if np.any(den <= 0.0):
            return None
        s = -0.5 * np.log(den) + self.v0 * hc * hc / (2.0 * den)
        slab_var = self.v0 / den
        return np.logaddexp(0.0, rhoc + s), expit(rhoc + s), hc * slab_var, slab_var

    def objective(self, x, nu, hessian=False):
        """``L``, its gradient (3d,) and, if asked, its Hessian (3d, 3d); None outside the domain."""
        h, pi, rho = np.split(x, 3)
        try:
            mean, cov, logit, log_zq = self.approximation(h, pi, rho)
        except np.linalg.LinAlgError:
            return None
        tilted = self.tilted(nu[0] - h, nu[1] - pi, nu[2] - rho)
        if tilted is None:
            return None
        log_zt, r1, mu, s2 = tilted
        q_on = expit(logit)[self.group]
        m2 = s2 + mu * mu  # slab's E[w^2]
        ew, ew2 = r1 * mu, r1 * m2
        grad = np.concatenate([mean - ew, -0.5 * (np.diag(cov) + mean**2) + 0.5 * ew2, q_on - r1])
        value = log_zq + np.sum(log_zt)
        if not hessian:
            return value, grad
        d = h.shape[0]
        # Q's covariance of the sufficient statistics (w, -w^2/2, z) plus the tilted ones' (diagonal 3 x 3 blocks)
        H = np.zeros((3 * d, 3 * d))
        H[:d, :d] = cov
        H[:d, d:2 * d] = -cov * mean[None, :]
        H[d:2 * d, :d] = H[:d, d:2 * d].T
        H[d:2 * d, d:2 * d] = 0.5 * cov * cov + np.outer(mean, mean) * cov
        H[2 * d:, 2 * d:] = self.same_group * (q_on * (1.0 - q_on))[:, None]
        m3, m4 = mu**3 + 3 * mu * s2, mu**4 + 6 * mu * mu * s2 + 3 * s2 * s2
        i = np.arange(d)
        blocks = {(0, 0): r1 * m2 - ew**2, (0, 1): -0.5 * (r1 * m3 - ew * ew2), (1, 1): 0.25 * (r1 * m4 - ew2**2),
                  (0, 2): r1 * (1 - r1) * mu, (1, 2): -0.5 * r1 * (1 - r1) * m2, (2, 2): r1 * (1 - r1)}
        for (a, b), v in blocks.items():
            H[a * d + i, b * d + i] += v
            if a != b:
                H[b * d + i, a * d + i] += v
        return value, grad, H

    def inner(self, x, nu, max_steps=30, gtol=1e-10):
        """Minimise ``L`` over the sites by projected Newton steps with backtracking; returns (x, steps)."""
        d = x.shape[0] // 3
        value, grad, H = self.objective(x, nu, hessian=True)
        for step in range(max_steps):
            at_bound = np.zeros(3 * d, bool)
            at_bound[d:2 * d] = (x[d:2 * d] <= self.lower * (1 + 1e-10)) & (grad[d:2 * d] > 0)
            free = ~at_bound
            if np.max(np.abs(grad[free])) < gtol:
                return x, step
            direction = np.zeros(3 * d)
            direction[free] = -_solve(H[np.ix_(free, free)], grad[free], positive=True)
            t = 1.0
            while t > 1e-10:
                trial = x + t * direction
                trial[d:2 * d] = np.maximum(trial[d:2 * d], self.lower)
                got = self.objective(trial, nu)
                if got is not None and got[0] <= value + 1e-4 * grad @ (trial - x) + 1e-12 * abs(value):
                    break
                t *= 0.5
            else:
                return x, step
            x = trial
            value, grad, H = self.objective(x, nu, hessian=True)
        return x, max_steps

    def run(self, refit: Refit, max_outer: int):
        """Outer loop from the refit's warm sites; returns (sites, residuals after each outer step)."""
        x = natural(refit.sites)
        d = x.shape[0] // 3
        x[d:2 * d] = np.maximum(x[d:2 * d], self.lower)
        residuals = []
        for _ in range(max_outer):
            h, pi, rho = np.split(x, 3)
            mean, cov, logit, _ = self.approximation(h, pi, rho)
            var = np.diag(cov)
            nu = (mean / var, 1.0 / var, logit[self.group])
            x, _ = self.inner(x, nu)
            check = undamped_check(refit, from_natural(x))
            residuals.append(check.residual)
            if check.converged:
                break
        return from_natural(x), residuals


def fixed_point_newton(refit: Refit, max_steps: int = 20):
    """Newton on ``Phi(lam) - lam = 0``; returns (sites, steps, posterior evaluations)."""
    p, hyper = refit.problem, refit.hyper
    model, v0, v_inf = ep._at(p, hyper)
    count = [0]

    def phi(x):
        count[0] += 1
        sites = from_natural(x)
        post = model.posterior(sites.var, sites.mean / sites.var)
        groups = p.group_posterior(hyper, sites)
        cav = ep._cavity(post, sites, groups.logit[p.coef_group], p.untouched)
        with np.errstate(all="ignore"):
            return natural(ep._damped(sites, ep._matched_sites(cav, v0, v_inf), cav.usable, 1.0))

    x = natural(refit.sites)
    d = x.shape[0] // 3
    post = model.posterior(refit.sites.var, refit.sites.mean / refit.sites.var)
    scale = np.concatenate([np.sqrt(post.var), post.var, np.ones(d)])  # residuals in units of the marginals
    for step in range(max_steps):
        if undamped_check(refit, from_natural(x)).converged:
            return from_natural(x), step, count[0]
        f = phi(x)
        norm = np.linalg.norm((f - x) * scale)
        jac = np.empty((3 * d, 3 * d))
        for k in range(3 * d):
            e = 1e-7 * max(1.0, abs(x[k]))
            shifted = x.copy()
            shifted[k] += e
            jac[:, k] = (phi(shifted) - f) / e
        direction = _solve(np.eye(3 * d) - jac, f - x, positive=False)
        t = 1.0
        while t > 1e-6:
            trial = x + t * direction
            if np.all(trial[d:2 * d] > 0):
                try:
                    ft = phi(trial)
                    if np.all(np.isfinite(ft)) and np.linalg.norm((ft - trial) * scale) < (1 - 1e-4 * t) * norm:
                        break
                except (np.linalg.LinAlgError, ValueError):
                    pass
            t *= 0.5
        else:
            return from_natural(x), step, count[0]
        x = trial
    return from_natural(x), max_steps, count[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--signals", type=int, default=10, help="E3 signals whose design loops are searched")
    parser.add_argument("--refits", type=int, default=6, help="not-converged warm refits to run the solvers on")
    parser.add_argument("--outer", type=int, default=50, help="outer steps of the double loop at most")
    args = parser.parse_args()
    with threadpool_limits(1):
        refits = capture(args.signals, args.refits)
        print(f"{len(refits)} not-converged warm refits (E3, the paper's values, one BLAS thread, CPU seconds)")
        print("  n | shipped: iter  cpu  resid | double loop: outer  fact  cpu  resid  conv | "
              "Newton: steps  evals  cpu  resid  conv | DL-Newton | shipped-fixed point")
        print("  (the last two: largest difference of the posterior means over the largest |mean|; the last only where "
              "Newton converged)")
        for refit in refits:
            start = time.process_time()
            dl = DoubleLoop(refit)
            dl_sites, residuals = dl.run(refit, args.outer)
            dl_cpu = time.process_time() - start
            dl_check = undamped_check(refit, dl_sites)
            start = time.process_time()
            nt_sites, steps, evals = fixed_point_newton(refit)
            nt_cpu = time.process_time() - start
            nt_check = undamped_check(refit, nt_sites)
            size = np.max(np.abs(nt_check.post.mean))
            gap = np.max(np.abs(dl_check.post.mean - nt_check.post.mean)) / size
            # where Newton found the fixed point: how far the shipped run's last iterate is from it
            off = np.max(np.abs(refit.shipped.post.mean - nt_check.post.mean)) / size if nt_check.converged else np.nan
            s = refit.shipped
            print(f"{refit.problem.n:3d} | {s.n_iter:4d} {refit.cpu:5.2f} {s.residual:6.2g} | "
                  f"{len(residuals):5d} {dl.n_factorisations:5d} {dl_cpu:6.1f} {dl_check.residual:6.2g} "
                  f"{str(dl_check.converged):5s} | {steps:5d} {evals:6d} {nt_cpu:5.1f} {nt_check.residual:6.2g} "
                  f"{str(nt_check.converged):5s} | {gap:5.2g} | {off:.2g}", flush=True)
            marks = residuals[:: max(1, len(residuals) // 6)]
            print("      double-loop residual every few outer steps: " + " ".join(f"{r:.2g}" for r in marks))


if __name__ == "__main__":
    main()
