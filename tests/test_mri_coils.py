"""Multi-coil k-space in: the noise covariance between coils, prewhitening, simulated receive arrays and the reader
of multi-coil files (.npy and fastMRI's HDF5 layout), each against what it must be."""

import h5py
import numpy as np
import pytest

from adaptcs.bases.separable import to_image, to_kspace
from adaptcs.mri.coils import (
    noise_covariance,
    noise_covariance_from_readout_edges,
    prewhiten,
    ring_correlation,
    whitening,
)
from adaptcs.mri.data import colin27_kspace
from adaptcs.readers import read_kspace, read_multicoil_kspace


def correlated_noise(covariance, n, rng):
    white = np.sqrt(0.5) * (rng.normal(size=(covariance.shape[0], n)) + 1j * rng.normal(size=(covariance.shape[0], n)))
    return np.linalg.cholesky(covariance) @ white


def test_a_noise_scans_covariance_and_prewhitening_make_the_noise_white():
    rng = np.random.default_rng(0)
    covariance = 0.3 * ring_correlation(6, 0.4) * np.outer([1, 2, 1, 1, 3, 1], [1, 2, 1, 1, 3, 1]) ** 0.5
    covariance = covariance + 0.05j * (np.eye(6, k=1) - np.eye(6, k=-1))  # coupling with a phase
    noise = correlated_noise(covariance, 200_000, rng)
    estimate = noise_covariance(noise)
    np.testing.assert_allclose(estimate, covariance, atol=0.02 * np.abs(covariance).max())  # 200,000 samples: 0.3 %
    white = prewhiten(noise, estimate)
    np.testing.assert_allclose(noise_covariance(white), np.eye(6), atol=1e-10)  # exactly, by construction
    np.testing.assert_allclose(noise_covariance(prewhiten(noise, covariance)), np.eye(6), atol=0.02)
    W = whitening(covariance)
    np.testing.assert_allclose(W @ covariance @ W.conj().T, np.eye(6), atol=1e-12)
    with pytest.raises(ValueError, match="Hermitian"):
        whitening(covariance + 0.1j * np.eye(6, k=2))
    with pytest.raises(ValueError, match="not positive definite"):
        whitening(np.ones((3, 3)))
    with pytest.raises(ValueError, match="the data have 5 coils"):
        prewhiten(noise[:5], covariance)
    with pytest.raises(ValueError, match="at least as many samples as coils"):
        noise_covariance(noise[:, :3])


@pytest.fixture(scope="module")
def array():
    return colin27_kspace(64, coils=8)[:2]


def test_the_readout_edges_give_the_coils_noise_covariance(array):
    """On simulated 8-coil 64 x 64 slices (neighbouring coils correlated at 0.2) every entry of the estimate lies
    within 10 % of the noise variance of the truth."""
    for acq in array:
        estimate = noise_covariance_from_readout_edges(acq.kspace)
        np.testing.assert_allclose(estimate, acq.noise_covariance, atol=0.1 * acq.noise_var)
    cropped = np.array([to_kspace(to_image(k)[:, 16:48]) for k in array[0].kspace])  # a field of view it fills
    with pytest.raises(ValueError, match="coil 0: the noise variance cannot be estimated"):
        noise_covariance_from_readout_edges(cropped)


def test_a_simulated_array_combines_back_to_the_image(array):
    """Noise-free, the coil images combined with the sensitivities (``sum conj(s_c) x_c / sum |s_c|^2``) are the
    single-coil reference to 0.2 % in the brain (the coil images were made on the fine grid, not from these maps);
    one coil's simulation is the one of before (the same draws)."""
    acq = colin27_kspace(64, coils=8, noise=0.0)[0]
    assert acq.kspace.shape == (8, 64, 64) and acq.sensitivities.shape == (8, 64, 64)
    images = np.array([to_image(k) for k in acq.kspace])
    combined = np.sum(np.conj(acq.sensitivities) * images, axis=0) / np.sum(np.abs(acq.sensitivities) ** 2, axis=0)
    error = np.linalg.norm((combined - acq.reference)[acq.mask]) / np.linalg.norm(acq.reference[acq.mask])
    assert error < 2e-3
    single = colin27_kspace(64)[0]
    np.testing.assert_array_equal(single.reference, array[0].reference)  # the same slice, phase and scaling
    assert single.sensitivities is None and single.kspace.shape == (64, 64)


