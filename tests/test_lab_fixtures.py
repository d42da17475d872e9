"""State files the labs wrote before they moved under ``python -m adaptcs lab`` are read by today's code, name their
instrument, and give the estimates the old code gave (tests/fixtures/lab_states/README.md says how they were made)."""

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from adaptcs.cli import main
from adaptcs.instruments import instrument_of_state

FIXTURES = Path(__file__).parent / "fixtures" / "lab_states"


@pytest.fixture
def copy(tmp_path):
    def copied(name: str) -> str:
        shutil.copy(FIXTURES / name, tmp_path / name)
        return str(tmp_path / name)

    return copied


@pytest.mark.parametrize("name, instrument", [("rows.h5", "rows"), ("camera.h5", "rows"), ("lines.h5", "mri")])
def test_an_old_state_names_its_instrument(name, instrument):
    assert instrument_of_state(["next", "--state", str(FIXTURES / name)]) == instrument


@pytest.mark.parametrize("name", ["rows", "camera"])
def test_old_row_and_camera_states_give_the_old_estimates(name, copy, tmp_path):
    state = copy(f"{name}.h5")
    assert main(["--quiet", "lab", "estimate", "--state", state, "--out", str(tmp_path / "estimate.csv")]) == 0
    old, new = pd.read_csv(FIXTURES / f"{name}_estimate.csv"), pd.read_csv(tmp_path / "estimate.csv")
    assert list(new.columns) == list(old.columns)
    # 1e-6, not less: numpy 2.4.6 / scipy 1.17.1 round the camera fit's variances 1.4e-8 (relative) away from the
    # versions that wrote the fixture, with the same code
    np.testing.assert_allclose(new.to_numpy(float), old.to_numpy(float), rtol=1e-6, atol=1e-12)
    before = (FIXTURES / f"{name}.h5").read_bytes()
    assert Path(state).read_bytes() == before  # estimate changes nothing


def test_an_old_camera_state_asks_what_the_old_code_asked_next(copy, tmp_path):
    """The camera fixture ends with a next whose rows are still to be measured: told them, the state asks on."""
    state = copy("camera.h5")
    asked = np.loadtxt(FIXTURES / "cam_next.csv", delimiter=",", ndmin=2)
    image = np.add.outer(np.arange(8), np.arange(8)).ravel() / 14.0
    image[18:22] += 1.0
    np.savetxt(tmp_path / "values.csv", asked @ image)
    np.savetxt(tmp_path / "rows.csv", asked, delimiter=",")
    assert main(["--quiet", "lab", "add", "--state", state, "--rows", str(tmp_path / "rows.csv"), "--values",
                 str(tmp_path / "values.csv")]) == 0
    assert main(["--quiet", "lab", "next", "--state", state, "--batch", "8", "--out", str(tmp_path / "more.csv")]) == 0
    more = np.loadtxt(tmp_path / "more.csv", delimiter=",", ndmin=2)
    assert more.shape == (8, 64) and not any(np.allclose(row, old) for row in more for old in asked)


def test_an_old_line_state_gives_the_old_image_and_asks_on(copy, tmp_path, capsys):
    state = copy("lines.h5")
    assert main(["--quiet", "lab", "estimate", "--state", state, "--out", str(tmp_path / "image.npy")]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "image.npy"), np.load(FIXTURES / "lines_image.npy"), rtol=1e-8,
                               atol=1e-12)
    capsys.readouterr()
    assert main(["--quiet", "lab", "next", "--state", state, "--batch", "2"]) == 0
    asked = [int(v) for v in capsys.readouterr().out.split()]
    assert len(asked) == 2 and not {14, 15, 16, 17} & set(asked)
