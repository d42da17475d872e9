"""What a new MRI user met (issue 73, points 5 and 6): every case is one line naming the problem, exit 2, and no
file changed or replaced."""

import os

import h5py
import numpy as np
import pytest

from adaptcs.bases.separable import to_image, to_kspace
from adaptcs.cli import main
from adaptcs.lab import lines as lab
from adaptcs.models.line_phase import PhaseLineGaussian
from adaptcs.mri.data import colin27_kspace
from adaptcs.mri.noise import noise_from_readout_edges

MRI_REPLAY = ["replay", "--instrument", "mri"]  # python -m adaptcs replay --instrument mri
MRI_LAB = ["lab", "--instrument", "mri"]


@pytest.fixture(scope="module")
def kspace():
    return colin27_kspace(32)[2].kspace


def refused(argv, capsys, *words):
    """Run the command line; assert exit 2 and one error line holding every word."""
    capsys.readouterr()
    assert main(["--quiet", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    for word in words:
        assert word in err[0], (word, err[0])
    return err[0]


def mri(path, *extra):
    return [*MRI_REPLAY, str(path), "--lines", "4", "8", "--level", "2", "--orders", "design", "low_to_high", *extra]


def test_cropped_data_is_told_to_give_the_noise_variance(tmp_path, capsys):
    full = colin27_kspace(128)[3]
    cropped = to_kspace(to_image(full.kspace)[:, 32:96])  # the brain now reaches the readout edges
    lines = np.arange(60, 68)
    assert noise_from_readout_edges(full.kspace[lines]) == pytest.approx(full.noise_var, rel=0.3)
    with pytest.raises(ValueError, match="cannot be estimated"):
        noise_from_readout_edges(cropped[lines])
    np.save(tmp_path / "k.npy", cropped)
    refused([*MRI_REPLAY, str(tmp_path / "k.npy"), "--lines", "16", "--level", "2", "--out", str(tmp_path / "o.h5")],
            capsys, "cannot be estimated", "--noise-var")
    assert not (tmp_path / "o.h5").exists()


def test_coils_slices_and_bad_files_are_named(tmp_path, capsys, kspace):
    out = str(tmp_path / "o.h5")
    np.save(tmp_path / "coils.npy", np.stack([kspace] * 4))
    refused(mri(tmp_path / "coils.npy", "--out", out), capsys, "single-coil here", "--slice")
    refused(mri(tmp_path / "coils.npy", "--slice", "9", "--out", out), capsys, "out of range", "0..3")
    with h5py.File(tmp_path / "multi.h5", "w") as f:
        f["kspace"] = np.stack([np.stack([kspace] * 2)] * 3)  # (slices, coils, ny, nx), fastMRI multi-coil
    refused(mri(tmp_path / "multi.h5", "--slice", "0", "--out", out), capsys, "multi-coil", "--coils combine")
    refused(mri(tmp_path / "missing.h5", "--out", out), capsys, "no such file")
    (tmp_path / "text.h5").write_text("not hdf5")
    refused(mri(tmp_path / "text.h5", "--out", out), capsys, "not a readable HDF5")
    nan = kspace.copy()
    nan[3, 4] = np.nan
    np.save(tmp_path / "nan.npy", nan)
    refused(mri(tmp_path / "nan.npy", "--out", out), capsys, "NaN")
    np.save(tmp_path / "odd.npy", np.zeros((63, 64), complex) + 1)
    refused([*MRI_REPLAY, str(tmp_path / "odd.npy"), "--lines", "8", "--out", out], capsys, "63 phase encodes",
            "--level", "axis 0")
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    refused(mri(tmp_path / "obj.npy", "--out", out), capsys, "not a readable .npy", "Python objects")
    assert not (tmp_path / "o.h5").exists()


def test_images_keep_the_files_orientation(tmp_path, kspace):
    file_kspace = kspace[:, :16].T.copy()  # fastMRI's layout: (readout, phase encodes), 16 x 32
    np.save(tmp_path / "k.npy", file_kspace)
    assert main(["--quiet", *MRI_REPLAY, str(tmp_path / "k.npy"), "--phase-axis", "1", "--lines", "4", "32",
                 "--level", "2", "--orders", "low_to_high", "--noise-var", "1e-4",
                 "--out", str(tmp_path / "o.h5")]) == 0
    with h5py.File(tmp_path / "o.h5") as f:
        image = f["low_to_high/32/image"][()]
    assert image.shape == file_kspace.shape
    full = to_image(file_kspace.T).T  # every line measured: the fully sampled image, in the file's orientation
    assert np.linalg.norm(image - full) < 0.05 * np.linalg.norm(full)


def test_outputs_are_checked_before_any_work(tmp_path, capsys, kspace):
    np.save(tmp_path / "k.npy", kspace)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    refused(mri(tmp_path / "k.npy", "--out", str(fifo)), capsys, "special file")
    assert fifo.is_fifo()
    (tmp_path / "folder").mkdir()
    refused(mri(tmp_path / "k.npy", "--out", str(tmp_path / "folder")), capsys, "folder")
    state = tmp_path / "scan.h5"
    lab.init(state, (32, 32), wavelet="db2", level=2, start=4, noise_var=1e-4)
    before = state.read_bytes()
    refused(mri(tmp_path / "k.npy", "--out", str(state)), capsys, "lab state file")
    out = tmp_path / "o.h5"
    refused(mri(tmp_path / "k.npy", "--out", str(out), "--masks", str(out)), capsys, "--masks")
    refused(mri(tmp_path / "k.npy", "--out", str(out), "--masks", str(tmp_path / "k.npy")), capsys, "--masks")
    assert not out.exists()
    refused([*MRI_LAB, "next", "--state", str(state), "--out", str(state)], capsys, "state")
    refused([*MRI_LAB, "estimate", "--state", str(state), "--out", str(fifo)], capsys, "special file")
    assert state.read_bytes() == before and fifo.is_fifo()
    refused([*MRI_LAB, "next", "--state", str(tmp_path / "folder")], capsys, "lab --instrument mri init")


def test_the_lab_refuses_readouts_no_fit_can_use(tmp_path, capsys, kspace):
    state = tmp_path / "scan.h5"
    lab.init(state, (32, 32), wavelet="db2", level=2, start=4, noise_var=1e-4)
    assert main(["--quiet", *MRI_LAB, "next", "--state", str(state), "--out", str(tmp_path / "first.txt")]) == 0
    first = np.loadtxt(tmp_path / "first.txt", dtype=int)
    np.save(tmp_path / "first.npy", kspace[first])
    # the file `next --out` wrote is what `add --lines` reads
    assert main(["--quiet", *MRI_LAB, "add", "--state", str(state), "--lines", str(tmp_path / "first.txt"),
                 "--readouts", str(tmp_path / "first.npy")]) == 0
    before = state.read_bytes()
    np.save(tmp_path / "huge.npy", np.full((1, 32), 1e300 + 0j))
    refused([*MRI_LAB, "add", "--state", str(state), "--lines", "3", "--readouts", str(tmp_path / "huge.npy")],
            capsys, "refused", "overflows")
    np.save(tmp_path / "jump.npy", kspace[[3]] * 1e12)
    refused([*MRI_LAB, "add", "--state", str(state), "--lines", "3", "--readouts", str(tmp_path / "jump.npy")],
            capsys, "refused", "times the largest")
    (tmp_path / "text.npy").write_text("1 2 3")
    refused([*MRI_LAB, "add", "--state", str(state), "--lines", "3", "--readouts", str(tmp_path / "text.npy")],
            capsys, "not a readable .npy")
    np.save(tmp_path / "two.npy", kspace[[5, 5]])
    refused([*MRI_LAB, "add", "--state", str(state), "--lines", "5", "5", "--readouts", str(tmp_path / "two.npy")],
            capsys, "given twice")
    assert state.read_bytes() == before
    assert main(["--quiet", *MRI_LAB, "estimate", "--state", str(state), "--out", str(tmp_path / "x.npy")]) == 0


def test_the_phase_models_fit_does_not_depend_on_the_units(kspace):
    from adaptcs.bases.separable import SeparableWavelet
    from adaptcs.mri.design import centre_lines

    basis = SeparableWavelet((32, 32), "db2", 2)
    lines = np.concatenate([centre_lines(32, 4), [5, 27, 9]])
    base = PhaseLineGaussian(basis, noise_var=1e-4).fit(kspace[lines], lines)
    for scale in (1e-60, 1e60):
        fit = PhaseLineGaussian(basis, noise_var=1e-4 * scale**2).fit(kspace[lines] * scale, lines)
        np.testing.assert_allclose(fit.image_, base.image_ * scale, rtol=1e-6, atol=1e-12 * scale)
