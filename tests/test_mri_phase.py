"""The phase-aware line model (adaptcs.models.line_phase): its operator against the FFT, its posterior, evidence and
line
gains against dense linear algebra, its learned values at their optimum."""

import numpy as np
import pytest

from adaptcs.bases.separable import SeparableWavelet, to_kspace
from adaptcs.models.line_phase import PhaseLineGaussian
from adaptcs.mri.data import colin27_kspace
from adaptcs.mri.design import centre_lines, design_lines
from adaptcs.mri.greedy import oracle_choice
from reference_lines import dense_phase_posterior

MRI_REPLAY = ["replay", "--instrument", "mri"]  # python -m adaptcs replay --instrument mri

N = 16


@pytest.fixture(scope="module")
def fitted():
    rng = np.random.default_rng(0)
    basis = SeparableWavelet((N, N), "haar", 2)
    y, x = np.mgrid[:N, :N] / N
    image = (1.0 + rng.uniform(size=(N, N))) * np.exp(1j * (1.5 * np.cos(2 * np.pi * x) + y))
    K = to_kspace(image) + 0.05 * (rng.normal(size=(N, N)) + 1j * rng.normal(size=(N, N)))
    lines = np.array([6, 7, 8, 9, 3, 12])
    model = PhaseLineGaussian(basis, noise_var=2 * 0.05**2, profile=np.array([4.0, 2.0, 1.0]), band=4)
    fit = model.fit(K[lines], lines)
    return basis, K, lines, model, fit


def dense(model, lines):
    """Every column's real-form rows as one block-diagonal matrix, and the prior variances, densely."""
    R = np.concatenate(model._real_rows(lines), axis=1)  # (nx, 2m, 2ny)
    X = np.zeros((N * R.shape[1], N * R.shape[2]))
    for c in range(N):
        X[c * R.shape[1]:(c + 1) * R.shape[1], c * R.shape[2]:(c + 1) * R.shape[2]] = R[c]
    return X, model._post["prior_var"].ravel()


def test_the_rows_are_the_fft_of_the_phased_wavelet_image(fitted):
    basis, _, lines, model, _ = fitted
    rng = np.random.default_rng(1)
    coef = rng.normal(size=(N, N)) + 1j * rng.normal(size=(N, N))  # y-wavelet coefficients, column by column
    image = np.exp(1j * model.phase_) * (basis.Wy.T @ coef)
    hybrid = to_kspace(image) @ np.conj(np.fft.fftshift(np.fft.fft(np.fft.ifftshift(np.eye(N)), norm="ortho")))
    for c in range(N):
        np.testing.assert_allclose(model._rows[c] @ coef[:, c], hybrid[:, c], atol=1e-12)


def test_posterior_and_evidence_equal_dense_gaussian_algebra(fitted):
    _, K, lines, model, fit = fitted
    X, lam = dense(model, lines)
    s = model.noise_var / 2
    hybrid = K[lines] @ np.conj(np.fft.fftshift(np.fft.fft(np.fft.ifftshift(np.eye(N)), norm="ortho")))
    z = np.concatenate([hybrid.real, hybrid.imag], axis=0).T.ravel()
    mean = np.linalg.solve(X.T @ X / s + np.diag(1 / lam), X.T @ z / s)
    np.testing.assert_allclose(model._post["mean"].ravel(), mean, atol=1e-10 * np.abs(mean).max())
    cov = X @ np.diag(lam) @ X.T + s * np.eye(z.shape[0])
    evidence = -0.5 * (z @ np.linalg.solve(cov, z) + np.linalg.slogdet(cov)[1] + z.shape[0] * np.log(2 * np.pi))
    assert fit.log_evidence_ == pytest.approx(evidence, rel=1e-10)
    assert fit.converged_ and fit.columns_not_converged_ == 0


def test_line_gains_equal_dense_log_determinants(fitted):
    _, _, lines, model, _ = fitted
    X, lam = dense(model, lines)
    s = model.noise_var / 2
    V = np.linalg.inv(X.T @ X / s + np.diag(1 / lam))
    gains = model.line_gains()
    for ky in range(N):
        B, _ = dense(model, np.array([ky]))
        expected = 0.5 * np.linalg.slogdet(np.eye(B.shape[0]) + B @ V @ B.T / s)[1]
        assert gains[ky] == pytest.approx(expected, rel=1e-9)
    np.testing.assert_allclose(model.line_gains([11, 2, 5]), gains[[11, 2, 5]], rtol=1e-12)


