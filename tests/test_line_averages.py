"""Lines measured more than once: the line models' ``averages`` (a line's mean readout, its noise variance divided by
the readouts averaged) and the line lab's ``add --again``, each against an independent ground truth."""

import numpy as np
import pytest

from adaptcs.bases.separable import SeparableWavelet, to_kspace
from adaptcs.cli import main
from adaptcs.lab import lines as lab
from adaptcs.models.line_phase import PhaseLineGaussian
from adaptcs.models.line_spike_slab import LineSpikeSlab
from adaptcs.mri.replay import line_model
from reference_lines import dense_phase_posterior

N = 16


@pytest.fixture(scope="module")
def scan():
    rng = np.random.default_rng(3)
    y, x = np.mgrid[:N, :N] / N
    image = (1.0 + rng.uniform(size=(N, N))) * np.exp(1j * (1.5 * np.cos(2 * np.pi * x) + y))
    return to_kspace(image) + 0.05 * (rng.normal(size=(N, N)) + 1j * rng.normal(size=(N, N)))


BASIS = SeparableWavelet((N, N), "haar", 2)
LINES = np.array([6, 7, 8, 9, 3, 12])


def test_every_line_averaging_k_readouts_is_the_fit_with_the_noise_variance_over_k(scan):
    """Uniform averages are a noise variance divided by k: the learned values, the image and the evidence of the
    values given must agree with a fit that is told that noise variance and no averages."""
    noise = 2 * 0.05**2
    for k in (2, 5):
        averaged = PhaseLineGaussian(BASIS, noise_var=noise, band=4).fit(scan[LINES], LINES,
                                                                         averages=np.full(LINES.size, k))
        reference = PhaseLineGaussian(BASIS, noise_var=noise / k, band=4).fit(scan[LINES], LINES)
        np.testing.assert_allclose(averaged.image_, reference.image_, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(averaged.v0_, reference.v0_, rtol=1e-8)
        np.testing.assert_array_equal(averaged.eps_, reference.eps_)
        assert averaged.log_evidence_ == pytest.approx(reference.log_evidence_, rel=1e-10)
        # p0 = 0.5: EP reaches its fixed point in ~130 iterations on both paths; at p0 = 0.3 and k = 5 it crawls
        # (~1600) and the two paths' rounding (OpenBLAS's kernels differ between CPUs) ends one of them short of it
        sparse = [LineSpikeSlab(BASIS, noise_var=n, p0=0.5, v0=1.0, learn=()).fit(scan[LINES], LINES, averages=a)
                  for n, a in ((noise, np.full(LINES.size, k)), (noise / k, None))]
        assert sparse[0].converged_ and sparse[1].converged_
        np.testing.assert_allclose(sparse[0].coef_, sparse[1].coef_, atol=1e-9 * np.abs(sparse[1].coef_).max())
        assert sparse[0].log_evidence_ == pytest.approx(sparse[1].log_evidence_, rel=1e-9)


def test_lines_of_different_averages_against_dense_complex_algebra(scan):
    averages = np.array([1, 3, 1, 2, 1, 4])
    model = PhaseLineGaussian(BASIS, noise_var=2 * 0.05**2, profile=np.array([4.0, 2.0, 1.0]), band=4, eps=1.0)
    model.fit(scan[LINES], LINES, averages=averages)
    prior_var = model._post["prior_var"][:, :N].T  # the learned prior, given to the dense reference
    image, log_density = dense_phase_posterior(BASIS, scan[LINES], LINES, model.noise_var / averages, prior_var,
                                         model.phase_)
    np.testing.assert_allclose(model.image_, image, atol=1e-10 * np.abs(image).max())
    assert model.log_evidence_ == pytest.approx(log_density, rel=1e-10)
    with pytest.raises(ValueError, match="averages must hold one whole number"):
        model.fit(scan[LINES], LINES, averages=np.full(LINES.size, 0.5))


def test_the_lab_fits_a_line_told_again_by_its_mean_readout(tmp_path, scan, capsys):
    state = tmp_path / "lab.h5"
    lab.init(state, (N, N), wavelet="haar", level=2, start=4, noise_var=2 * 0.05**2)
    lab.add(state, LINES, scan[LINES])
    repeat = scan[[3, 12]] + 0.05 * np.random.default_rng(1).normal(size=(2, N))  # a second readout of each
    with pytest.raises(lab.StateError, match="pass --again"):
        lab.add(state, [3, 12], repeat)
    np.save(tmp_path / "repeat.npy", repeat)
    assert main(["lab", "--instrument", "mri", "add", "--state", str(state), "--lines", "3", "12", "--readouts",
                 str(tmp_path / "repeat.npy"), "--again"]) == 0
    assert "6 lines told (8 readouts) (add 1)" in capsys.readouterr().out
    fit, summary = lab.estimate(state)
    assert summary["lines"] == 6 and summary["readouts"] == 8
    means = scan[LINES].copy()
    means[[4, 5]] = (scan[[3, 12]] + repeat) / 2
    by_hand = line_model(BASIS, 2 * 0.05**2).fit(means, LINES, averages=np.array([1, 1, 1, 1, 2, 2]))
    np.testing.assert_allclose(fit.image_, by_hand.image_, rtol=1e-10, atol=1e-12)
    lines, _ = lab.next_lines(state, 2)
    assert not np.isin(lines, LINES).any()  # a line told twice is still a line measured
    lab.remove(state, 1)  # the repeat taken back: the first readouts alone again
    fit, summary = lab.estimate(state)
    alone = line_model(BASIS, 2 * 0.05**2).fit(scan[LINES], LINES)
    np.testing.assert_allclose(fit.image_, alone.image_, rtol=1e-10, atol=1e-12)
    assert summary["readouts"] == 6