def test_multicoil_files_are_read_in_either_layout(tmp_path, array):
    kspace = array[0].kspace  # (8, 64, 64), phase encodes along axis 1
    np.save(tmp_path / "coils.npy", kspace)
    np.testing.assert_array_equal(read_multicoil_kspace(str(tmp_path / "coils.npy")), kspace)
    volume = np.stack([kspace, array[1].kspace])
    np.save(tmp_path / "volume.npy", volume)
    np.testing.assert_array_equal(read_multicoil_kspace(str(tmp_path / "volume.npy"), index=1), array[1].kspace)
    with h5py.File(tmp_path / "fastmri.h5", "w") as f:  # fastMRI: (slices, coils, ny, nx), phase encodes last
        f["kspace"] = np.swapaxes(volume, -1, -2)
    np.testing.assert_array_equal(read_multicoil_kspace(str(tmp_path / "fastmri.h5"), index=0, phase_axis=1), kspace)
    for path, index, message in ((tmp_path / "volume.npy", None, "give --slice"),
                                 (tmp_path / "volume.npy", 2, "out of range"),
                                 (tmp_path / "coils.npy", 0, "not 4-D")):
        with pytest.raises(ValueError, match=message):
            read_multicoil_kspace(str(path), index=index)
    np.save(tmp_path / "single.npy", kspace[0])
    with pytest.raises(ValueError, match="single-coil"):
        read_multicoil_kspace(str(tmp_path / "single.npy"))
    np.save(tmp_path / "one.npy", kspace[:1])
    with pytest.raises(ValueError, match="one coil is single-coil"):
        read_multicoil_kspace(str(tmp_path / "one.npy"))
    with pytest.raises(ValueError, match="multi-coil"):  # the single-coil reader still names coils
        read_kspace(str(tmp_path / "fastmri.h5"))


def test_sense_with_every_line_is_the_coil_combined_image_and_recovers_an_equispaced_mask():
    """CG-SENSE against its ground truths: with every line measured it is ``sum conj(s_c) x_c / sum |s_c|^2``
    (to rounding), and noise-free at R = 2 (equispaced + 8 centre lines, true sensitivities) it recovers the image
    to 2 % in the brain."""
    from adaptcs.mri.masks import equispaced
    from adaptcs.mri.recon import cg_sense

    acq = colin27_kspace(64, coils=8, noise=0.0)[0]
    images = np.array([to_image(k) for k in acq.kspace])
    combined = np.sum(np.conj(acq.sensitivities) * images, axis=0) / np.sum(np.abs(acq.sensitivities) ** 2, axis=0)
    full = cg_sense(acq.kspace, np.arange(64), acq.sensitivities, max_iter=30)
    np.testing.assert_allclose(full, combined, atol=1e-12 * np.abs(combined).max())
    lines = equispaced(64, 32, 8)
    image = cg_sense(acq.kspace[:, lines], lines, acq.sensitivities, max_iter=30)
    brain = acq.mask
    assert np.linalg.norm((image - acq.reference)[brain]) / np.linalg.norm(acq.reference[brain]) < 0.02
    with pytest.raises(ValueError, match="the same coils"):
        cg_sense(acq.kspace[:4, lines], lines, acq.sensitivities)


