"""The scanner's loop over k-space lines (``python -m adaptcs lab --instrument mri``): ask, measure, tell, estimate."""

import warnings

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
    np.testing.assert_allclose(image.image, again.image, rtol=1e-10, atol=1e-12)
    assert summary["lines"] == 6 and summary["converged"] == again.converged
    saved = lab.load_state(state)
    np.testing.assert_array_equal(saved.asked, np.concatenate([first, chosen]))
    assert [entry.split('"command": "')[1].split('"')[0] for entry in saved.log] == ["init", "next", "add", "next",
                                                                                    "add"]
    assert fit.converged


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
