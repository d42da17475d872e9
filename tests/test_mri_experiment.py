"""``kind: mri``: k-space line design through the job runner, the config layer, the result files and the tables."""

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from adaptcs.bases.separable import SeparableWavelet
from adaptcs.config import resolve_experiment
from adaptcs.experiments import get_experiment, run_job
from adaptcs.metrics import image_quality, magnitude_scores
from adaptcs.models.line_phase import PhaseLineGaussian
from adaptcs.mri.data import colin27_slices
from adaptcs.mri.design import centre_lines, design_lines
from adaptcs.mri.noise import noise_from_readout_edges
from adaptcs.mri.replay import colin27_magnitude_profile
from adaptcs.results import final_rows, jobs_table, read_job, write_job
from adaptcs.tables import summary_table, to_markdown

DATA = {"kind": "mri", "size": 32, "level": 2, "counts": [4, 8]}


def job(strategy, replicates=(0, 1)):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return run_job("brain", 0, "lines_gaussian", strategy, list(replicates), data_options=DATA,
                       hyperparameters="learned")


@pytest.fixture(scope="module")
def design_job():
    return job("design")


def test_a_design_job_is_the_library_design_loop_scored_inside_the_brain(design_job):
    """The job is :func:`design_lines` on the simulated slice with the noise from the readout edges, scored on the
    magnitude over the brain (relative error by hand, PSNR and SSIM inside the brain)."""
    spec = get_experiment("brain", DATA)
    assert spec.counts == (4, 8) and spec.start == 2 and spec.n_steps == 6
    acq = spec.acquisition(1)
    basis = SeparableWavelet((32, 32), "db4", 2)
    model = PhaseLineGaussian(basis, noise_var=noise_from_readout_edges(acq.kspace[centre_lines(32, 2)]),
                              profile=colin27_magnitude_profile(basis), eps=1.0)  # lines_gaussian: phase-blind
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        run = design_lines(acq.kspace, model, start=centre_lines(32, 2), budget=8, checkpoints=(4, 8))
    peak = np.abs(acq.reference)[acq.mask].max()
    np.testing.assert_array_equal(design_job.n_measurements, [4, 8])
    for k, count in enumerate((4, 8)):
        image = np.abs(run.fits[count].image_) / peak
        np.testing.assert_allclose(design_job.checkpoint_coef[1, k], image.ravel(), rtol=1e-9, atol=1e-12)
        truth = np.abs(acq.reference)[acq.mask] / peak
        error = np.sqrt(np.sum((image[acq.mask] - truth) ** 2) / np.sum(truth**2))
        assert design_job.errors[1, k] == pytest.approx(error, rel=1e-9)
    mse = np.mean((design_job.coef[1].reshape(32, 32)[acq.mask] - np.abs(acq.reference)[acq.mask] / peak) ** 2)
    assert design_job.psnr[1] == pytest.approx(-10 * np.log10(mse), rel=1e-9)
    assert 0.0 < design_job.ssim[1] < 1.0
    assert design_job.blocks_not_converged.shape == (2, 2) and np.all(design_job.blocks_not_converged >= 0)
    assert np.all(design_job.converged == 1)
    assert np.all(design_job.fit_seconds > 0) and np.all(design_job.select_seconds >= 0)


def test_the_reconstruction_grid_names_the_slice_it_shows(design_job):
    import matplotlib.pyplot as plt

    from adaptcs.plotting import plot_images

    fig = plot_images({(0, "lines_gaussian", "design"): design_job}, "brain")
    titles = [ax.get_title() for ax in fig.axes]
    plt.close(fig)
    z = colin27_slices("test")[1][design_job.replicate[0]]
    assert f"truth\nColin27 z = {z}, simulated" in titles


def test_fixed_masks_pair_by_slice_and_record_blocks(design_job, tmp_path):
    """Random masks come from the slice's design stream (the same for every method, different per slice); a job
    file keeps the per-block counts, and the tables sum them."""
    vd = job("variable_density")
    again = job("variable_density")
    np.testing.assert_array_equal(vd.errors, again.errors)
    spec = get_experiment("brain", DATA)
    from adaptcs.data.synthetic import problem_rng

    first, second = (spec.fixed_lines("variable_density", 8, problem_rng(*spec.case(0, r).design_seed))
                     for r in (0, 1))
    assert not np.array_equal(first, second)
    path = write_job(tmp_path / "vd.h5", vd)
    np.testing.assert_array_equal(read_job(path).blocks_not_converged, vd.blocks_not_converged)
    table = summary_table(final_rows(jobs_table([design_job, vd])))
    assert set(table["blocks_not_converged"]) == {0}
    assert "columns of coefficients" in to_markdown(table)


