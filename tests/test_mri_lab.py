"""The scanner's loop over k-space lines (``python -m adaptcs lab --instrument mri``): ask, measure, tell, estimate."""

import json
import shutil
import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from adaptcs._io import StateError
from adaptcs.bases.separable import SeparableWavelet
from adaptcs.cli import main
from adaptcs.lab import lines as lab
from adaptcs.mri.data import colin27_kspace
from adaptcs.mri.design import centre_lines
from adaptcs.mri.noise import noise_from_readout_edges
from adaptcs.mri.replay import line_model

MRI_LAB = ["lab", "--instrument", "mri"]  # python -m adaptcs lab --instrument mri


@pytest.fixture(scope="module")
def scan():
    return colin27_kspace(32)[2].kspace


def test_the_loop_asks_for_the_centre_then_for_the_largest_gain(tmp_path, scan):
    state = tmp_path / "scan.h5"
    lab.init(state, (32, 32), wavelet="db2", level=2, start=4)
    first, _ = lab.next_lines(state)
    np.testing.assert_array_equal(first, centre_lines(32, 4))
    lab.add(state, first, scan[first])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        chosen, about = lab.next_lines(state, batch=2)
        # the same model fitted by hand on the same lines (noise from their readout edges) ranks the lines so
        model = line_model(SeparableWavelet((32, 32), "db2", 2), noise_from_readout_edges(scan[first]))
        fit = model.fit(scan[first], first)
    candidates = np.setdiff1d(np.arange(32), first)
    gains = model.line_gains(candidates)
    np.testing.assert_array_equal(chosen, candidates[np.argsort(-gains, kind="stable")[:2]])
    np.testing.assert_allclose(about["gains"], np.sort(gains)[::-1][:2], rtol=1e-9)
    lab.add(state, chosen, scan[chosen])
    image, summary = lab.estimate(state)
    told = np.concatenate([first, chosen])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        again = line_model(SeparableWavelet((32, 32), "db2", 2), noise_from_readout_edges(scan[told])).fit(
            scan[told], told)
    np.testing.assert_allclose(image.image_, again.image_, rtol=1e-10, atol=1e-12)
    assert summary["lines"] == 6 and summary["converged"] == again.converged_
    saved = lab.load_state(state)
    np.testing.assert_array_equal(saved.asked, np.concatenate([first, chosen]))
    assert [entry.split('"command": "')[1].split('"')[0] for entry in saved.log] == ["init", "next", "add", "next",
                                                                                    "add"]
    assert fit.converged_


