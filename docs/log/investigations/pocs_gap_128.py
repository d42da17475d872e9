"""Why POCS reconstructs the sparse design's one-sided lines better than the line models (simulated, 128 x 128).

On the benchmark's sparse designs (``bench_mri_masks.py --prior phase_sparse``: start ny / 16 centre lines, reads at
16 and 32) and the contiguous masks, every test slice, at R = 8 and 4, PSNR of the magnitude in the brain of:

- ``sparse``: the sparse phase line model (the benchmark's ``line`` reconstructor);
- ``pocs``: the benchmark's POCS (phase from the Hann-tapered symmetric centre, at most 50 iterations);
- ``pocs model phase``: the same iteration with the sparse model's phase (its ny / 16 band, no taper);
- ``sparse wide phase``: the sparse model with POCS's phase;
- ``nonneg N``: POCS's phase, the projection onto nonnegative phase-corrected real parts
  ``max(Re(exp(-i phi) x), 0) exp(i phi)`` and the data put back, N iterations;
- ``gaussian`` and ``gaussian nonneg EP``: the Gaussian phase model, and a prototype that adds to it one EP
  truncation site per pixel, ``Re(exp(-i phi) x) >= 0``, at the Gaussian model's learned values (phase, ``v``,
  ``eps_x``); every column of pixels stays independent; dense per column, O(ny^3) a column and EP iteration.

Paired differences against ``pocs`` and against ``sparse`` are printed, mean +- s.e. [slices above]. Results in
docs/log/mri.md, thirteenth session. CPU: the sparse design 20-70 s a slice, the EP prototype ~8 s a fit.

Run (one BLAS thread), from the repository's root::

    OPENBLAS_NUM_THREADS=1 python docs/log/investigations/pocs_gap_128.py [--phase gradient_echo] [--slices 8]
"""

import argparse

import numpy as np
from scipy.special import log_ndtr
from threadpoolctl import threadpool_limits

from adaptcs.bases.separable import SeparableWavelet, centred_dft
from adaptcs.metrics import magnitude_scores
from adaptcs.models.line_phase import PhaseLineGaussian, magnitude_profile
from adaptcs.models.line_phase_sparse import PhaseLineSpikeSlab
from adaptcs.mri.data import colin27_kspace
from adaptcs.mri.design import centre_lines, design_lines
from adaptcs.mri.masks import fixed_mask
from adaptcs.mri.recon import pocs_partial_fourier, symmetric_half_width, to_image, to_kspace

N, NOISE = 128, 0.02
MASKS = ("low_to_high", "partial_fourier_5_8", "partial_fourier_6_8")


def measured(kspace_lines, lines):
    data = np.zeros((N, N), complex)
    data[lines] = kspace_lines
    rows = np.zeros(N, bool)
    rows[lines] = True
    return data, rows


def pocs_phase(kspace_lines, lines) -> np.ndarray:
    """POCS's phase (radians, (N, N)): the symmetric centre, Hann-tapered along ky."""
    data, rows = measured(kspace_lines, lines)
    h = symmetric_half_width(rows)
    ky = np.arange(N) - N // 2
    taper = np.where(np.abs(ky) <= h, 0.5 * (1.0 + np.cos(np.pi * ky / (h + 1))), 0.0)
    return np.angle(to_image(data * taper[:, None]))


def iterate(kspace_lines, lines, phase, project, n_iter: int) -> np.ndarray:
    data, rows = measured(kspace_lines, lines)
    unit, image = np.exp(1j * phase), to_image(data)
    for _ in range(n_iter):
        kspace = to_kspace(project(image, unit))
        kspace[rows] = data[rows]
        image = to_image(kspace)
    return image


def with_phase(model, phase: np.ndarray):
    """``model`` whose rows are built from ``phase`` instead of its band's (patches this instance's preparation)."""
    prepare = model._prepare

    def _prepare(kspace_lines, lines):
        prepare(kspace_lines, lines)
        model.phase_ = phase
        modulated = np.exp(1j * phase).T[:, :, None] * model.basis.Wy.T[None, :, :]
        model._rows = np.matmul(centred_dft(N)[None], modulated)
        shape_y = model._profile[model.basis.scale_y]
        re, im = model._rows.real, model._rows.imag
        model._row_power = tuple(np.einsum("xkj,xkj,j->xk", a, b, shape_y) for a, b in ((re, re), (im, im), (re, im)))

    model._prepare = _prepare
    return model


