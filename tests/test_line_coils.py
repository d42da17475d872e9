"""The coil line model (:mod:`adaptcs.models.line_coils`) against independent ground truth: the single-coil model it
generalises, a dense Gaussian model of the whole image built from 2-D FFTs on small sizes, and SENSE."""

import numpy as np
import pytest
from scipy.stats import multivariate_normal

from adaptcs.bases.separable import SeparableWavelet, centre_lines, to_kspace
from adaptcs.design.candidates import CandidateDesigner, replay_candidates
from adaptcs.models.line_coils import CoilPhaseLineGaussian
from adaptcs.models.line_phase import PhaseLineGaussian
from adaptcs.mri.coils import simulated_sensitivities
from adaptcs.mri.data import colin27_kspace
from adaptcs.operators import CoilKSpaceLines


def coil_lines(kspace: np.ndarray, lines) -> np.ndarray:
    """(coils, ny, nx) -> the lines of every coil, (m, coils, nx)."""
    return np.moveaxis(kspace[:, lines], 0, 1)


@pytest.fixture(scope="module")
def small():
    """A simulated 16 x 16 slice under a gradient-echo phase read by 3 coils, and lines on both sides."""
    n = 16
    acq = colin27_kspace(n, phase="gradient_echo", coils=3)[1]
    white = np.linalg.inv(np.linalg.cholesky(acq.noise_covariance))  # prewhiten: independent coils
    kspace = np.tensordot(white, acq.kspace, axes=(1, 0))
    maps = np.tensordot(white, acq.sensitivities, axes=(1, 0))
    lines = np.concatenate([centre_lines(n, 2), [2, 12, 5]])
    return SeparableWavelet((n, n), "db2", 1), kspace, maps, lines


def dense_model(model, lines):
    """The model's fit as one dense Gaussian over every real unknown of the image: the forward map column by column
    from the image's 2-D k-space (``to_kspace`` of each coil image), the prior from the fitted values. Returns the
    map (real values, unknowns), the prior variances and a function giving the rows of any lines."""
    ny, nx = model.basis.shape
    lam = model._prior_var(model._state[0], model.eps_)  # (nx, 2ny): a then b per column

    def rows(which):
        out = []
        for x in range(nx):
            for part in (1.0, 1j):
                for j in range(ny):
                    coef = np.zeros(ny, complex)
                    coef[j] = part
                    image = np.zeros((ny, nx), complex)
                    image[:, x] = np.exp(1j * model.phase_[:, x]) * (model.basis.Wy.T @ coef)
                    values = np.array([to_kspace(s * image)[which] for s in model._maps]).ravel()
                    out.append(np.concatenate([values.real, values.imag]))
        return np.array(out).T  # (2 k C nx, 2 ny nx), unknowns column by column: a, then b

    return rows(lines), lam.ravel(), rows


def test_one_coil_of_ones_is_the_single_coil_model():
    n = 32
    acq = colin27_kspace(n, phase="gradient_echo")[0]
    basis = SeparableWavelet((n, n), "db2", 2)
    lines = np.concatenate([centre_lines(n, 4), [3, 25, 20, 9, 12]])
    single = PhaseLineGaussian(basis, noise_var=acq.noise_var).fit(acq.kspace[lines], lines)
    coil = CoilPhaseLineGaussian(basis, sensitivities=np.ones((1, n, n)), noise_var=acq.noise_var,
                                 eps_tolerance=None)  # one coil's rule for the trust
    coil.fit(acq.kspace[lines][:, None], lines)
    np.testing.assert_allclose(coil.v0_, single.v0_, rtol=1e-6)
    np.testing.assert_array_equal(coil.eps_, single.eps_)
    np.testing.assert_allclose(coil.log_evidence_, single.log_evidence_, rtol=1e-10)
    np.testing.assert_allclose(coil.image_, single.image_, atol=1e-9 * np.abs(single.image_).max())
    np.testing.assert_allclose(coil.line_gains(), single.line_gains(), rtol=1e-7, atol=1e-9)