def test_the_spectra_cache_decomposes_again_exactly_the_columns_whose_eps_changed(fitted):
    _, K, lines, model, _ = fitted
    R = np.concatenate(model._real_rows(lines), axis=1)
    grams = model._grams(R, np.concatenate([model._profile[model.basis.scale_y]] * 2))
    hybrid = K[lines] @ model._Fx_conj
    z = np.concatenate([hybrid.real, hybrid.imag], axis=0).T
    cache = {}
    model._spectra(grams, z, np.full(N, 1e-3), cache)
    eps = np.full(N, 1e-3)
    eps[[2, 7]] = 0.3
    w, rotated = model._spectra(grams, z, eps, cache)
    for col in range(N):  # each against its own dense eigendecomposition
        values, U = np.linalg.eigh(grams[0][col] + eps[col] * grams[1][col])
        np.testing.assert_allclose(np.sort(w[col]), np.sort(np.maximum(values, 0)), atol=1e-10 * values.max())
        np.testing.assert_allclose(np.sum(rotated[col]), z[col] @ z[col], rtol=1e-10)
        assert np.sum(rotated[col] / (w[col] + 1.0)) == pytest.approx(
            z[col] @ np.linalg.solve(U @ np.diag(np.maximum(values, 0) + 1.0) @ U.T, z[col]), rel=1e-9)


def test_learned_slab_variance_is_at_the_evidence_maximum(fitted):
    _, K, lines, model, fit = fitted
    v, eps = model._state
    R = np.concatenate(model._real_rows(lines), axis=1)
    hybrid = K[lines] @ model._Fx_conj
    z = np.concatenate([hybrid.real, hybrid.imag], axis=0).T
    shape = np.concatenate([model._profile[model.basis.scale_y]] * 2)
    best = model._posterior(R, z, model.noise_var / 2, v, eps, shape)[0]
    for factor in (0.97, 1.03):
        assert model._posterior(R, z, model.noise_var / 2, v * factor, eps, shape)[0] < best
    assert best == pytest.approx(fit.log_evidence_)


def test_the_phase_comes_from_the_band_and_the_band_must_be_measured():
    basis = SeparableWavelet((N, N), "haar", 2)
    model = PhaseLineGaussian(basis, noise_var=1e-3, band=4)
    K = to_kspace(np.exp(0.7j) * np.ones((N, N)))
    model.fit(K[[6, 7, 8, 9]], [6, 7, 8, 9])
    np.testing.assert_allclose(model.phase_, 0.7, atol=1e-9)  # a constant phase, recovered exactly
    with pytest.raises(ValueError, match="central band"):
        PhaseLineGaussian(basis, noise_var=1e-3, band=4).fit(K[[0, 1]], [0, 1])
    with pytest.raises(ValueError, match="distinct"):
        model.fit(K[[6, 6]], [6, 6])


def _column_logpdf(z, cov):
    """Dense Gaussian log density (the independent check of the model's stacked Cholesky evidence)."""
    from scipy.stats import multivariate_normal

    return multivariate_normal(mean=np.zeros(z.shape[0]), cov=cov).logpdf(z)