def nonnegative_ep(model: PhaseLineGaussian, kspace_lines, lines, max_iter: int = 200, damping: float = 0.5,
                   tol: float = 1e-4) -> np.ndarray:
    """The fitted Gaussian phase model's posterior times ``1[Re(exp(-i phi) x) >= 0]`` per pixel, by EP (parallel,
    damped); returns the posterior mean image (N, N)."""
    ny = N
    z, R = model._column_data(kspace_lines, lines, np.ones(lines.shape[0]))  # (nx, 2m), (nx, 2m, 2ny)
    v, eps = model._state
    lam = model._prior_var(v, eps, np.concatenate([model._profile[model.basis.scale_y]] * 2))  # (nx, 2ny)
    s = model.noise_var / 2.0
    P = np.zeros((ny, 2 * ny))
    P[:, :ny] = model.basis.Wy.T  # pixel j's phase-corrected real part is P[j] @ u
    base = np.matmul(R.transpose(0, 2, 1), R) / s
    base[:, np.arange(2 * ny), np.arange(2 * ny)] += 1.0 / lam
    h0 = np.einsum("xrb,xr->xb", R, z) / s
    tau, nu = np.zeros((N, ny)), np.zeros((N, ny))  # the sites' precisions and precision-means, per column and pixel
    for _ in range(max_iter):
        sigma = np.linalg.inv(base + np.matmul(P.T[None] * tau[:, None, :], P[None]))
        mean = np.matmul(sigma, (h0 + nu @ P)[..., None])[..., 0] @ P.T
        var = np.sum(np.matmul(P[None], sigma) * P[None], axis=-1)
        tau_c = 1.0 / var - tau
        ok = tau_c > 1e-12
        tau_c = np.where(ok, tau_c, 1e-12)
        mu_c = np.where(ok, (mean / var - nu) / tau_c, mean)
        sd_c = 1.0 / np.sqrt(tau_c)
        a = mu_c / sd_c
        ratio = np.exp(-0.5 * a * a - 0.5 * np.log(2 * np.pi) - log_ndtr(a))  # phi(a) / Phi(a)
        t_mean = mu_c + sd_c * ratio
        t_var = sd_c ** 2 * np.clip(1.0 - ratio * (ratio + a), 1e-10, None)
        new_tau = np.clip(1.0 / t_var - tau_c, 0.0, None)
        new_nu = np.where(new_tau > 0, t_mean / t_var - mu_c * tau_c, 0.0)
        change = np.max(np.abs(new_tau - tau) / (np.abs(tau) + 1.0 / var))
        tau = np.where(ok, (1 - damping) * tau + damping * new_tau, tau)
        nu = np.where(ok, (1 - damping) * nu + damping * new_nu, nu)
        if change < tol:
            break
    u = np.linalg.solve(base + np.matmul(P.T[None] * tau[:, None, :], P[None]), (h0 + nu @ P)[..., None])[..., 0]
    coef = u[:, :ny].T + 1j * u[:, ny:].T
    return np.exp(1j * model.phase_) * (model.basis.Wy.T @ coef)


def described(v: np.ndarray) -> str:
    se = v.std(ddof=1) / np.sqrt(v.size) if v.size > 1 else float("nan")
    return f"{v.mean():+.2f} +- {se:.2f} [{int(np.sum(v > 0))}/{v.size}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--phase", choices=["spin_echo", "gradient_echo", "susceptibility"], default="spin_echo")
    parser.add_argument("--slices", type=int, default=8)
    args = parser.parse_args()
    basis = SeparableWavelet((N, N), "db4", 4)
    profile = magnitude_profile("db4", 4, [np.abs(a.reference) for a in colin27_kspace(N, which="train", noise=NOISE,
                                                                                        phase=args.phase)])
    sparse = lambda noise_var: PhaseLineSpikeSlab(basis, noise_var=noise_var, profile=profile, p0=0.5,  # noqa: E731
                                                  learn=("v0",))
    gaussian = lambda noise_var: PhaseLineGaussian(basis, noise_var=noise_var, profile=profile)  # noqa: E731
    results = {}
    with threadpool_limits(1):
        for s, acq in enumerate(colin27_kspace(N, noise=NOISE, phase=args.phase)[: args.slices]):
            run = design_lines(acq.kspace, sparse(acq.noise_var), start=centre_lines(N, N // 16), budget=N // 4,
                               checkpoints=[N // 8, N // 4])
            for b in (N // 8, N // 4):
                cases = {"design": run.lines[:b], **{k: fixed_mask(k, N, b, N // 16, None) for k in MASKS}}
                for case, lines in cases.items():
                    kl = acq.kspace[lines]
                    fit = run.fits[b] if case == "design" else sparse(acq.noise_var).fit(kl, lines)
                    wide = pocs_phase(kl, lines)
                    g = gaussian(acq.noise_var).fit(kl, lines)
                    images = {
                        "sparse": fit.image_,
                        "pocs": pocs_partial_fourier(kl, lines, (N, N)),
                        "pocs model phase": iterate(kl, lines, fit.phase_, lambda x, u: np.abs(x) * u, 50),
                        "sparse wide phase": with_phase(sparse(acq.noise_var), wide).fit(kl, lines).image_,
                        "gaussian": g.image_,
                        "gaussian nonneg EP": nonnegative_ep(g, kl, lines),
                    }
                    for n_iter in (50, 200, 1000):
                        images[f"nonneg {n_iter}"] = iterate(
                            kl, lines, wide, lambda x, u: np.maximum(np.real(x * np.conj(u)), 0.0) * u, n_iter)
                    for name, image in images.items():
                        psnr = magnitude_scores(image, acq.reference, acq.mask)[1]
                        results.setdefault((b, case, name), []).append(psnr)
            print(f"slice {s} done", flush=True)
    for (b, case, name), values in results.items():
        v = np.array(values)
        print(f"{b:3d} lines {case:20s} {name:20s} {v.mean():6.2f} dB; - pocs "
              f"{described(v - np.array(results[(b, case, 'pocs')]))}; - sparse "
              f"{described(v - np.array(results[(b, case, 'sparse')]))}")


if __name__ == "__main__":
    main()