def test_l1_sense_without_penalty_is_least_squares_and_recovers_a_random_mask():
    """L1-wavelet with coils against its ground truths: with every line and no penalty it is the coil-combined image
    (least squares: ``sum conj(s_c) x_c / sum |s_c|^2``); noise-free at R = 2 (variable density, 8 centre lines, true
    sensitivities, a small penalty) it recovers the image to 6 % in the brain (5.5 %; CG-SENSE 6.9 % on those lines)."""
    from adaptcs.mri.masks import variable_density
    from adaptcs.mri.recon import l1_wavelet_sense

    acq = colin27_kspace(64, coils=8, noise=0.0)[0]
    images = np.array([to_image(k) for k in acq.kspace])
    combined = np.sum(np.conj(acq.sensitivities) * images, axis=0) / np.sum(np.abs(acq.sensitivities) ** 2, axis=0)
    full = l1_wavelet_sense(acq.kspace, np.arange(64), acq.sensitivities, 0.0, max_iter=30)
    np.testing.assert_allclose(full, combined, atol=1e-9 * np.abs(combined).max())
    lines = variable_density(64, 32, 8, np.random.default_rng(0))
    image = l1_wavelet_sense(acq.kspace[:, lines], lines, acq.sensitivities, 1e-4 * np.abs(acq.kspace).max())
    brain = acq.mask
    assert np.linalg.norm((image - acq.reference)[brain]) / np.linalg.norm(acq.reference[brain]) < 0.06
    with pytest.raises(ValueError, match="the same coils"):
        l1_wavelet_sense(acq.kspace[:4, lines], lines, acq.sensitivities, 0.1)
    with pytest.raises(ValueError, match="non-negative"):
        l1_wavelet_sense(acq.kspace[:, lines], lines, acq.sensitivities, -1.0)


@pytest.mark.slow
def test_espirit_maps_from_the_centre_lines_combine_the_coils_to_the_image():
    """sigpy's ESPIRiT on the 16 centre lines of a simulated 8-coil 32 x 32 slice: maps of root sum of squares 1
    inside the object whose combination ``|sum conj(m_c) x_c|`` is the reference magnitude to the noise (0.02; the
    error is 0.024). With 12 lines ESPIRiT crops 3 % of the brain's pixels at its edge: calibrate on enough lines."""
    from adaptcs.mri.coils import espirit_maps

    acq = colin27_kspace(32, coils=8)[0]
    centre = np.zeros_like(acq.kspace)
    centre[:, 8:24] = acq.kspace[:, 8:24]  # only the calibration lines are measured
    maps = espirit_maps(centre, 16)
    brain = acq.mask
    np.testing.assert_allclose(np.sqrt(np.sum(np.abs(maps) ** 2, axis=0))[brain], 1.0, atol=1e-6)
    combined = np.abs(np.sum(np.conj(maps) * np.array([to_image(k) for k in acq.kspace]), axis=0))
    truth = np.abs(acq.reference)
    assert np.linalg.norm((combined - truth)[brain]) / np.linalg.norm(truth[brain]) < 0.05
    with pytest.raises(ValueError, match="calibration must lie in 8..32"):
        espirit_maps(centre, 4, kernel=6)
    wide = colin27_kspace(128, coils=8)[0].kspace
    with pytest.raises(ValueError, match="no sensitivity in 8 centre lines"):  # every pixel cropped
        espirit_maps(wide, 8, kernel=6)
    default = espirit_maps(wide, 8)  # the kernel then defaults to min(6, 8 // 2) = 4
    np.testing.assert_array_equal(default, espirit_maps(wide, 8, kernel=4))
    assert np.any(default)


def test_the_least_squares_image_solves_each_pixels_coil_equations():
    """``sum_c conj(s_c) x_c / sum_c |s_c|^2`` against numpy's least-squares solve of each pixel's (coils, 1)
    system; 0 where no coil sees the pixel."""
    from adaptcs.mri.coils import least_squares_image

    rng = np.random.default_rng(3)
    maps = rng.normal(size=(5, 6, 7)) + 1j * rng.normal(size=(5, 6, 7))
    maps[:, 2, 3] = 0.0
    images = rng.normal(size=(5, 6, 7)) + 1j * rng.normal(size=(5, 6, 7))
    image = least_squares_image(images, maps)
    for y in range(6):
        for x in range(7):
            if (y, x) == (2, 3):
                assert image[y, x] == 0.0
                continue
            solved = np.linalg.lstsq(maps[:, y, x, None], images[:, y, x], rcond=None)[0][0]
            assert abs(image[y, x] - solved) < 1e-12 * max(1.0, abs(solved))