def test_posterior_evidence_and_gains_equal_a_dense_model_of_the_whole_image(small):
    basis, kspace, maps, lines = small
    model = CoilPhaseLineGaussian(basis, sensitivities=maps, noise_var=1.0).fit(coil_lines(kspace, lines), lines)
    A, lam, rows = dense_model(model, lines)
    s = 0.5
    values = coil_lines(kspace, lines).transpose(1, 0, 2)  # (C, m, nx), as to_kspace(...)[lines] per coil
    z = np.concatenate([values.ravel().real, values.ravel().imag])
    K = A @ (lam[:, None] * A.T) + s * np.eye(A.shape[0])
    assert model.log_evidence_ == pytest.approx(multivariate_normal(np.zeros(z.size), K).logpdf(z), rel=1e-9)
    precision = np.diag(1.0 / lam) + A.T @ A / s
    V = np.linalg.inv(precision)
    mean = V @ A.T @ z / s
    ny, nx = basis.shape
    blocks = mean.reshape(nx, 2 * ny)
    image = np.exp(1j * model.phase_) * (basis.Wy.T @ (blocks[:, :ny] + 1j * blocks[:, ny:]).T)
    np.testing.assert_allclose(model.image_, image, atol=1e-9 * np.abs(image).max())
    free = np.setdiff1d(np.arange(ny), lines)
    dense_gains = []
    for ky in free:
        B = rows([ky])
        dense_gains.append(0.5 * np.linalg.slogdet(np.eye(B.shape[0]) + B @ V @ B.T / s)[1])
    np.testing.assert_allclose(model.line_gains(free), dense_gains, rtol=1e-8)


def test_pixels_no_coil_sees_are_zero_and_the_rest_is_the_dense_posterior(small):
    """Where every sensitivity is 0 (outside ESPIRiT's support) no data bear on the image: the dense posterior mean
    there is the prior's interpolation (not 0), the model reports 0 as SENSE does; elsewhere its image, and every
    line's gain, are the dense model's."""
    basis, kspace, maps, lines = small
    holed = maps.copy()
    holed[:, 6:9, 3] = 0.0
    holed[:, 10, 11] = 0.0
    # unequal variances per y-scale (as the Colin27 profile): pixels are correlated a priori, so the hole's mean is
    # interpolated from the pixels around (with equal ones the prior of the pixels would be white, the mean 0)
    model = CoilPhaseLineGaussian(basis, sensitivities=holed, noise_var=1.0, profile=np.array([1.0, 0.05]))
    model.fit(coil_lines(kspace, lines), lines)
    A, lam, rows = dense_model(model, lines)
    s = 0.5
    values = coil_lines(kspace, lines).transpose(1, 0, 2)
    z = np.concatenate([values.ravel().real, values.ravel().imag])
    V = np.linalg.inv(np.diag(1.0 / lam) + A.T @ A / s)
    blocks = (V @ A.T @ z / s).reshape(basis.shape[1], -1)
    ny = basis.shape[0]
    image = np.exp(1j * model.phase_) * (basis.Wy.T @ (blocks[:, :ny] + 1j * blocks[:, ny:]).T)
    unseen = ~np.any(holed != 0, axis=0)
    assert unseen.sum() == 4 and np.all(np.abs(image[unseen]) > 1e-3 * np.abs(image).max())
    np.testing.assert_array_equal(model.image_[unseen], 0.0)
    np.testing.assert_allclose(model.image_[~unseen], image[~unseen], atol=1e-9 * np.abs(image).max())
    free = np.setdiff1d(np.arange(ny), lines)
    dense_gains = [0.5 * np.linalg.slogdet(np.eye(2 * 3 * basis.shape[1]) + rows([ky]) @ V @ rows([ky]).T / s)[1]
                   for ky in free]
    np.testing.assert_allclose(model.line_gains(free), dense_gains, rtol=1e-8)


