"""E7: images measured in pixels and reconstructed in a wavelet basis, with its structured baselines."""

import tracemalloc

import numpy as np
import pytest

from adaptcs.bases.images import make_basis
from adaptcs.config import resolve_experiment
from adaptcs.experiments import case_estimator, run_job
from adaptcs.experiments.wavelet import E7, _natural_crops, pca_rows, sequence_rows, wavelet_case
from adaptcs.jobs import resolve_jobs
from adaptcs.models import GroupSpikeSlabEP


def test_case_is_an_image_with_random_pixel_rows_and_basis_groups():
    case, basis = wavelet_case(0, 1)
    p = case.problem
    assert E7.settings[0] == {"images": "natural", "side": 32}
    assert p.w_true.shape == (1024,) and 0.0 <= p.w_true.min() and p.w_true.max() <= 1.0
    assert p.X.shape == (64, 1024)  # d / 16 random rows
    np.testing.assert_allclose(np.linalg.norm(p.X, axis=1), 32.0)
    np.testing.assert_array_equal(case.fit_groups, basis.groups())
    assert np.std(p.y - p.X @ p.w_true) == pytest.approx(0.1, rel=0.3)  # noise variance 1e-2
    with pytest.raises(ValueError, match="replicate must be in 0..7"):
        wavelet_case(0, 8)


def test_mnist_setting_is_digit_three_resized():
    case, _basis = wavelet_case(1, 0, data_options={"source": "embedded"})
    image = case.problem.w_true.reshape(32, 32)
    assert image[:2].max() < 0.05 and image.max() > 0.5  # a digit on a dark background


def test_pca_rows_are_the_principal_axes_of_the_training_crops():
    rows = pca_rows("natural", 32, 20)
    np.testing.assert_allclose(rows @ rows.T, 1024.0 * np.eye(20), atol=1e-6)
    crops = _natural_crops(32)
    centred = crops - crops.mean(axis=0)
    _u, s, vt = np.linalg.svd(centred, full_matrices=False)  # dense ground truth
    for k in range(5):
        assert abs(rows[k] @ vt[k]) / 32.0 == pytest.approx(1.0, abs=1e-6)


def test_topdown_rows_measure_coarse_coefficients_first():
    basis = make_basis("haar", 32)
    rows = sequence_rows("topdown", E7.settings[0], basis, 20)
    coefficients = basis.analyze(rows)
    np.testing.assert_allclose(coefficients, 32.0 * np.eye(20, 1024), atol=1e-9)
    assert np.all(basis.scales()[:20] <= 1)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["design", "topdown", "pca"])
def test_run_job_e7_records_pixels_and_quality(strategy):
    job = run_job("E7", 0, "gss_ep", strategy, [0], hyperparameters="learned", n_steps=2)
    np.testing.assert_array_equal(job.n_measurements, [64, 68, 72])
    assert job.coef.shape == (1, 1024) and np.isfinite(job.psnr).all() and np.isfinite(job.ssim).all()
    error = np.linalg.norm(job.coef[0] - job.w_true[0]) / np.linalg.norm(job.w_true[0])
    assert job.errors[0, -1] == pytest.approx(error)
    assert job.checkpoint_n.tolist() == [64, 68, 72]


def test_e7_has_no_oracle():
    with pytest.raises(ValueError, match="no oracle"):
        run_job("E7", 0, "gss_ep", "random", [0], hyperparameters="oracle", n_steps=1)
    config = {"experiments": {"E7": {"replicates": 1, "methods": ["gss_ep"], "hyperparameters": ["oracle"]}}}
    with pytest.raises(ValueError, match="no oracle"):
        resolve_experiment(config, "E7")


def test_e7_config_checks_and_grid():
    config = {"experiments": {"E7": {"replicates": 2, "settings": [0], "methods": ["gss_ep", "g_lasso"],
                                     "strategies": ["design", "topdown", "pca"], "n_steps": 4, "basis": "db2"}}}
    run = resolve_experiment(config, "E7")
    assert run.hyperparameters == ("learned",) and run.experiment.options["basis"] == "db2"
    assert run.experiment.basis(0).name == "db2"
    jobs = {(j.method, j.strategy) for j in resolve_jobs(config).values()}
    assert jobs == {("gss_ep", "design"), ("gss_ep", "topdown"), ("gss_ep", "pca"), ("g_lasso", "topdown"),
                    ("g_lasso", "pca")}  # no design rows without a posterior covariance
    for bad, match in [({"replicates": 9}, "have 8 images"), ({"n_steps": 241}, "at most 240"),
                       ({"basis": "db9"}, "basis")]:
        entry = {**config["experiments"]["E7"], **bad}
        with pytest.raises(ValueError, match=match):
            resolve_experiment({"experiments": {"E7": entry}}, "E7")
    e3 = {"experiments": {"E3": {"replicates": 1, "methods": ["gss_ep"], "strategies": ["topdown"]}}}
    with pytest.raises(ValueError, match=r"E3 cannot run \['topdown'\]"):
        resolve_experiment(e3, "E3")
    e3["experiments"]["E3"]["strategies"] = ["predict"]
    with pytest.raises(ValueError, match=r"E3 cannot run \['predict'\]"):
        resolve_experiment(e3, "E3")