def test_each_columns_phase_confidence_maximises_the_evidence_of_the_lines_outside_the_band(fitted):
    """eps_x is the smallest grid value within eps_tolerance nats of the largest log p(z_rest | z_band) of its
    column, computed densely."""
    from adaptcs.models.line_phase import EPS_GRID, eps_tolerance

    _, K, lines, model, _ = fitted
    v = model._state[0]
    R = np.concatenate(model._real_rows(lines), axis=1)  # (nx, 2m, 2ny)
    hybrid = K[lines] @ model._Fx_conj
    z = np.concatenate([hybrid.real, hybrid.imag], axis=0).T  # (nx, 2m)
    band = np.flatnonzero(np.isin(np.concatenate([lines, lines]), model._band))
    shape = np.concatenate([model._profile[model.basis.scale_y]] * 2)
    s = model.noise_var / 2
    assert 0 < band.shape[0] < z.shape[1]
    tolerance = eps_tolerance(int(np.sum(~np.isin(lines, model._band))))
    for col in range(N):
        scores = []
        for eps in EPS_GRID:
            lam = model._prior_var(v, np.full(N, eps), shape)[col]
            cov = R[col] @ np.diag(lam) @ R[col].T + s * np.eye(R.shape[1])
            scores.append(_column_logpdf(z[col], cov) - _column_logpdf(z[col, band], cov[np.ix_(band, band)]))
        assert model.eps_[col] == EPS_GRID[int(np.argmax(np.array(scores) >= max(scores) - tolerance))]


def test_with_only_the_band_measured_the_phase_is_trusted():
    from adaptcs.models.line_phase import EPS_GRID

    basis = SeparableWavelet((N, N), "haar", 2)
    K = to_kspace(np.exp(0.7j) * np.ones((N, N)))
    model = PhaseLineGaussian(basis, noise_var=1e-3, band=4)
    model.fit(K[[6, 7, 8, 9]], [6, 7, 8, 9])
    np.testing.assert_array_equal(model.eps_, EPS_GRID[0])


def test_columns_whose_phase_the_band_misses_reach_the_phase_blind_limit():
    """Half the columns have a phase of 7 cycles along y (beyond 4 band lines); lines on both sides outside the
    band show it: those columns trust the phase far less (up to eps = 1: circular, phase-blind) than the others."""
    n = 32
    rng = np.random.default_rng(0)
    y, x = np.mgrid[:n, :n] / n
    magnitude = ((y - 0.5) ** 2 / 0.16 + (x - 0.5) ** 2 / 0.12 < 1) * (1 + 0.3 * np.cos(6 * np.pi * y))
    phase = 0.8 * np.cos(2 * np.pi * x) + np.where(x < 0.5, 0.0, 2.0 * np.cos(2 * np.pi * 7 * y + 3 * x))
    K = to_kspace(magnitude * np.exp(1j * phase)) + 0.01 * (rng.normal(size=(n, n)) + 1j * rng.normal(size=(n, n)))
    lines = np.concatenate([centre_lines(n, 4), [10, 22, 7, 25]])
    model = PhaseLineGaussian(SeparableWavelet((n, n), "db2", 2), noise_var=2e-4)
    model.fit(K[lines], lines)
    inside = magnitude.sum(axis=0) > 0
    rough, smooth = inside & (x[0] >= 0.5), inside & (x[0] < 0.5)
    assert np.median(model.eps_[rough]) >= 0.3 and np.max(model.eps_[rough]) == 1.0
    assert np.median(model.eps_[smooth]) <= np.median(model.eps_[rough]) / 3


def test_the_phase_is_trusted_less_in_a_gradient_echo_than_in_a_spin_echo():
    """Simulated 128 x 128 slices 0 and 3, 32 low-to-high lines: the brain's columns' median eps_x is at least 3
    times larger with the gradient-echo-like phase than with the spin-echo one, and at least a tenth of them distrust
    it (eps_x >= 0.1) against at most a twentieth under the spin-echo phase."""
    basis = SeparableWavelet((128, 128), "db4", 3)
    lines = centre_lines(128, 32)
    from adaptcs.mri.data import colin27_slices, simulate

    slices = colin27_slices("test")[0]
    for i in (0, 3):
        eps = {}
        for regime in ("spin_echo", "gradient_echo"):
            acq = simulate(slices[i], 128, noise=0.02, seed=i, phase=regime)  # as colin27_kspace makes them
            model = PhaseLineGaussian(basis, noise_var=acq.noise_var)
            model.fit(acq.kspace[lines], lines)
            eps[regime] = model.eps_[acq.mask.any(axis=0)]
        assert np.median(eps["gradient_echo"]) >= 3 * np.median(eps["spin_echo"])
        assert np.mean(eps["gradient_echo"] >= 0.1) >= 0.1 and np.mean(eps["spin_echo"] >= 0.1) <= 0.05


