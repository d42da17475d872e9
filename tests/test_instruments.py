"""One instrument concept on the command line: ``lab`` and ``replay`` with ``--instrument``, the state file naming
its instrument, the older command names, and an instrument added from outside the package."""

import h5py
import numpy as np
import pytest

from adaptcs import instruments
from adaptcs._io import StateError, locked, write_state_file
from adaptcs.cli import main
from adaptcs.instruments import Instrument, register

TOY_FORMAT = "toy-counter-state"


def _toy_lab_steps(parser):
    """A toy instrument measuring one number at a time: init, next (prints the index to measure), add (a value)."""
    steps = parser.add_subparsers(dest="step", required=True)
    init = steps.add_parser("init")
    init.add_argument("--state", required=True)
    init.add_argument("--size", type=int, required=True)
    init.set_defaults(func=_toy_init)
    ask = steps.add_parser("next")
    ask.add_argument("--state", required=True)
    ask.set_defaults(func=_toy_next)
    tell = steps.add_parser("add")
    tell.add_argument("--state", required=True)
    tell.add_argument("--value", type=float, required=True)
    tell.set_defaults(func=_toy_add)


def _toy_read(path):
    with h5py.File(path, "r") as f:
        return int(f.attrs["size"]), f["values"][()]


def _toy_write(path, size, values):
    write_state_file(path, {"format": TOY_FORMAT, "size": size}, {"values": np.asarray(values, dtype=float)})


def _toy_init(args):
    with locked(args.state, creating=True, made_by="toy init"):
        _toy_write(args.state, args.size, [])
    return 0


def _toy_next(args):
    size, values = _toy_read(args.state)
    if values.size == size:
        raise StateError("every index is measured")
    print(values.size)
    return 0


def _toy_add(args):
    with locked(args.state, made_by="toy init"):
        size, values = _toy_read(args.state)
        _toy_write(args.state, size, [*values, args.value])
    return 0


def _toy_replay_arguments(parser):
    parser.add_argument("--values", type=float, nargs="+", required=True)
    parser.set_defaults(func=lambda args: print(f"mean {np.mean(args.values):g}") or 0)


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setattr(instruments, "INSTRUMENTS", dict(instruments.INSTRUMENTS))
    register(Instrument("toy", "a counter", state_format=TOY_FORMAT, add_lab_steps=_toy_lab_steps,
                        add_replay_arguments=_toy_replay_arguments))


def test_an_instrument_added_from_outside_runs_its_lab_and_replay(toy, tmp_path, capsys):
    state = str(tmp_path / "toy.h5")
    assert main(["lab", "--instrument", "toy", "init", "--state", state, "--size", "2"]) == 0
    assert main(["lab", "next", "--state", state]) == 0  # the state names its instrument
    assert capsys.readouterr().out.split() == ["0"]
    assert main(["lab", "add", "--state", state, "--value", "1.5"]) == 0
    assert main(["lab", "next", "--state", state]) == 0
    assert capsys.readouterr().out.split() == ["1"]
    assert _toy_read(state)[1].tolist() == [1.5]
    assert main(["replay", "--instrument", "toy", "--values", "1", "3"]) == 0
    assert capsys.readouterr().out.strip() == "mean 2"
    with pytest.raises(SystemExit):  # the overview lists it
        main(["lab", "--help"])
    assert "toy      a counter" in capsys.readouterr().out


def test_register_refuses_a_taken_name_and_a_half_instrument(toy):
    with pytest.raises(ValueError, match="exists already"):
        register(Instrument("toy", "again", state_format="x", add_lab_steps=_toy_lab_steps))
    with pytest.raises(ValueError, match="state format go together"):
        Instrument("half", "a lab without a state format", add_lab_steps=_toy_lab_steps)
    with pytest.raises(ValueError, match="neither a lab nor a replay"):
        Instrument("none", "nothing")
    with pytest.raises(ValueError, match="lower-case identifier"):
        Instrument("Two Words", "bad", add_replay_arguments=_toy_replay_arguments)


def test_the_state_names_its_instrument_and_a_wrong_one_is_refused(tmp_path, capsys):
    rows, lines = str(tmp_path / "rows.h5"), str(tmp_path / "lines.h5")
    (tmp_path / "groups.csv").write_text("0\n0\n1\n1\n")
    assert main(["--quiet", "lab", "--instrument", "rows", "init", "--groups", str(tmp_path / "groups.csv"),
                 "--state", rows]) == 0
    assert main(["--quiet", "lab", "--instrument", "mri", "init", "--state", lines, "--shape", "32", "32",
                 "--wavelet", "db2", "--level", "2"]) == 0
    capsys.readouterr()
    assert main(["--quiet", "lab", "next", "--state", lines]) == 0  # the line lab: prints the centre lines
    assert [int(v) for v in capsys.readouterr().out.split()] == [15, 16]
    assert main(["lab", "--instrument", "mri", "next", "--state", rows]) == 2
    assert "one of the rows lab; give --instrument rows" in capsys.readouterr().err
    # the camera and the rows share a state format: either name reads it
    assert main(["--quiet", "lab", "--instrument", "camera", "next", "--state", rows, "--out",
                 str(tmp_path / "r.csv")]) == 0
    assert main(["lab", "init", "--state", str(tmp_path / "new.h5")]) == 2
    assert "give --instrument (rows, camera, mri)" in capsys.readouterr().err
    assert main(["lab", "--instrument", "sonar", "init"]) == 2
    assert "the instruments with a lab are rows, camera, mri" in capsys.readouterr().err


def test_the_camera_lab_shows_basis_images_by_the_prediction(tmp_path, capsys):
    state = str(tmp_path / "camera.h5")
    assert main(["lab", "--instrument", "camera", "init", "--basis", "haar", "--side", "8", "--state", state]) == 0
    assert "strategy predict" in capsys.readouterr().out
    with pytest.raises(SystemExit):  # a camera has no groups file
        main(["lab", "--instrument", "camera", "init", "--groups", "g.csv", "--state", state])


def test_the_older_names_say_their_new_form_once(tmp_path, capsys):
    (tmp_path / "groups.csv").write_text("0\n1\n")
    state = str(tmp_path / "s.h5")
    assert main(["--quiet", "design", "init", "--groups", str(tmp_path / "groups.csv"), "--state", state]) == 0
    assert capsys.readouterr().err.splitlines() == ["note: 'design' is now 'lab --instrument rows' (same steps and "
                                                     "options)"]
    assert main(["--quiet", "mri-lab", "init", "--state", str(tmp_path / "m.h5"), "--shape", "32", "32",
                 "--level", "2", "--wavelet", "db2"]) == 0
    assert capsys.readouterr().err.splitlines() == ["note: 'mri-lab' is now 'lab --instrument mri' (same steps and "
                                                     "options)"]
    assert main(["mri", str(tmp_path / "missing.npy"), "--lines", "8", "--out", str(tmp_path / "o.h5")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "note: 'mri' is now 'replay --instrument mri' (same steps and options)"
    assert "missing.npy: no such file" in err[1]
    assert main(["replay", "--side", "8", "--values", str(tmp_path / "none.csv"), "--out",
                 str(tmp_path / "o.csv")]) == 2
    assert capsys.readouterr().err.splitlines()[0] == ("note: 'replay' without --instrument is 'replay --instrument "
                                                       "camera'")