def test_e7_prediction_scan_needs_a_wavelet_basis():
    entry = {"replicates": 1, "settings": [0], "methods": ["gss_ep"], "n_steps": 2}
    assert "predict" in resolve_experiment({"experiments": {"E7": entry}}, "E7").strategies
    dct = {**entry, "basis": "dct"}
    assert "predict" not in resolve_experiment({"experiments": {"E7": dct}}, "E7").strategies  # the default list
    with pytest.raises(ValueError, match="scan the images of a wavelet basis"):
        resolve_experiment({"experiments": {"E7": {**dct, "strategies": ["design", "predict"]}}}, "E7")
    # the scan measures the 4 x 4 approximation first, in the top-down order (4 steps of 4 rows), then departs
    job, topdown = (run_job("E7", 0, "g_ard", s, [0], hyperparameters="learned", n_steps=6) for s in ("predict",
                                                                                                     "topdown"))
    np.testing.assert_array_equal(job.errors[:, :5], topdown.errors[:, :5])
    assert np.isfinite(job.errors).all() and job.errors[0, -1] != topdown.errors[0, -1]


def test_gss_ep_scales_takes_the_basis_scales_and_needs_a_basis():
    """The per-scale GSS-EP method gets E7's basis scales; an experiment without a basis refuses it."""
    case, basis = wavelet_case(0, 0)
    est = case_estimator("gss_ep_scales", case, hyperparameters="learned")
    np.testing.assert_array_equal(est.scales, basis.scales())
    assert case_estimator("gss_ep", case, hyperparameters="learned").scales is None
    job = run_job("E7", 0, "gss_ep_scales", "topdown", [0], hyperparameters="learned", n_steps=1)
    assert job.errors.shape == (1, 2) and np.isfinite(job.errors).all()
    e1 = {"experiments": {"E1": {"replicates": 1, "methods": ["gss_ep_scales"]}}}
    with pytest.raises(ValueError, match="need coefficients of a basis"):
        resolve_experiment(e1, "E1")


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")  # 64 rows: the shape is the point
def test_gss_ep_profile_starts_from_the_training_crops_profile_and_learns_its_level():
    """gss_ep_profile: v0 per scale is the training crops' per-scale second moments (never a test image's), and
    learning keeps that shape; experiments without training images refuse it."""
    case, basis = wavelet_case(0, 0)
    scales, labels = basis.scales(), np.unique(basis.scales())
    crops = basis.analyze(_natural_crops(32))
    moments = np.array([np.mean(crops[:, scales == s] ** 2) for s in labels])  # dense ground truth
    np.testing.assert_allclose(case.prior.scale_profile, moments / np.mean(moments[scales]), rtol=1e-10)
    assert np.all(np.diff(case.prior.scale_profile) < 0)  # photographs: energy falls from coarse to fine
    est = case_estimator("gss_ep_profile", case, hyperparameters="learned")
    assert est.scale_learning == "profile" and set(est.learn) >= {"p0", "v0", "noise_var"}
    np.testing.assert_allclose(np.asarray(est.v0) / est.v0[0], moments / moments[0], rtol=1e-10)
    fit = est.fit(basis.analyze(case.problem.X), case.problem.y)
    learned = fit.v0_
    np.testing.assert_allclose(learned / learned[0], moments / moments[0], rtol=1e-8)  # the shape is kept
    assert not np.allclose(learned, est.v0)  # the level is learned
    e1 = {"experiments": {"E1": {"replicates": 1, "methods": ["gss_ep_profile"]}}}
    with pytest.raises(ValueError, match="need coefficients of a basis"):
        resolve_experiment(e1, "E1")


def test_a_64_by_64_fit_never_forms_a_d_by_d_matrix():
    basis = make_basis("haar", 64)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(256, basis.d))
    y = X @ rng.normal(size=basis.d) * 0.1
    est = GroupSpikeSlabEP(basis.groups(), p0=0.1, v0=1.0, noise_var=1.0, max_iter=3)
    tracemalloc.start()
    est.fit(X, y)
    est.cov_matvec(np.ones(basis.d))
    _current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    d_by_d = basis.d * basis.d * 8
    # a fit that stops short (max_iter=3) goes on from its sites, holding two n x d posteriors at once: 37 MB here
    assert peak < d_by_d / 3, f"peak {peak / 1e6:.0f} MB against {d_by_d / 1e6:.0f} MB for one d x d matrix"