def test_a_design_loop_reads_fits_that_learned_on_all_their_lines():
    acq = colin27_kspace(32)[1]
    basis = SeparableWavelet((32, 32), "db2", 2)
    run = design_lines(acq.kspace, PhaseLineGaussian(basis, noise_var=acq.noise_var), start=centre_lines(32, 4),
                       budget=10, checkpoints=(7,))
    for count in (7, 10):
        lines = run.lines[:count]
        cold = PhaseLineGaussian(basis, noise_var=acq.noise_var).fit(acq.kspace[lines], lines)
        np.testing.assert_allclose(run.fits[count].image_, cold.image_, rtol=1e-9, atol=1e-12)


def test_the_command_line_and_the_lab_take_the_phase_prior(tmp_path, capsys):
    import h5py

    from adaptcs.cli import main
    from adaptcs.lab import lines as lab

    acq = colin27_kspace(32)[1]
    np.save(tmp_path / "k.npy", acq.kspace)
    assert main(["--quiet", *MRI_REPLAY, str(tmp_path / "k.npy"), "--lines", "4", "8", "--level", "2",
                 "--prior", "phase", "--out", str(tmp_path / "m.h5")]) == 0
    with h5py.File(tmp_path / "m.h5") as f:
        assert f.attrs["prior"] == "phase" and f["design/8"].attrs["converged"]
    state = tmp_path / "s.h5"
    lab.init(state, (32, 32), wavelet="db2", level=2, prior="phase", start=4)
    first, _ = lab.next_lines(state)
    lab.add(state, first, acq.kspace[first])
    chosen, about = lab.next_lines(state)
    assert about["converged"] and chosen[0] not in first


def test_errors_after_a_line_equal_a_dense_refit_with_that_line(fitted):
    """The greedy orders' one-step update: the exact posterior mean with the line added (v, eps and the phase held),
    by dense algebra, scored in image space against an image."""
    basis, K, lines, model, _ = fitted
    s = model.noise_var / 2
    rng = np.random.default_rng(5)
    image = np.fft.fftshift(np.fft.ifft2(np.fft.ifftshift(K), norm="ortho")) + 0.05 * rng.normal(size=(N, N))
    candidates = np.setdiff1d(np.arange(N), lines)
    errors = model.errors_after_line(candidates, K[candidates], image, chunk=3)
    Fx_conj = np.conj(np.fft.fftshift(np.fft.fft(np.fft.ifftshift(np.eye(N)), norm="ortho")))
    expected = []
    for ky in candidates:
        both = np.append(lines, ky)
        X, lam = dense(model, both)
        hybrid = K[both] @ Fx_conj
        z = np.concatenate([hybrid.real, hybrid.imag], axis=0).T.ravel()
        mean = np.linalg.solve(X.T @ X / s + np.diag(1 / lam), X.T @ z / s).reshape(N, 2 * N)
        estimate = np.exp(1j * model.phase_) * (basis.Wy.T @ (mean[:, :N].T + 1j * mean[:, N:].T))
        expected.append(np.sum(np.abs(estimate - image) ** 2))
    np.testing.assert_allclose(errors, expected, rtol=1e-9)
    with pytest.raises(ValueError, match="an image of shape"):
        model.errors_after_line(candidates, K[candidates], image[:-1])
    # the mean images themselves, and the oracle of the magnitude error inside a region, from the same dense refits
    images = model.images_after_line(candidates, K[candidates])
    np.testing.assert_allclose(np.sum(np.abs(images - image) ** 2, axis=(1, 2)), expected, rtol=1e-9)
    region = np.zeros((N, N), bool)
    region[4:12, 3:13] = True
    by_magnitude = [np.sum((np.abs(images[j])[region] - np.abs(image)[region]) ** 2) for j in range(len(candidates))]
    best, score = oracle_choice(K, image, region=region, chunk=4)(model, candidates)
    assert best == int(np.argmin(by_magnitude)) and score == pytest.approx(min(by_magnitude), rel=1e-12)
    with pytest.raises(ValueError, match="region"):
        oracle_choice(K, image, region=region[:-1])