def test_grappa_fills_an_equispaced_mask_from_its_calibration():
    """GRAPPA at R = 2 (equispaced + 16 centre lines, noise-free, 8 coils, 64 x 64): the root-sum-of-squares image
    is the image's magnitude (the birdcage's sum of squares is 1) to 2 % in the brain; every line measured, GRAPPA has
    nothing to fill and returns the full root sum of squares exactly."""
    from adaptcs.bases.separable import centre_lines
    from adaptcs.mri.masks import equispaced
    from adaptcs.mri.recon import grappa_rss

    acq = colin27_kspace(64, coils=8, noise=0.0)[0]
    truth = np.abs(acq.reference)
    lines = equispaced(64, 32, 16)
    image = grappa_rss(acq.kspace[:, lines], lines, (64, 64), centre_lines(64, 16))
    brain = acq.mask
    assert np.linalg.norm((image - truth)[brain]) / np.linalg.norm(truth[brain]) < 0.02
    everything = grappa_rss(acq.kspace, np.arange(64), (64, 64), centre_lines(64, 16))
    rss = np.sqrt(np.sum(np.abs([to_image(k) for k in acq.kspace]) ** 2, axis=0))
    np.testing.assert_allclose(everything, rss, rtol=1e-12, atol=1e-12 * rss.max())
    with pytest.raises(ValueError, match="contiguous centre lines that were all measured"):
        grappa_rss(acq.kspace[:, lines], lines, (64, 64), np.arange(20, 44))


def fastmri_multicoil_file(tmp_path):
    """A simulated 4-coil 32 x 32 slice and the HDF5 file of it in fastMRI's multi-coil layout ((slices, coils, ny,
    nx) with one slice, phase encodes along the last axis)."""
    acq = colin27_kspace(32, coils=4)[0]
    path = tmp_path / "multicoil.h5"
    with h5py.File(path, "w") as f:
        f["kspace"] = np.swapaxes(acq.kspace, -1, -2)[None]
    return acq, path


def replay_arguments(path, out) -> list:
    """The MRI replay of that file: 8 and 16 lines from 4, a small wavelet, the phase model."""
    return ["--quiet", "replay", "--instrument", "mri", str(path), "--slice", "0", "--phase-axis", "1", "--lines",
            "8", "16", "--start", "4", "--wavelet", "db2", "--level", "2", "--prior", "phase", "--out", str(out)]


@pytest.mark.slow
def test_a_fastmri_multicoil_file_replays_from_the_command_line(tmp_path, capsys):
    """A small multi-coil file in fastMRI's layout ((slices, coils, ny, nx), phase encodes last) replays end to end
    with --coils combine: prewhitened, ESPIRiT-combined into one virtual coil (noise variance 1), designed and scored;
    the file says how many coils and how they were combined. Without --coils combine the file is refused in one line
    naming the option."""
    from adaptcs.cli import main

    acq, path = fastmri_multicoil_file(tmp_path)
    out = tmp_path / "replay.h5"
    arguments = [*replay_arguments(path, out), "--orders", "design", "low_to_high"]
    assert main([*arguments, "--coils", "combine", "--calibration", "16"]) == 0
    printed = capsys.readouterr().out
    assert "noise variance 1 (the coils prewhitened by their noise covariance from the readout edges)" in printed
    with h5py.File(out) as f:
        assert f.attrs["coils"] == 4 and "ESPIRiT" in f.attrs["coil_combination"]
        assert f["design/16/image"].shape == (32, 32) and f["design_lines"].shape == (16,)
        assert np.isfinite(f["design/16"].attrs["psnr"]) and f["design/16"].attrs["psnr"] > 15
    assert main(arguments) == 2
    refusal = capsys.readouterr().err
    assert "multi-coil" in refusal and "--coils combine" in refusal