def test_the_learned_scale_maximises_the_dense_evidence(small):
    basis, kspace, maps, lines = small
    model = CoilPhaseLineGaussian(basis, sensitivities=maps, noise_var=1.0).fit(coil_lines(kspace, lines), lines)
    A, lam, _rows = dense_model(model, lines)
    values = coil_lines(kspace, lines).transpose(1, 0, 2)
    z = np.concatenate([values.ravel().real, values.ravel().imag])

    def evidence(factor):
        K = A @ (factor * lam[:, None] * A.T) + 0.5 * np.eye(A.shape[0])
        return multivariate_normal(np.zeros(z.size), K).logpdf(z)

    assert evidence(1.0) > max(evidence(0.98), evidence(1.02))


def test_a_warm_refit_adds_lines_exactly_at_the_held_values(small):
    basis, kspace, maps, lines = small
    averages = np.array([1, 1, 2, 1, 3])
    model = CoilPhaseLineGaussian(basis, sensitivities=maps, noise_var=1.0)
    model.fit(coil_lines(kspace, lines[:3]), lines[:3], averages=averages[:3])
    v, eps = model._state
    model.fit(coil_lines(kspace, lines), lines, warm=True, averages=averages)
    assert model.learned_lines_ == 3 and model._state[0] == v  # updated, not relearned
    scratch = CoilPhaseLineGaussian(basis, sensitivities=maps, noise_var=1.0, eps=1.0)
    scratch._prepare(coil_lines(kspace, lines) @ model._Fx_conj, lines)
    data = scratch._normal_equations(coil_lines(kspace, lines) @ model._Fx_conj, lines, np.sqrt(averages))
    post = scratch._posterior(data, v, eps, 0.5)
    np.testing.assert_allclose(model._post["mean"], post["mean"], atol=1e-10 * np.abs(post["mean"]).max())
    np.testing.assert_allclose(model._post["cov"], post["cov"], atol=1e-12 * np.abs(post["cov"]).max())
    assert model._post["evidence"] == pytest.approx(post["evidence"], rel=1e-10)
    # the lines' coil moments, kept by low-rank updates, are those of the posterior computed afresh
    scratch._post, scratch.coef_ = post, model.coef_  # (coef_: what marks a fitted model)
    np.testing.assert_allclose(model.line_gains(), scratch.line_gains(), rtol=1e-9)


def test_every_line_measured_gives_the_sense_image():
    """With every line of noise-free coil data and a flat, wide prior, the posterior mean is the least-squares
    (SENSE) image, ``sum_c conj(s_c) x_c / sum_c |s_c|^2``: the reference inside the coils' support."""
    n = 16
    acq = colin27_kspace(n, coils=4, phase="spin_echo")[0]
    maps = simulated_sensitivities(4, (n, n))
    kspace = np.array([to_kspace(s * acq.reference) for s in maps])
    lines = np.arange(n)
    model = CoilPhaseLineGaussian(SeparableWavelet((n, n), "db2", 1), sensitivities=maps, noise_var=1e-10, eps=1.0)
    model.fit(coil_lines(kspace, lines), lines)
    np.testing.assert_allclose(model.image_, acq.reference, atol=1e-6 * np.abs(acq.reference).max())


def test_the_design_loop_takes_coils_and_the_operator_reads_them(small):
    basis, kspace, maps, _lines = small
    operator = CoilKSpaceLines(basis, maps, n_first=2)
    model = CoilPhaseLineGaussian(basis, sensitivities=maps, noise_var=1.0, relearn_every=2)
    run = replay_candidates(CandidateDesigner(model, operator), kspace, start=operator.first(), budget=8,
                            checkpoints=[5, 8])
    assert run.lines.shape == (8,) and np.unique(run.lines).shape == (8,)
    assert set(run.fits) == {5, 8} and all(fit.converged_ for fit in run.fits.values())
    # the last read fit learned its values from scratch on all 8 lines
    assert model.learned_lines_ == 8
    np.testing.assert_array_equal(operator.read(kspace, [3, 4]), np.moveaxis(kspace[:, [3, 4]], 0, 1))