def test_the_tolerance_grows_with_the_lines_it_judges():
    from adaptcs.models.line_phase import EPS_TOLERANCE, EPS_TOLERANCE_PER_LINE, eps_tolerance

    assert eps_tolerance(0) == eps_tolerance(1) == EPS_TOLERANCE
    many = int(np.ceil(EPS_TOLERANCE / EPS_TOLERANCE_PER_LINE)) + 10
    assert eps_tolerance(many) == pytest.approx(EPS_TOLERANCE_PER_LINE * many) and eps_tolerance(many) > EPS_TOLERANCE


def test_one_model_from_phase_blind_to_phase_trusting():
    """Held at eps = 1 (circular prior) the design measures both sides of the centre alike, as low-to-high does; held
    at 1e-3 it measures one side (partial Fourier); learned, it lies between (simulated 64 x 64 slices)."""
    from adaptcs.mri.replay import colin27_magnitude_profile

    basis = SeparableWavelet((64, 64), "db2", 3)
    profile = colin27_magnitude_profile(basis)
    for acq in colin27_kspace(64)[:3]:
        below = {}
        for eps in (1.0, 1e-3):
            model = PhaseLineGaussian(basis, noise_var=acq.noise_var, profile=profile, eps=eps)
            run = design_lines(acq.kspace, model, start=centre_lines(64, 4), budget=20)
            below[eps] = int(np.sum(run.lines[4:] < 32))
            assert np.all(model.eps_ == eps)
        assert abs(below[1.0] - 8) <= 1  # of 16 new lines
        assert min(below[1e-3], 16 - below[1e-3]) <= 1
    with pytest.raises(ValueError, match="eps"):
        PhaseLineGaussian(basis, noise_var=1.0, eps=1.5).fit(acq.kspace[30:34], np.arange(30, 34))


def circular_dense_mean(basis, K, lines, noise_var, prior_var, phase):
    """The posterior mean image of a circular complex Gaussian on the y-wavelet coefficients ``c`` of the image
    demodulated by ``phase`` (ny, nx), by dense linear algebra in complex form: the real and imaginary parts of
    ``c`` independent with variances ``prior_var`` each (``E|c|^2 = 2 prior_var``, no pseudo-covariance),
    ``z = S F_2 (exp(i phase) W_y^T c) + noise``, ``E|noise|^2 = noise_var``."""
    return dense_phase_posterior(basis, K[lines], lines, np.full(lines.shape[0], noise_var), prior_var, phase)[0]


@pytest.mark.parametrize("lines", [np.array([6, 7, 8, 9, 3, 12]), np.array([1, 3, 12, 14])])
def test_the_phase_blind_end_is_a_circular_gaussian(fitted, lines):
    """At eps = 1 (``prior="gaussian"``, method ``lines_gaussian``) the model is a circular Gaussian: no
    pseudo-covariance, so conjugate symmetry is not used; its covariance is still diagonal in the y-wavelets of
    the demodulated image. Its posterior mean equals that of the dense complex algebra; without a line of the band
    (the second case) there is no phase (zero) and every column weighs alike, where the phase-aware fit refuses."""
    basis, K, _, _, _ = fitted
    model = PhaseLineGaussian(basis, noise_var=2 * 0.05**2, profile=np.array([4.0, 2.0, 1.0]), band=4, eps=1.0)
    fit = model.fit(K[lines], lines)
    prior_var = model._post["prior_var"][:, :N].T  # (ny, nx): the real part's; eps = 1 gives the imaginary the same
    np.testing.assert_allclose(model._post["prior_var"][:, N:].T, prior_var, rtol=1e-12)
    expected = circular_dense_mean(basis, K, lines, model.noise_var, prior_var, model.phase_)
    np.testing.assert_allclose(fit.image_, expected, atol=1e-10 * np.abs(expected).max())
    if not np.isin(lines, model._band).any():
        np.testing.assert_array_equal(model.phase_, 0.0)
        np.testing.assert_array_equal(model.column_weight_, model.column_weight_[0])
        with pytest.raises(ValueError, match="phase cannot be estimated"):
            PhaseLineGaussian(basis, noise_var=1.0, band=4).fit(K[lines], lines)
