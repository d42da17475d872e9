"""Dense reference algebra for the line models (tests only): the posterior of a Gaussian line model written out in
d dimensions, sharing nothing with the block-diagonal code it checks."""

import numpy as np

from adaptcs.bases.separable import to_kspace


def dense_phase_posterior(basis, values, lines, noise_per_line, prior_var, phase):
    """The posterior mean image and the log density of ``values`` (m, nx) under a circular complex Gaussian on the
    y-wavelet coefficients of the demodulated image (real and imaginary parts each of variance ``prior_var``), each
    line's samples with their own noise variance: dense complex algebra, nothing shared with the model."""
    ny, nx = basis.shape
    A = np.zeros((lines.shape[0] * nx, ny * nx), complex)
    for j in range(ny):
        for x in range(nx):
            unit = np.zeros((ny, nx))
            unit[j, x] = 1.0
            A[:, j * nx + x] = to_kspace(np.exp(1j * phase) * (basis.Wy.T @ unit))[lines].ravel()
    lam = 2.0 * prior_var.ravel()
    cov = (A * lam) @ A.conj().T + np.diag(np.repeat(noise_per_line, nx))
    z = values.ravel()
    coef = lam * (A.conj().T @ np.linalg.solve(cov, z))
    log_density = -z.size * np.log(np.pi) - np.linalg.slogdet(cov)[1] - np.real(z.conj() @ np.linalg.solve(cov, z))
    return np.exp(1j * phase) * (basis.Wy.T @ coef.reshape(ny, nx)), log_density