def test_bad_input_changes_nothing(tmp_path, scan):
    state = tmp_path / "scan.h5"
    lab.init(state, (32, 32), wavelet="db2", level=2, start=4, noise_var=1e-4)
    lab.add(state, [15, 16], scan[[15, 16]])
    before = state.read_bytes()
    for lines, readouts, message in (([16], scan[[16]], "told already"), ([3, 3], scan[[3, 3]], "given twice"),
                                     ([40], scan[[1]], "rows of the centred"), ([3], scan[[3], :8], "shape"),
                                     ([3], np.abs(scan[[3]]), "complex"),
                                     ([3], np.full((1, 32), np.nan + 0j), "NaN")):
        with pytest.raises(StateError, match=message):
            lab.add(state, lines, readouts)
    assert state.read_bytes() == before
    with pytest.raises(StateError, match="exists already"):
        lab.init(state, (32, 32))
    with pytest.raises(StateError, match="prior must be one of"):
        lab.init(tmp_path / "other.h5", (32, 32), prior="laplace")
    assert not (tmp_path / "other.h5").exists()
    with pytest.raises(StateError, match="no line has been told"):
        lab.init(tmp_path / "empty.h5", (32, 32), wavelet="db2", level=2)
        lab.estimate(tmp_path / "empty.h5")
    damaged = bytearray(before)
    damaged[len(damaged) // 2] ^= 0xFF
    (tmp_path / "damaged.h5").write_bytes(bytes(damaged))
    with pytest.raises(StateError):
        lab.load_state(tmp_path / "damaged.h5")


def test_the_command_line_runs_the_loop(tmp_path, scan, capsys):
    state, readouts, image = tmp_path / "s.h5", tmp_path / "lines.npy", tmp_path / "image.npy"
    assert main(["--quiet", *MRI_LAB, "init", "--state", str(state), "--shape", "32", "32", "--wavelet", "db2",
                 "--level", "2", "--start", "4"]) == 0
    assert main(["--quiet", *MRI_LAB, "next", "--state", str(state)]) == 0
    lines = [int(v) for v in capsys.readouterr().out.split()[-4:]]
    np.testing.assert_array_equal(lines, centre_lines(32, 4))
    np.save(readouts, scan[lines])
    assert main(["--quiet", *MRI_LAB, "add", "--state", str(state), "--lines", *map(str, lines), "--readouts",
                 str(readouts)]) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        assert main(["--quiet", *MRI_LAB, "estimate", "--state", str(state), "--out", str(image)]) == 0
    assert np.load(image).shape == (32, 32)
    assert main(["--quiet", *MRI_LAB, "estimate", "--state", str(state), "--out", str(state)]) == 2


def test_remove_takes_back_one_add_and_the_fit_is_as_if_it_never_came(tmp_path, scan, capsys):
    """The estimate after removing add 1 equals a fit on the lines of adds 0 and 2 alone (an independent fit by
    hand); the removed lines stay in the file, may be told again, and the log records the removal."""
    state = tmp_path / "scan.h5"
    lab.init(state, (32, 32), wavelet="db2", level=2, start=4, noise_var=1e-4)
    adds = [np.array([14, 15, 16, 17]), np.array([3, 28]), np.array([10, 21])]
    for lines in adds:
        lab.add(state, lines, scan[lines])
    assert main(["--quiet", *MRI_LAB, "remove", "--state", str(state), "--batch", "1"]) == 0
    assert "took back the lines [3, 28] of add 1" in capsys.readouterr().out
    saved = lab.load_state(state)
    np.testing.assert_array_equal(saved.removed, [3, 28])
    np.testing.assert_array_equal(saved.removed_readouts, scan[[3, 28]])
    np.testing.assert_array_equal(saved.added_by, [0, 0, 0, 0, 2, 2])
    told = np.concatenate([adds[0], adds[2]])
    by_hand = line_model(SeparableWavelet((32, 32), "db2", 2), 1e-4).fit(scan[told], told)
    fit, _ = lab.estimate(state)
    np.testing.assert_allclose(fit.image_, by_hand.image_, rtol=1e-10, atol=1e-12)
    for batch, error, message in ((1, StateError, "already removed"), (3, StateError, "there is no add 3"),
                                  (-1, ValueError, "an integer >= 0")):
        with pytest.raises(error, match=message):
            lab.remove(state, batch)
    lab.add(state, np.array([3]), scan[[3]])  # a removed line may be told again, as add 3
    assert lab.load_state(state).added_by.tolist() == [0, 0, 0, 0, 2, 2, 3]
    assert [json.loads(entry)["command"] for entry in lab.load_state(state).log][-2:] == ["remove", "add"]


def test_a_version_1_state_reads_its_adds_from_its_log_and_is_written_as_the_current_version(tmp_path):
    """tests/fixtures/lab_states/lines.h5 was written by the version-1 code: two adds, 2 and 2 lines."""
    state = tmp_path / "lines.h5"
    shutil.copy(Path(__file__).parent / "fixtures" / "lab_states" / "lines.h5", state)
    with h5py.File(state, "r") as f:
        assert int(f.attrs["format_version"]) == 1 and "added_by" not in f
    assert lab.load_state(state).added_by.tolist() == [0, 0, 1, 1]
    info = lab.remove(state, 0)
    assert info["lines"] == [15, 16] and info["n_told"] == 2
    with h5py.File(state, "r") as f:
        assert int(f.attrs["format_version"]) == lab.STATE_VERSION == 4
    assert lab.load_state(state).removed.tolist() == [15, 16]


def test_a_receive_array_loop_asks_the_centre_then_the_coil_models_largest_gain(tmp_path):
    """A 4-coil loop on a simulated 32 x 32 slice, its sensitivities and noise covariance given: the centre lines
    first, then the line of largest gain under the coil line model fitted from scratch on the lines told (the same
    model fitted by hand on the prewhitened readouts ranks the lines so); estimate is that model's image."""
    from adaptcs.mri.coils import prewhiten

    acq = colin27_kspace(32, coils=4)[0]
    state = tmp_path / "coils.h5"
    lab.init(state, (32, 32), wavelet="db2", level=2, prior="phase", start=4, coils=4,
             sensitivities=acq.sensitivities, noise_covariance=acq.noise_covariance)
    first, _ = lab.next_lines(state)
    np.testing.assert_array_equal(first, centre_lines(32, 4))
    lab.add(state, first, np.moveaxis(acq.kspace[:, first], 0, 1))
    chosen, about = lab.next_lines(state, batch=2)
    white, maps = (prewhiten(a, acq.noise_covariance) for a in (acq.kspace, acq.sensitivities))
    model = line_model(SeparableWavelet((32, 32), "db2", 2), 1.0, "phase", "colin27", maps)
    model.fit(np.moveaxis(white[:, first], 0, 1), first)
    gains = model.line_gains()
    gains[first] = -np.inf
    np.testing.assert_array_equal(chosen, np.argsort(-gains, kind="stable")[:2])
    np.testing.assert_allclose(about["gains"], gains[chosen], rtol=1e-10)
    lab.add(state, chosen, np.moveaxis(acq.kspace[:, chosen], 0, 1))
    fit, about = lab.estimate(state)
    told = np.concatenate([first, chosen])
    expected = model.fit(np.moveaxis(white[:, told], 0, 1), told).image_
    np.testing.assert_allclose(fit.image_, expected, atol=1e-10 * np.abs(expected).max())
    assert about["noise_var"] == 1.0 and "prewhitened" in about["noise_source"]
    with pytest.raises(StateError, match=r"shape \(1, 4, 32\) \(lines, coils, readout\)"):
        lab.add(state, [0], acq.kspace[:, 0])


def test_a_receive_array_loop_calibrates_espirit_on_the_centre_lines_from_the_command_line(tmp_path, capsys):
    """Without sensitivities: init --coils asks every one of the --start centre lines first (ESPIRiT's calibration),
    then designs; readouts (lines, coils, nx) from .npy files; the noise covariance from the readout edges. A coil
    setting without coils, or too few centre lines for ESPIRiT, is one line and exit 2."""
    acq = colin27_kspace(32, coils=4)[0]
    state, readouts = tmp_path / "coils.h5", tmp_path / "readouts.npy"
    assert main(["--quiet", *MRI_LAB, "init", "--state", str(state), "--shape", "32", "32", "--wavelet", "db2",
                 "--level", "2", "--prior", "phase", "--start", "12", "--coils", "4"]) == 0
    for expected in (12, 1):
        capsys.readouterr()
        assert main(["--quiet", *MRI_LAB, "next", "--state", str(state)]) == 0
        lines = [int(v) for v in capsys.readouterr().out.split()]
        assert len(lines) == expected
        np.save(readouts, np.moveaxis(acq.kspace[:, lines], 0, 1))
        assert main(["--quiet", *MRI_LAB, "add", "--state", str(state), "--lines", *map(str, lines),
                     "--readouts", str(readouts)]) == 0
    assert lab.load_state(state).lines[:12].tolist() == centre_lines(32, 12).tolist()
    assert main(["--quiet", *MRI_LAB, "estimate", "--state", str(state), "--out", str(tmp_path / "x.npy")]) == 0
    image = np.load(tmp_path / "x.npy")
    assert image.shape == (32, 32) and np.all(np.isfinite(image))
    capsys.readouterr()
    assert main([*MRI_LAB, "init", "--state", str(tmp_path / "a.h5"), "--shape", "32", "32", "--noise-cov",
                 str(readouts)]) == 2
    assert "need coils > 1" in capsys.readouterr().err
    assert main([*MRI_LAB, "init", "--state", str(tmp_path / "b.h5"), "--shape", "32", "32", "--coils", "4",
                 "--prior", "phase", "--start", "4"]) == 2
    assert "at least 8 centre lines" in capsys.readouterr().err


def test_a_coil_lab_takes_a_noise_scan_as_its_covariance(tmp_path):
    """``init --noise-cov`` with a noise scan (coils, samples) keeps the scan's covariance, as a covariance given
    directly would be kept."""
    from adaptcs.cli import main
    from adaptcs.mri.coils import noise_covariance

    rng = np.random.default_rng(5)
    scan = rng.normal(size=(4, 500)) + 1j * rng.normal(size=(4, 500))
    np.save(tmp_path / "scan.npy", scan)
    assert main(["--quiet", *MRI_LAB, "init", "--state", str(tmp_path / "s.h5"), "--shape", "32", "32", "--wavelet",
                 "db2", "--level", "2", "--prior", "phase", "--start", "8", "--coils", "4", "--noise-cov",
                 str(tmp_path / "scan.npy")]) == 0
    np.testing.assert_allclose(lab.load_state(tmp_path / "s.h5").noise_covariance, noise_covariance(scan),
                               rtol=1e-12)