def test_magnitude_scores_are_the_relative_error_and_psnr_of_the_magnitudes_inside_the_mask():
    reference = np.array([[3.0 + 4.0j, 1.0], [0.0, -2.0]])  # magnitudes 5, 1, 0, 2
    image = np.array([[0.0 - 4.0j, 1.0j], [1.0, 2.0]])  # magnitudes 4, 1, 1, 2
    mask = np.array([[True, True], [False, True]])
    error, psnr = magnitude_scores(image, reference, mask)
    assert error == pytest.approx(1.0 / np.sqrt(30.0), rel=1e-12)  # |4 - 5| over ||(5, 1, 2)||
    assert psnr == pytest.approx(10 * np.log10(25.0 / (1.0 / 3.0)), rel=1e-12)  # peak 5, mean squared error 1/3
    assert magnitude_scores(image, reference)[0] == pytest.approx(np.sqrt(2.0 / 30.0), rel=1e-12)


def test_region_quality_is_mean_squared_error_and_ssim_inside_the_region():
    rng = np.random.default_rng(0)
    truth, estimate = rng.uniform(size=64), rng.uniform(size=64)
    region = np.zeros(64, bool)
    region[10:40] = True
    psnr, ssim = image_quality(estimate, truth, (8, 8), region=region)
    assert psnr == pytest.approx(-10 * np.log10(np.mean((estimate - truth)[region] ** 2)), rel=1e-12)
    assert -1.0 <= ssim <= 1.0
    assert image_quality(estimate, truth, (8, 8))[0] != pytest.approx(psnr)


def test_the_config_layer_keeps_line_models_and_experiments_together():
    config = {"experiments": {"brain": {"kind": "mri", "data": {"size": 32, "level": 2, "counts": [4, 8]},
                                        "replicates": 2, "methods": ["lines_gaussian"]}}}
    run = resolve_experiment(config, "brain")
    assert run.strategies == ("design", "low_to_high", "partial_fourier_6_8", "variable_density")
    assert run.hyperparameters == ("learned",) and run.n_steps == 6
    config["experiments"]["brain"]["methods"] = ["gss_ep"]
    with pytest.raises(ValueError, match=r"k-space lines take only the line models"):
        resolve_experiment(config, "brain")
    e3 = {"experiments": {"E3": {"replicates": 1, "methods": ["lines_gaussian"]}}}
    with pytest.raises(ValueError, match="fit only Cartesian k-space lines"):
        resolve_experiment(e3, "E3")
    for data, message in (({"size": 32, "counts": [40]}, "counts must lie"), ({"size": 30}, "divisible|even"),
                          ({"size": 32, "shape": 3}, "unknown data option"), ({"source": "fastmri"}, "source"),
                          ({"noise": 0}, "noise must be positive")):
        bad = {"experiments": {"brain": {"kind": "mri", "data": data, "replicates": 1,
                                         "methods": ["lines_gaussian"]}}}
        with pytest.raises(ValueError, match=message):
            resolve_experiment(bad, "brain")
    too_many = {"experiments": {"brain": {"kind": "mri", "data": {"size": 32, "level": 2}, "replicates": 9,
                                          "methods": ["lines_gaussian"]}}}
    with pytest.raises(ValueError, match="8 slices"):
        resolve_experiment(too_many, "brain")
    with pytest.raises(ValueError, match="set data.counts"):
        get_experiment("brain", DATA).check_n_steps(3)


def test_the_phase_aware_model_runs_as_a_workflow_method():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        phase = run_job("brain", 0, "lines_phase", "design", [0], data_options=DATA, hyperparameters="learned")
    assert np.all(phase.converged == 1) and np.all(np.isfinite(phase.errors)) and np.all(phase.errors < 1)
    np.testing.assert_array_equal(phase.blocks_not_converged, 0)


def test_the_greedy_orders_run_with_the_phase_aware_model():
    """Offline greedy (learned on the training slices, then fixed) and the oracle bound, with the phase-aware
    model's one-step update, through the job runner."""
    for strategy in ("offline_greedy", "oracle_greedy"):
        result = run_job("brain", 0, "lines_phase", strategy, [0], data_options=DATA, hyperparameters="learned")
        assert np.all(result.converged == 1) and np.all(np.isfinite(result.errors)) and np.all(result.errors < 1)


COIL_DATA = {"kind": "mri", "size": 32, "level": 2, "coils": 4, "start": 8, "counts": [12, 16]}