@pytest.mark.slow
def test_a_fastmri_multicoil_file_replays_with_the_coil_model(tmp_path, capsys):
    """--coils model: a small fastMRI-layout multi-coil file is prewhitened, given ESPIRiT's sensitivities, designed
    and scored by the coil line model; the file keeps the sensitivities (in the file's orientation) and says how the
    coils were used. Given sensitivities (--sensitivities, the simulation's) replay too; a sparse prior is refused."""
    from adaptcs.cli import main

    acq, path = fastmri_multicoil_file(tmp_path)
    out = tmp_path / "replay.h5"
    arguments = [*replay_arguments(path, out), "--orders", "design", "low_to_high", "equispaced", "--coils", "model"]
    assert main([*arguments, "--calibration", "16"]) == 0
    assert "noise variance 1 (the coils prewhitened" in capsys.readouterr().out
    with h5py.File(out) as f:
        assert f.attrs["coils"] == 4 and "coil line model" in f.attrs["coil_combination"]
        assert "ESPIRiT" in f.attrs["coil_combination"] and f["sensitivities"].shape == (4, 32, 32)
        assert f["design/16/image"].shape == (32, 32) and f["design_lines"].shape == (16,)
        assert f["design/16"].attrs["converged"] and f["design/16"].attrs["psnr"] > 20
        assert f["design/16"].attrs["psnr"] > f["low_to_high/16"].attrs["psnr"] + 1.0  # 21.5 and 18.2 dB
    np.save(tmp_path / "maps.npy", np.swapaxes(acq.sensitivities, -1, -2))
    assert main([*arguments, "--sensitivities", str(tmp_path / "maps.npy")]) == 0
    with h5py.File(out) as f:  # scored against the image those maps combine: another reference than ESPIRiT's
        assert "the sensitivities given" in f.attrs["coil_combination"]
        assert f["design/16"].attrs["psnr"] > f["low_to_high/16"].attrs["psnr"] + 1.0  # 29.9 and 25.5 dB
    capsys.readouterr()
    assert main([*arguments[:-2], "--coils", "model", "--prior", "sparse"]) == 2
    assert "phase or gaussian" in capsys.readouterr().err


def test_a_replay_takes_the_coils_noise_covariance_or_a_noise_scan(tmp_path, capsys):
    """--noise-cov: a (coils, coils) covariance prewhitens as given; a noise scan's covariance is taken first (the
    same replay as the covariance computed from it by hand); both are recorded as given; shapes that fit neither
    and a single coil are refused in one line."""
    from adaptcs.cli import main

    acq, path = fastmri_multicoil_file(tmp_path)
    rng = np.random.default_rng(3)
    factor = np.linalg.cholesky(acq.noise_covariance)
    scan = factor @ (rng.normal(size=(4, 2000)) + 1j * rng.normal(size=(4, 2000))) / np.sqrt(2)
    np.save(tmp_path / "scan.npy", scan)
    np.save(tmp_path / "cov.npy", noise_covariance(scan))
    def arguments(out, *more):
        return [*replay_arguments(path, out), "--orders", "design", "equispaced", *more]

    coil_model = ("--coils", "model", "--calibration", "16")
    psnr = {}
    for name in ("scan", "cov"):
        out = tmp_path / f"{name}.h5"
        assert main(arguments(out, *coil_model, "--noise-cov", str(tmp_path / f"{name}.npy"))) == 0
        with h5py.File(out) as f:
            assert f"given ({tmp_path / f'{name}.npy'})" in f.attrs["coil_combination"]
            psnr[name] = f["design/16"].attrs["psnr"], f["design_lines"][()]
    assert psnr["scan"][0] == pytest.approx(psnr["cov"][0], rel=1e-12)
    np.testing.assert_array_equal(psnr["scan"][1], psnr["cov"][1])
    capsys.readouterr()
    np.save(tmp_path / "bad.npy", np.eye(3))
    assert main(arguments(tmp_path / "bad.h5", *coil_model, "--noise-cov", str(tmp_path / "bad.npy"))) == 2
    assert "(4, 4) covariance or a noise scan" in capsys.readouterr().err
    assert main(arguments(tmp_path / "one.h5", "--noise-cov", str(tmp_path / "cov.npy"))) == 2
    assert "--noise-cov is for a receive array" in capsys.readouterr().err