def test_the_operators_rows_measure_what_it_records(small):
    basis, _kspace, maps, _lines = small
    operator = CoilKSpaceLines(basis, maps)
    rng = np.random.default_rng(0)
    image = rng.standard_normal(basis.shape) + 1j * rng.standard_normal(basis.shape)
    chosen = np.array([7, 1])
    values = operator.read(operator.record(image), chosen)
    np.testing.assert_allclose(operator.rows(chosen) @ operator.coefficients(image),
                               operator.model_values(chosen, values), atol=1e-12)


def test_bad_input_is_refused_with_a_clear_message(small):
    basis, kspace, maps, lines = small
    with pytest.raises(ValueError, match="shape \\(coils, 16, 16\\)"):
        CoilPhaseLineGaussian(basis, sensitivities=maps[:, :8], noise_var=1.0)
    zero = maps.copy()
    zero[1] = 0
    with pytest.raises(ValueError, match="0 everywhere"):
        CoilPhaseLineGaussian(basis, sensitivities=zero, noise_var=1.0)
    model = CoilPhaseLineGaussian(basis, sensitivities=maps, noise_var=1.0)
    with pytest.raises(ValueError, match="lines, coils, readout"):
        model.fit(kspace[:, lines], lines)  # coils first: the wrong layout
    with pytest.raises(ValueError, match="central band"):
        model.fit(coil_lines(kspace, [0, 1]), [0, 1])


def test_the_evidence_over_the_trust_grid_equals_the_direct_one(small):
    """The Schur-complement evidence at every eps (one factor of the real part's block for the whole grid) against
    the evidence by the Cholesky factor of the whole precision at each eps."""
    basis, kspace, maps, lines = small
    model = CoilPhaseLineGaussian(basis, sensitivities=maps, noise_var=1.0).fit(coil_lines(kspace, lines), lines)
    hybrid = coil_lines(kspace, lines) @ model._Fx_conj
    data = model._normal_equations(hybrid, lines, np.ones(lines.shape[0]))
    v, nx = model._state[0], basis.shape[1]
    grid = (1e-3, 0.1, 1.0)
    direct = [model._column_evidence(data, model._prior_var(v, np.full(nx, eps)), 0.5) for eps in grid]
    np.testing.assert_allclose(model._evidence_over_eps(data, v, 0.5, grid), direct, rtol=1e-10)


def test_the_trust_is_the_grid_value_of_largest_conditional_evidence_within_the_tolerance(small, monkeypatch):
    """``eps_tolerance``: every column's ``eps`` is the smallest grid value whose conditional evidence (recomputed
    here from the evidence over the grid minus the band's, by the single-coil formula) is within that many nats of
    the column's best: 0 the best itself; a huge tolerance the grid's smallest."""
    from adaptcs.models.line_phase import EPS_GRID, PhaseLineGaussian

    basis, kspace, maps, lines = small
    fits = {t: CoilPhaseLineGaussian(basis, sensitivities=maps, noise_var=1.0, eps_tolerance=t, eps=None)
            for t in (0.0, 1e9)}
    for model in fits.values():
        model.fit(coil_lines(kspace, lines), lines)
    assert np.all(fits[1e9].eps_ == EPS_GRID[0])
    model = fits[0.0]
    v = model._state[0]
    hybrid = coil_lines(kspace, lines) @ model._Fx_conj
    weight = np.ones(lines.shape[0])
    data = model._normal_equations(hybrid, lines, weight)
    in_band = np.isin(lines, model._band)
    band = model._band_grams(hybrid[in_band], lines[in_band], weight[in_band])
    full = model._evidence_over_eps(data, v, 0.5, EPS_GRID)
    eye = 0.5 * np.eye(band["z"].shape[1])
    conditional = np.array([full[i] - PhaseLineGaussian._column_evidence(v * (band["G_a"] + e * band["G_b"]) + eye,
                                                                         band["z"], 0.5)
                            for i, e in enumerate(EPS_GRID)])
    best = np.asarray(EPS_GRID)[np.argmax(conditional, axis=0)]
    np.testing.assert_array_equal(model._best_eps(data, band, 0.5, v), best)  # at the fit's v
    assert len(np.unique(best)) > 1  # the columns differ: the test can tell the rules apart