def test_a_coil_job_is_the_coil_design_loop_on_coils_prewhitened_by_their_readout_edges():
    """``data.coils``: the slice simulated through a receive array, prewhitened by the noise covariance of the
    readout edges of the centre lines (not the simulation's), ESPIRiT's maps of those lines, the coil line model's
    design, scored against the whitened coils' noise-free image as the maps combine it (built here by hand)."""
    from adaptcs.models.line_coils import CoilPhaseLineGaussian
    from adaptcs.mri.coils import espirit_maps, noise_covariance_from_readout_edges, prewhiten
    from adaptcs.mri.data import colin27_kspace
    from adaptcs.operators import CoilKSpaceLines

    result = run_job("array", 0, "lines_coils", "design", [1], data_options=COIL_DATA, hyperparameters="learned")
    acq = colin27_kspace(32, coils=4)[1]
    first = centre_lines(32, 8)
    covariance = noise_covariance_from_readout_edges(acq.kspace[:, first])
    assert not np.allclose(covariance, acq.noise_covariance)  # estimated, not told
    kspace = prewhiten(acq.kspace, covariance)
    maps = espirit_maps(kspace, 8, kernel=4)
    basis = SeparableWavelet((32, 32), "db4", 2)
    model = CoilPhaseLineGaussian(basis, sensitivities=maps, noise_var=1.0, profile=colin27_magnitude_profile(basis))
    run = design_lines(kspace, model, start=first, budget=16, checkpoints=(12, 16),
                       operator=CoilKSpaceLines(basis, maps, n_first=8))
    # the reference by hand: per pixel, the least-squares image of the whitened noise-free coil images
    coil_images = prewhiten(acq.sensitivities, covariance) * acq.reference
    reference = np.zeros((32, 32), dtype=complex)
    for i, j in zip(*np.nonzero(np.any(maps != 0, axis=0)), strict=True):
        reference[i, j] = np.linalg.lstsq(maps[:, i, j, None], coil_images[:, i, j], rcond=None)[0][0]
    peak = np.abs(reference)[acq.mask].max()
    truth = np.abs(reference)[acq.mask] / peak
    for k, count in enumerate((12, 16)):
        image = np.abs(run.fits[count].image_) / peak
        np.testing.assert_allclose(result.checkpoint_coef[0, k], image.ravel(), rtol=1e-8, atol=1e-10)
        error = np.sqrt(np.sum((image[acq.mask] - truth) ** 2) / np.sum(truth**2))
        assert result.errors[0, k] == pytest.approx(error, rel=1e-8)
    assert np.all(result.converged == 1) and result.errors[0, 1] < 0.3


def test_the_coil_truth_with_the_simulations_maps_is_the_simulated_image():
    """With ``data.maps: simulated`` the coil model is told the whitened simulated sensitivities, so the image it
    estimates (and is scored against) is the simulation's own."""
    from adaptcs.mri.data import colin27_kspace

    spec = get_experiment("array", {**COIL_DATA, "maps": "simulated"})
    acq = colin27_kspace(32, coils=4)[0]
    case = spec.case(0, 0)
    peak = np.abs(acq.reference)[acq.mask].max()
    np.testing.assert_allclose(case.problem.w_true, np.abs(acq.reference).ravel() / peak, rtol=1e-10, atol=1e-12)
    assert case.prior.noise_var == 1.0 and case.prior.sensitivities.shape == (4, 32, 32)


def test_the_config_layer_matches_line_models_to_coils():
    def entry(data, methods=("lines_coils",), strategies=None):
        out = {"kind": "mri", "data": data, "replicates": 1, "methods": list(methods)}
        return {"experiments": {"array": out | ({"strategies": strategies} if strategies else {})}}

    coils = {k: v for k, v in COIL_DATA.items() if k != "kind"}
    run = resolve_experiment(entry(coils), "array")
    assert run.experiment.coils == 4 and run.experiment.maps == "espirit"
    assert run.experiment.settings[0]["coils"] == 4
    with pytest.raises(ValueError, match="takes the coil line models"):
        resolve_experiment(entry(coils, ["lines_phase"]), "array")
    with pytest.raises(ValueError, match="lines of a receive array"):
        resolve_experiment(entry({"size": 32, "level": 2}), "array")
    with pytest.raises(ValueError, match="cannot run.*oracle_greedy"):
        resolve_experiment(entry(coils, strategies=["design", "oracle_greedy"]), "array")
    for data, message in (({**coils, "coils": 1}, "coils must lie in 2..32"),
                          ({"size": 32, "level": 2, "maps": "simulated"}, "give data.coils"),
                          ({**coils, "maps": "sense"}, "maps must be one of"),
                          ({**coils, "start": 2, "counts": [8]}, "start must be at least 4")):
        with pytest.raises(ValueError, match=message):
            resolve_experiment(entry(data), "array")
