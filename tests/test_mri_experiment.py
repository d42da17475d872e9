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
