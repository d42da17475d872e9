"""The lab loop's command line: ask, measure, tell, estimate, with all state in one HDF5 file."""

import fcntl
import hashlib
import json
import os
import re
import resource
import stat
import subprocess
import sys
import threading
import warnings

import h5py
import numpy as np
import pandas as pd
import pytest
from sklearn.exceptions import ConvergenceWarning

from adaptcs import _io as adaptcs_io
from adaptcs._io import write_numbers
from adaptcs.cli import main
from adaptcs.design import SequentialDesigner
from adaptcs.lab import rows as lab
from adaptcs.lab import state as lab_state
from adaptcs.models import GroupSpikeSlabEP


@pytest.fixture
def bench(tmp_path):
    """A folder with a groups file and a hidden signal (16 groups of 4, 2 active)."""
    groups = np.repeat(np.arange(16), 4)
    np.savetxt(tmp_path / "groups.csv", groups, fmt="%d")
    w = np.where(np.isin(groups, [2, 9]), np.random.default_rng(0).normal(size=64), 0.0)
    return tmp_path, groups, w


def design(*args):
    return main(["lab", "--instrument", "rows", *map(str, args)])


def measure(folder, w, rng, noise=0.1, rows="rows.csv"):
    X = np.loadtxt(folder / rows, delimiter=",", ndmin=2)
    np.savetxt(folder / "y.csv", X @ w + rng.normal(0.0, noise, X.shape[0]))
    return X


def digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_lab_loop_learns_the_signal_without_an_oracle(bench, capsys):
    folder, groups, w = bench
    state = folder / "s.h5"
    rng = np.random.default_rng(1)
    assert design("init", "--groups", folder / "groups.csv", "--state", state) == 0
    for _ in range(6):
        assert design("next", "--state", state, "--batch", 4, "--out", folder / "rows.csv") == 0
        measure(folder, w, rng)
        assert design("add", "--state", state, "--rows", folder / "rows.csv", "--values", folder / "y.csv") == 0
    assert design("estimate", "--state", state, "--out", folder / "estimate.csv") == 0
    estimate = pd.read_csv(folder / "estimate.csv")
    assert list(estimate.columns) == ["coefficient", "group", "mean", "std", "group_prob"]
    assert np.linalg.norm(estimate["mean"] - w) / np.linalg.norm(w) < 0.1  # 24 rows for 64 coefficients
    assert set(estimate.loc[estimate["group_prob"] > 0.5, "group"]) == {2, 9}
    assert "learned" in capsys.readouterr().out
    s = lab.load_state(state)
    assert s.X.shape == (24, 64) and s.was_asked.all() and s.asked.shape == (24, 64) and s.measured.all()
    np.testing.assert_array_equal(s.added_by, np.repeat(np.arange(6), 4))
    assert [e["command"] for e in s.log] == ["init"] + ["next", "add"] * 6
    assert s.log[1]["chosen_by"] == "random (no measurements yet)" and s.log[3]["chosen_by"] == "design"
    # the estimate is GSS-EP fitted on exactly the measurements told, learning p0, v0 and the noise
    with h5py.File(state) as f:
        X, y = f["X"][()], f["y"][()]
        assert '"learn": ["p0", "v0", "noise_var"]' in f.attrs["estimator"].decode()
    refit = s.estimator().fit(X, y)
    np.testing.assert_allclose(estimate["mean"], refit.coef_, rtol=1e-8, atol=1e-10)


def test_given_hyperparameters_binary_rows_and_rows_nobody_asked_for(bench):
    folder, groups, w = bench
    state = folder / "s.h5"
    rng = np.random.default_rng(2)
    design("init", "--groups", folder / "groups.csv", "--state", state, "--p0", 0.125, "--v0", 1.0,
           "--noise-var", 0.01, "--row-constraint", "binary", "--seed", 3)
    X0 = rng.normal(size=(10, 64))  # measurements taken before any advice
    np.savetxt(folder / "own.csv", X0, delimiter=",")
    np.savetxt(folder / "y.csv", X0 @ w + rng.normal(0, 0.1, 10))
    assert design("add", "--state", state, "--rows", folder / "own.csv", "--values", folder / "y.csv") == 0
    assert design("next", "--state", state, "--batch", 3, "--out", folder / "rows.csv") == 0
    rows = measure(folder, w, rng)
    np.testing.assert_array_equal(np.abs(rows), 1.0)  # row norm sqrt(d): entries +-1
    design("add", "--state", state, "--rows", folder / "rows.csv", "--values", folder / "y.csv")
    s = lab.load_state(state)
    np.testing.assert_array_equal(s.was_asked, [False] * 10 + [True] * 3)
    design("next", "--state", state, "--batch", 2, "--out", folder / "rows.csv")  # asked, never measured
    np.testing.assert_array_equal(lab.load_state(state).measured, [True] * 3 + [False] * 2)
    est = s.estimator()
    assert est.learn == () and (est.p0, est.v0, est.noise_var) == (0.125, 1.0, 0.01)
    # the first designed +-1 row beats an average +-1 row (tr V) under the posterior from the rows measured before
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # 10 rows, 64 coefficients: EP ends by its damping
        fitted = GroupSpikeSlabEP(groups, p0=0.125, v0=1.0, noise_var=0.01).fit(X0, s.y[:10])
    assert rows[0] @ fitted.cov_matvec(rows[0]) > 1.2 * fitted.coef_var_.sum()  # beats an average +-1 row


@pytest.mark.parametrize("content, values, match", [
    ("1,2,3\n", "1\n", "rows have 3 entries; this state has 64"),
    (None, "1\n2\n", "2 measured values for 1 rows"),
    (None, "nan\n", "non-finite value"),
    ("x" * 10, "1\n", "must be numbers"),
    (None, "1,2\n3,4\n", "one column"),
])
def test_bad_files_are_clear_errors_that_change_nothing(bench, capsys, content, values, match):
    folder, _, _ = bench
    state = folder / "s.h5"
    design("init", "--groups", folder / "groups.csv", "--state", state)
    before = digest(state)
    (folder / "rows.csv").write_text(content if content is not None else ",".join(["1"] * 64) + "\n")
    (folder / "y.csv").write_text(values)
    assert design("add", "--state", state, "--rows", folder / "rows.csv", "--values", folder / "y.csv") == 2
    assert match in capsys.readouterr().err
    assert digest(state) == before


def test_init_never_overwrites_measurements_and_checks_its_input(bench, capsys):
    folder, _, _ = bench
    state = folder / "s.h5"
    design("init", "--groups", folder / "groups.csv", "--state", state)
    assert design("init", "--groups", folder / "groups.csv", "--state", state) == 2
    assert "exists (it holds measurements)" in capsys.readouterr().err
    (folder / "bad.csv").write_text("0\n1.5\n")
    assert design("init", "--groups", folder / "bad.csv", "--state", folder / "t.h5") == 2
    assert "non-negative integers" in capsys.readouterr().err
    assert design("init", "--groups", folder / "groups.csv", "--state", folder / "t.h5", "--p0", 1.5) == 2
    assert not (folder / "t.h5").exists()
    assert design("next", "--state", folder / "missing.h5", "--out", folder / "r.csv") == 2
    assert "no such state file" in capsys.readouterr().err


def asked_and_measured(folder, w, batch, seed):
    """A new state (groups of ``bench``) that asked for ``batch`` rows, measured into rows.csv and y.csv."""
    state = folder / "s.h5"
    design("init", "--groups", folder / "groups.csv", "--state", state)
    design("next", "--state", state, "--batch", batch, "--out", folder / "rows.csv")
    measure(folder, w, np.random.default_rng(seed))
    return state


@pytest.mark.parametrize("where", ["building", "renaming"])
def test_an_interrupted_write_leaves_the_state_as_it_was(bench, monkeypatch, where):
    folder, _, w = bench
    state = asked_and_measured(folder, w, batch=2, seed=4)
    before = digest(state)

    def dies(*args, **kwargs):
        raise KeyboardInterrupt

    if where == "building":
        monkeypatch.setattr(h5py.Group, "create_dataset", dies)
    else:  # the new file is complete on disk, the rename never happens
        monkeypatch.setattr(adaptcs_io.os, "replace", dies)
    with pytest.raises(KeyboardInterrupt):
        lab.add(state, folder / "rows.csv", folder / "y.csv")
    assert digest(state) == before
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith(".s.h5.tmp")) == []


def test_temporary_files_of_a_killed_command_are_removed_by_the_next(bench):
    folder, _, w = bench
    state = asked_and_measured(folder, w, batch=2, seed=4)
    (folder / ".s.h5.tmp-999999").write_bytes(b"half an HDF5 file")
    assert design("add", "--state", state, "--rows", folder / "rows.csv", "--values", folder / "y.csv") == 0
    assert not (folder / ".s.h5.tmp-999999").exists()
    assert lab.load_state(state).X.shape == (2, 64)


def test_pool_rows_measured_are_not_asked_again(bench):
    folder, _, w = bench
    state = folder / "s.h5"
    pool = np.random.default_rng(5).normal(size=(8, 64))
    np.savetxt(folder / "pool.csv", pool, delimiter=",")
    design("init", "--groups", folder / "groups.csv", "--state", state, "--strategy", "pool", "--pool",
           folder / "pool.csv", "--noise-var", 0.01)
    asked = []
    for _ in range(4):
        design("next", "--state", state, "--batch", 2, "--out", folder / "rows.csv")
        asked.append(measure(folder, w, np.random.default_rng(6), noise=0.1))
        design("add", "--state", state, "--rows", folder / "rows.csv", "--values", folder / "y.csv")
    chosen = sorted(int(np.flatnonzero((pool == row).all(axis=1))[0]) for rows in asked for row in rows)
    assert chosen == list(range(8))  # every candidate exactly once


@pytest.fixture
def photo(tmp_path):
    """A 16 x 16 photograph (scikit-image's camera) with intensities in [0, 1], flattened."""
    from skimage import data
    from skimage.transform import resize

    return tmp_path, resize(data.camera() / 255.0, (16, 16), anti_aliasing=True).ravel()


def test_a_basis_state_asks_for_pixel_patterns_and_returns_the_image(photo, capsys):
    from adaptcs.bases.images import make_basis

    folder, x = photo
    basis, state, rng = make_basis("haar", 16), folder / "s.h5", np.random.default_rng(5)
    assert design("init", "--basis", "haar", "--side", 16, "--state", state) == 0
    assert "haar basis of 16 x 16 images" in capsys.readouterr().out
    for _ in range(4):
        assert design("next", "--state", state, "--batch", 16, "--out", folder / "rows.csv") == 0
        rows = measure(folder, x, rng, noise=0.05)  # the instrument measures pixels
        np.testing.assert_allclose(np.linalg.norm(rows, axis=1), 16.0)  # row norm sqrt(d)
        assert design("add", "--state", state, "--rows", folder / "rows.csv", "--values", folder / "y.csv") == 0
    assert "per scale" in capsys.readouterr().out
    assert design("estimate", "--state", state, "--out", folder / "est.csv", "--image", folder / "im.csv") == 0
    image = np.loadtxt(folder / "im.csv", delimiter=",")
    assert image.shape == (16, 16)
    # 64 rows for 256 pixels: 0.136 (random rows: 0.217)
    assert np.linalg.norm(image.ravel() - x) / np.linalg.norm(x) < 0.18
    # the estimate is GSS-EP with a prior per Haar scale on the coefficients Psi a of the pixel rows told
    s = lab.load_state(state)
    assert s.X.shape == (64, 256) and s.basis_name == "haar" and s.side == 16
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        refit = GroupSpikeSlabEP(basis.groups(), scales=basis.scales(), p0=s.estimator().p0,
                                 v0=s.estimator().v0, noise_var=s.estimator().noise_var,
                                 learn=("p0", "v0", "noise_var")).fit(basis.analyze(s.X), s.y)
        if not refit.converged_:  # the lab takes the fit it shows on to its convergence test
            refit.converge(basis.analyze(s.X), s.y)
    estimate = pd.read_csv(folder / "est.csv")
    np.testing.assert_allclose(estimate["mean"], refit.coef_, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(image.ravel(), basis.synthesize(refit.coef_), atol=1e-10)


def test_the_prediction_scan_at_the_instrument_shows_basis_images(photo):
    from adaptcs.bases.images import make_basis

    folder, x = photo
    basis, state, rng = make_basis("haar", 16), folder / "s.h5", np.random.default_rng(6)
    design("init", "--basis", "haar", "--side", 16, "--state", state, "--strategy", "predict")
    shown = []
    for _ in range(3):
        assert design("next", "--state", state, "--batch", 8, "--out", folder / "rows.csv") == 0
        rows = measure(folder, x, rng, noise=0.01)
        design("add", "--state", state, "--rows", folder / "rows.csv", "--values", folder / "y.csv")
        coefficients = basis.analyze(rows)
        assert np.all(np.count_nonzero(np.abs(coefficients) > 1e-9, axis=1) == 1)  # each a basis image
        shown.extend(np.argmax(np.abs(coefficients), axis=1))
    scales = basis.scales()[shown]
    assert len(set(shown)) == 24 and np.all(np.diff(scales) >= 0)  # never twice, coarse to fine
    assert np.all(scales[: int(np.sum(basis.scales() == 0))] == 0)  # the approximation first


@pytest.mark.parametrize("args, match", [
    (["--basis", "haar", "--side", 16, "--groups", "GROUPS"], "exactly one of a groups file"),
    ([], "exactly one of a groups file"),
    (["--basis", "haar"], "needs the image side"),
    (["--groups", "GROUPS", "--side", 16], "needs --basis"),
    (["--basis", "haar", "--side", 12], "basis 'haar' at side 12"),
    (["--basis", "dct", "--side", 16, "--strategy", "predict"], "wavelet"),
    (["--basis", "haar", "--side", 16, "--row-constraint", "binary"], "binary"),
])
def test_basis_options_are_checked(bench, capsys, args, match):
    folder, _, _ = bench
    args = [folder / "groups.csv" if a == "GROUPS" else a for a in args]
    assert design("init", "--state", folder / "s.h5", *args) == 2
    assert match in capsys.readouterr().err
    assert not (folder / "s.h5").exists()


def test_version_1_states_still_open_and_an_image_needs_a_basis(bench, capsys):
    folder, _, w = bench
    state = asked_and_measured(folder, w, batch=8, seed=7)
    design("add", "--state", state, "--rows", folder / "rows.csv", "--values", folder / "y.csv")
    with h5py.File(state, "a") as f:  # as adaptcs wrote it before bases
        f.attrs["format_version"] = 1
        del f.attrs["basis"], f.attrs["side"]
    s = lab.load_state(state)
    assert s.basis_name == "" and s.basis is None and s.X.shape == (8, 64)
    assert design("estimate", "--state", state, "--out", folder / "e.csv", "--image", folder / "i.csv") == 2
    assert "has no basis" in capsys.readouterr().err
    with h5py.File(state, "a") as f:
        f.attrs["format_version"] = 5
    assert design("estimate", "--state", state, "--out", folder / "e.csv") == 2
    assert "version 5 is not supported" in capsys.readouterr().err


# -- the state file never loses or silently changes a measurement ------------------------------------------------

def added_twice(folder, w):
    """A state with two adds of two asked rows each (add 0 and add 1)."""
    state = asked_and_measured(folder, w, batch=2, seed=4)
    assert design("add", "--state", state, "--rows", folder / "rows.csv", "--values", folder / "y.csv") == 0
    design("next", "--state", state, "--batch", 2, "--out", folder / "rows.csv")
    measure(folder, w, np.random.default_rng(5))
    assert design("add", "--state", state, "--rows", folder / "rows.csv", "--values", folder / "y.csv") == 0
    return state


def test_a_state_that_is_not_a_regular_file_is_refused_at_once(tmp_path, capsys):
    """A FIFO given as --state would block the read forever (holding the lock): refused before it is opened."""
    fifo = tmp_path / "state.h5"
    os.mkfifo(fifo)
    for command in (("next", "--out", tmp_path / "rows.csv"), ("estimate", "--out", tmp_path / "e.csv")):
        capsys.readouterr()
        assert design(command[0], "--state", fifo, *command[1:]) == 2
        assert "not a regular file" in capsys.readouterr().err


def test_the_lock_file_is_never_a_planted_link_and_comes_after_the_state_is_known(bench, capsys):
    """Issue 46, point 7: a link planted as the lock file (a shared folder) is refused and its target untouched;
    no lock file is made for a state that is missing or not a regular file; the message names the state."""
    folder, _, w = bench
    state = added_twice(folder, w)
    victim = folder / "victim.txt"
    victim.write_text("precious")
    lock = folder / f".{state.name}.lock"
    lock.unlink()
    lock.symlink_to(victim)
    before = digest(state)
    capsys.readouterr()
    assert design("add", "--state", state, "--rows", folder / "rows.csv", "--values", folder / "y.csv",
                  "--again") == 2
    assert "is a link" in capsys.readouterr().err
    assert victim.read_text() == "precious" and digest(state) == before
    for command in (("add", "--rows", folder / "rows.csv", "--values", folder / "y.csv"), ("remove", "--batch", 0),
                    ("next", "--out", folder / "r.csv")):
        assert design(command[0], "--state", folder / "missing" / "x.h5", *command[1:]) == 2
        err = capsys.readouterr().err
        assert "no such state file" in err and ".lock" not in err
    assert not (folder / "missing").exists()
    assert design("init", "--groups", folder / "groups.csv", "--state", folder / "missing" / "x.h5") == 2
    assert "does not exist" in capsys.readouterr().err
    fifo = folder / "fifo.h5"
    os.mkfifo(fifo)
    for command in (("init", "--groups", folder / "groups.csv", "--force"), ("remove", "--batch", 0)):
        assert design(command[0], "--state", fifo, *command[1:]) == 2
        assert "not a regular file" in capsys.readouterr().err
        assert not (folder / ".fifo.h5.lock").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another owner needs root")
def test_a_rewritten_state_keeps_its_owner_group_and_mode(bench):
    folder, _, w = bench
    state = added_twice(folder, w)
    os.chown(state, 1234, 5678)
    os.chmod(state, 0o640)
    assert design("remove", "--state", state, "--batch", 0) == 0
    info = state.stat()
    assert (info.st_uid, info.st_gid, info.st_mode & 0o777) == (1234, 5678, 0o640)


def test_no_output_file_may_be_the_state_file(bench, capsys):
    folder, _, w = bench
    state = added_twice(folder, w)
    (folder / "link.h5").symlink_to(state)
    (folder / "hard.h5").hardlink_to(state)
    before = digest(state)
    for out in (state, folder / "link.h5", folder / "hard.h5", folder / "sub" / ".." / "s.h5"):
        assert design("next", "--state", state, "--out", out) == 2
        assert "names the state file" in capsys.readouterr().err
        assert design("estimate", "--state", state, "--out", out) == 2
        assert "names the state file" in capsys.readouterr().err
        assert digest(state) == before
    assert lab.load_state(state).X.shape == (4, 64)


def test_a_flipped_bit_anywhere_is_an_error_or_changes_nothing(bench):
    folder, _, w = bench
    state = added_twice(folder, w)
    good = lab.load_state(state)
    data = bytearray(state.read_bytes())
    with h5py.File(state, "r") as f:  # a bit inside the measured values themselves, and bits all over the file
        y_offset = f["y"].id.get_chunk_info(0).byte_offset
    offsets = [y_offset + 3] + list(range(0, len(data), max(1, len(data) // 300)))
    refused = 0
    for offset in offsets:
        broken = bytearray(data)
        broken[offset] ^= 1 << (offset % 8)
        state.write_bytes(bytes(broken))
        try:
            read = lab.load_state(state)
        except lab.StateError as exc:
            assert str(state) in str(exc)
            refused += 1
            continue
        for name in lab_state.DATASETS + lab_state.REMOVED:  # read back: then it is exactly what was written
            np.testing.assert_array_equal(getattr(read, name), getattr(good, name), err_msg=f"byte {offset}")
        assert (read.log, read.given, read.strategy, read.seed) == (good.log, good.given, good.strategy, good.seed)
    assert refused > len(offsets) // 4  # most bytes of a small state are its data and metadata


def test_damaged_states_are_messages_and_every_command_refuses_them(bench, capsys):
    folder, _, w = bench
    state = added_twice(folder, w)
    data = bytearray(state.read_bytes())
    (folder / "other.h5").write_bytes(bytes(data))
    with h5py.File(state, "r") as f:
        y_offset = f["y"].id.get_chunk_info(0).byte_offset
    data[y_offset + 3] ^= 4
    state.write_bytes(bytes(data))
    before = digest(state)
    for args in (("next", "--out", folder / "r.csv"), ("estimate", "--out", folder / "e.csv"),
                 ("add", "--rows", folder / "rows.csv", "--values", folder / "y.csv", "--again"),
                 ("remove", "--batch", 0)):
        assert design(args[0], "--state", state, *args[1:]) == 2
        err = capsys.readouterr().err
        assert str(state) in err and "damaged" in err and "Traceback" not in err
        assert digest(state) == before
    with h5py.File(folder / "other.h5", "a") as f:
        del f["y"]
    assert design("estimate", "--state", folder / "other.h5", "--out", folder / "e.csv") == 2
    assert "lacks its dataset 'y'" in capsys.readouterr().err


def test_the_state_keeps_no_text_in_the_unchecksummed_heap(bench):
    """A variable-length string lives in HDF5's global heap, which has no checksum: a flipped length there made
    reading spin forever (issue 46). Every text attribute is fixed-length, every dataset chunked and checksummed."""
    folder, _, w = bench
    state = added_twice(folder, w)
    with h5py.File(state) as f:
        for name in f.attrs:
            kind = f.attrs.get_id(name).get_type()
            assert not (isinstance(kind, h5py.h5t.TypeStringID) and kind.is_variable_str()), name
        for name, dataset in f.items():
            assert dataset.dtype.kind != "O" and (dataset.size == 0 or dataset.fletcher32), name


def version_2_state(path, state, **settings):
    """``state`` written as adaptcs wrote version 2 (no checksums, no removed rows, the log as text); ``settings``
    replace attributes."""
    with h5py.File(path, "w") as f:
        for key, value in (("format", lab_state.STATE_FORMAT), ("format_version", 2), ("strategy", state.strategy),
                           ("row_constraint", state.row_constraint), ("row_norm", np.nan), ("seed", state.seed),
                           ("given", "{}"), ("basis", ""), ("side", 0), ("estimator", "{}")):
            f.attrs[key] = settings.get(key, value)
        for name in lab_state.DATASETS:
            f[name] = getattr(state, name)
        f["log"] = np.array([json.dumps(e) for e in state.log], dtype=h5py.string_dtype())


def test_old_states_open_with_a_note_and_inconsistent_ones_are_refused(bench, capsys):
    folder, _, w = bench
    good = lab.load_state(added_twice(folder, w))
    version_2_state(folder / "old.h5", good)
    capsys.readouterr()
    old = lab.load_state(folder / "old.h5")
    assert "without checksums" in capsys.readouterr().err
    np.testing.assert_array_equal(old.y, good.y)
    assert design("add", "--state", folder / "old.h5", "--rows", folder / "rows.csv", "--values", folder / "y.csv",
                  "--again") == 0
    with h5py.File(folder / "old.h5") as f:  # written back with checksums
        assert f.attrs["format_version"] == lab_state.STATE_VERSION and f["y"].fletcher32
    good.y = good.y[:-1]  # a state whose parts do not fit together
    version_2_state(folder / "bad.h5", good)
    assert design("next", "--state", folder / "bad.h5", "--out", folder / "r.csv") == 2
    assert "does not fit together" in capsys.readouterr().err


@pytest.mark.parametrize("args, match", [
    (("--seed", "99999999999999999999999"), "seed must be an integer in 0..9223372036854775807"),
    (("--v0", "1e300", "--noise-var", "1e-300"), r"v0 must be a number in 1e-100..1e\+100"),
    (("--noise-var", "1e-300"), "noise_var must be a number in"), (("--row-norm", "1e300"), "row_norm must be"),
    (("--basis", "haar", "--side", "65536"), r"4,294,967,296 unknowns is beyond the lab's 1,048,576"),
    (("--basis", "dct", "--side", "2048"), "unknowns is beyond"),
])
def test_init_refuses_settings_no_fit_can_use_before_allocating(bench, capsys, args, match):
    """Issue 46, points 8 and 10: a side whose image cannot fit is refused before anything is allocated (65536
    allocated until memory ran out), a seed beyond int64 and hyper-parameters that overflow in one line."""
    folder, _, _ = bench
    source = () if "--basis" in args else ("--groups", folder / "groups.csv")
    assert design("init", "--state", folder / "s.h5", *source, *args) == 2
    err = capsys.readouterr().err
    assert re.search(match, err) and "Traceback" not in err and not (folder / "s.h5").exists()


@pytest.mark.parametrize("settings, match", [
    ({"given": '{"v0": -1}'}, "v0 must be a number in"), ({"given": '{"p0": 1.5}'}, "p0 must be below 1"),
    ({"given": "[1, 2]"}, "must be a mapping"), ({"given": '{"v0": 1e300}'}, "v0 must be a number in"),
    ({"seed": -5}, "seed must be an integer"), ({"basis": "haar", "side": 4}, "does not have the 64 coefficients"),
    ({"basis": "fourier", "side": 8}, "basis must be one of"), ({"row_norm": -2.0}, "row_norm must be"),
])
def test_an_old_state_with_invalid_settings_is_refused_never_upgraded(bench, capsys, settings, match):
    """Issue 46, point 6: a version-2 file (no checksums) with settings init would refuse is not written back with
    fresh checksums (which would make the damage permanent): every command refuses it, the file unchanged."""
    folder, _, w = bench
    version_2_state(folder / "old.h5", lab.load_state(added_twice(folder, w)), **settings)
    before = digest(folder / "old.h5")
    capsys.readouterr()
    assert design("add", "--state", folder / "old.h5", "--rows", folder / "rows.csv", "--values", folder / "y.csv",
                  "--again") == 2
    err = capsys.readouterr().err
    assert "does not fit together" in err and re.search(match, err) and "Traceback" not in err
    assert digest(folder / "old.h5") == before


@pytest.mark.parametrize("rows, values, match", [
    ("1e300", "1.0", "overflows"),
    ("1.0", "1e300", "overflows"),
    ("1.0", "1e14", "times the largest told so far"),
])
def test_absurd_rows_and_values_are_refused_before_they_poison_the_state(bench, capsys, rows, values, match):
    folder, _, w = bench
    state = added_twice(folder, w)
    before = digest(state)
    row = np.ones(64)
    row[5] = float(rows)
    np.savetxt(folder / "bad_rows.csv", row[None, :], delimiter=",")
    (folder / "bad_y.csv").write_text(values + "\n")
    assert design("add", "--state", state, "--rows", folder / "bad_rows.csv", "--values", folder / "bad_y.csv") == 2
    assert match in capsys.readouterr().err
    assert digest(state) == before
    assert design("next", "--state", state, "--out", folder / "r.csv") == 0


def test_the_designer_refuses_absurd_measurements_after_its_first_fit(bench):
    _, groups, w = bench
    rng = np.random.default_rng(0)
    X = rng.normal(size=(8, 64))
    designer = SequentialDesigner(GroupSpikeSlabEP(groups, p0=0.2, v0=1.0, noise_var=0.01), rng=0)
    designer.tell(X, X @ w)
    for row, value in ((np.full(64, 1e300), 1.0), (np.ones(64), 1e300), (np.ones(64), 1e15)):
        with pytest.raises(ValueError, match="refused"):
            designer.tell(row, value)
        assert designer.n_told_ == 8 and not designer.failure_


def test_a_batch_added_by_mistake_is_taken_back_and_kept(bench, capsys):
    folder, _, w = bench
    state = added_twice(folder, w)
    good = lab.load_state(state)
    assert design("remove", "--state", state, "--batch", 1) == 0
    s = lab.load_state(state)
    np.testing.assert_array_equal(s.X, good.X[:2])
    np.testing.assert_array_equal(s.removed_X, good.X[2:])
    np.testing.assert_array_equal(s.removed_y, good.y[2:])
    np.testing.assert_array_equal(s.removed_by, [1, 1])
    assert s.measured.tolist() == [True, True, False, False] and s.log[-1]["command"] == "remove"
    capsys.readouterr()
    assert design("remove", "--state", state, "--batch", 1) == 2
    assert "already removed" in capsys.readouterr().err
    assert design("remove", "--state", state, "--batch", 7) == 2
    assert "there is no add 7" in capsys.readouterr().err
    assert design("estimate", "--state", state, "--out", folder / "e.csv") == 0
    # the removed rows can be added again (they are measurements the user wants back)
    assert design("add", "--state", state, "--rows", folder / "rows.csv", "--values", folder / "y.csv") == 0
    np.testing.assert_array_equal(lab.load_state(state).X, good.X)


def test_adding_the_same_files_twice_needs_again(bench, capsys):
    folder, _, w = bench
    state = added_twice(folder, w)
    before = digest(state)
    assert design("add", "--state", state, "--rows", folder / "rows.csv", "--values", folder / "y.csv") == 2
    assert "2 of the 2 rows and values repeat measurements of add 1" in capsys.readouterr().err
    assert digest(state) == before
    # the same measurements re-printed to 12 digits, reordered, or a subset of them (with a new one): refused too
    rows = np.loadtxt(folder / "rows.csv", delimiter=",", ndmin=2)
    y = np.loadtxt(folder / "y.csv", ndmin=1)
    fresh = np.random.default_rng(9).normal(size=(1, 64))
    for name, (r, v, repeated) in {"reprinted": (rows, y, 2), "reordered": (rows[::-1], y[::-1], 2),
                                   "subset": (np.vstack([rows[1:], fresh]), np.r_[y[1:], 0.3], 1)}.items():
        np.savetxt(folder / "r2.csv", r, delimiter=",", fmt="%.12g")
        np.savetxt(folder / "y2.csv", v, fmt="%.12g")
        capsys.readouterr()
        assert design("add", "--state", state, "--rows", folder / "r2.csv", "--values", folder / "y2.csv") == 2, name
        assert f"{repeated} of the {len(v)} rows and values repeat measurements of add 1" in capsys.readouterr().err
        assert digest(state) == before
    # a repeat measurement of the same rows (another value: noise) is a new measurement
    np.savetxt(folder / "y2.csv", y + 0.01)
    assert design("add", "--state", state, "--rows", folder / "rows.csv", "--values", folder / "y2.csv") == 0
    assert design("add", "--state", state, "--rows", folder / "rows.csv", "--values", folder / "y.csv",
                  "--again") == 0
    s = lab.load_state(state)
    assert s.X.shape == (8, 64) and s.log[-1]["repeats"] == 1


@pytest.mark.parametrize("labels, match", [
    ("0\n1e300\n", "up to"), ("0\n2.5\n", "non-negative integers"), ("0,1\n2,3\n", "one per line"),
])
def test_group_labels_must_be_small_non_negative_integers_in_one_column(bench, capsys, labels, match):
    folder, _, _ = bench
    (folder / "g.csv").write_text(labels)
    assert design("init", "--groups", folder / "g.csv", "--state", folder / "t.h5") == 2
    assert match in capsys.readouterr().err
    assert not (folder / "t.h5").exists()


def test_the_state_keeps_its_file_mode(bench):
    folder, _, w = bench
    state = asked_and_measured(folder, w, batch=2, seed=4)
    os.chmod(state, 0o600)
    assert design("add", "--state", state, "--rows", folder / "rows.csv", "--values", folder / "y.csv") == 0
    assert stat.S_IMODE(os.stat(state).st_mode) == 0o600


def test_init_force_waits_for_the_lock_of_a_running_command(bench):
    folder, _, _ = bench
    state = folder / "s.h5"
    design("init", "--groups", folder / "groups.csv", "--state", state)
    done = threading.Event()
    with open(folder / ".s.h5.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # as add or next hold it while they write
        worker = threading.Thread(target=lambda: (lab.init(state, folder / "groups.csv", force=True), done.set()))
        worker.start()
        assert not done.wait(0.5)
        fcntl.flock(handle, fcntl.LOCK_UN)
    worker.join(10)
    assert done.is_set()


def test_a_file_size_limit_ends_with_one_message_and_the_state_unchanged(bench):
    folder, _, w = bench
    state = asked_and_measured(folder, w, batch=2, seed=4)
    before = digest(state)
    limit = state.stat().st_size // 2

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    done = subprocess.run([sys.executable, "-m", "adaptcs", "design", "add", "--state", str(state), "--rows",
                           str(folder / "rows.csv"), "--values", str(folder / "y.csv")], preexec_fn=small_files,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "cannot write the state" in done.stderr and "Traceback" not in done.stderr
    assert len([line for line in done.stderr.splitlines() if "error" in line.lower()]) == 1
    assert digest(state) == before
    assert [p.name for p in folder.iterdir() if ".tmp-" in p.name] == []


def test_a_fit_that_is_not_converged_says_why_and_what_to_do(bench):
    _, groups, w = bench
    designer = SequentialDesigner(GroupSpikeSlabEP(groups, p0=0.2, v0=1.0, noise_var=0.01, max_iter=2), rng=0)
    X = np.random.default_rng(1).normal(size=(12, 64))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        designer.tell(X, X @ w)
    summary = lab._fit_summary(designer)
    assert summary.converged is False and "max_iter=2" in summary.warning and "To converge" in summary.warning


@pytest.mark.slow
def test_a_camera_loop_in_the_lab_scores_as_the_replay(tmp_path, capsys):
    """A single-pixel camera driven from the command line (a Haar basis of depth 2, a pool of its basis images)
    is fitted with the replay's model and told add by add: on the same simulated photon-noise scan it measures the
    replay's rows and its reconstructions are within 0.2 dB of the replay's; a row that is not a basis image turns
    the fit back to GSS-EP."""
    from skimage import data
    from skimage.transform import resize

    from adaptcs.bases.images import make_basis
    from adaptcs.design.basis_scan import photon_basis_scan, replay_basis_scan
    from adaptcs.models import WaveletTreeSpikeSlab

    side, batch, fractions = 32, 16, (0.125, 0.25)
    basis = make_basis("haar", side, level=2)  # an 8 x 8 approximation, as a camera scan
    image = resize(data.camera() / 255.0, (side, side), anti_aliasing=True).ravel()
    values = photon_basis_scan(basis, image, 1e4, np.random.default_rng(0))
    replay = replay_basis_scan(WaveletTreeSpikeSlab(basis, prediction=True), basis, values, "design", fractions,
                               batch_size=batch, rng=0)  # replay_scan's default prior
    pool = basis.synthesize(np.eye(basis.d))  # the camera's patterns, in pixels
    write_numbers(tmp_path / "pool.csv", pool)
    state = tmp_path / "camera.h5"
    assert design("init", "--basis", "haar", "--side", side, "--level", 2, "--strategy", "pool", "--pool",
                  tmp_path / "pool.csv", "--state", state) == 0
    assert "the replay's wavelet tree" in capsys.readouterr().out
    full = basis.synthesize(values)
    peak = full.max() - full.min()
    ours = {}
    while lab.load_state(state).X.shape[0] < int(fractions[-1] * basis.d):
        lab.next_rows(state, tmp_path / "rows.csv", batch)
        rows = np.loadtxt(tmp_path / "rows.csv", delimiter=",", ndmin=2)
        np.savetxt(tmp_path / "y.csv", values[np.abs(basis.analyze(rows)).argmax(axis=1)], fmt="%.17g")
        lab.add(state, tmp_path / "rows.csv", tmp_path / "y.csv")
        n = lab.load_state(state).X.shape[0]
        if n / basis.d in fractions:
            _, summary = lab.estimate(state, tmp_path / "estimate.csv", tmp_path / "image.csv")
            assert summary.model == "WaveletTreeSpikeSlab" and summary.converged
            reconstruction = np.loadtxt(tmp_path / "image.csv", delimiter=",").ravel()
            ours[n] = 10 * np.log10(peak**2 / np.mean((reconstruction - full) ** 2))
    for n, coef in zip(replay.n, replay.coef, strict=True):
        replayed = 10 * np.log10(peak**2 / np.mean((basis.synthesize(coef) - full) ** 2))
        assert abs(ours[n] - replayed) < 0.2, (n, ours[n], replayed)
    measured = np.abs(basis.analyze(lab.load_state(state).X)).argmax(axis=1)
    np.testing.assert_array_equal(measured, replay.measured)
    # a measured row that is not one basis image: the rows are no longer a basis scan, GSS-EP fits them
    np.savetxt(tmp_path / "other.csv", np.ones((1, basis.d)) / side, delimiter=",")
    np.savetxt(tmp_path / "y.csv", [image.sum() / side])
    lab.add(state, tmp_path / "other.csv", tmp_path / "y.csv")
    assert not lab.load_state(state).uses_tree


def test_a_camera_state_keeps_the_tracked_fit_and_asks_what_telling_every_add_again_asks(tmp_path):
    """``next`` keeps the camera loop's tracked fit in the state: the next command tells only the adds since, and
    asks for exactly the rows (and reports exactly the fit) that telling every add again gives; a ``remove`` of an
    add it covers, or a state without it (as version 3 wrote them), falls back to telling every add."""
    from adaptcs.bases.images import make_basis
    from adaptcs.design.basis_scan import photon_basis_scan

    side, batch = 16, 8
    basis = make_basis("haar", side, level=2)
    u = np.arange(side) / side
    image = 0.3 + 0.5 * (np.add.outer(u, u) > 0.8) + 0.2 * np.sin(6 * u)[None, :]
    values = photon_basis_scan(basis, image.ravel(), 1e4, np.random.default_rng(1))
    write_numbers(tmp_path / "pool.csv", basis.synthesize(np.eye(basis.d)))
    state = tmp_path / "camera.h5"
    lab.init(state, basis="haar", side=side, level=2, strategy="pool", pool_path=tmp_path / "pool.csv")

    def step():
        lab.next_rows(state, tmp_path / "rows.csv", batch)
        rows = np.loadtxt(tmp_path / "rows.csv", delimiter=",", ndmin=2)
        np.savetxt(tmp_path / "y.csv", values[np.abs(basis.analyze(rows)).argmax(axis=1)], fmt="%.17g")
        lab.add(state, tmp_path / "rows.csv", tmp_path / "y.csv")

    for _ in range(5):
        step()
    kept = lab.load_state(state)
    assert kept.tracked_rows == 4 * batch and kept.X.shape[0] == 5 * batch  # next saw 4 adds; one add since
    told, fit = kept.saved_tracked_fit()
    assert told == 4 * batch and fit.warm_start and fit.n_features_in_ == basis.d
    again = tmp_path / "again.h5"
    retold = lab.load_state(state)
    retold.tracked_fit = None
    lab.save_state(again, retold)

    def asked(path):
        rows, summary, info = lab.next_rows(path, tmp_path / f"{path.stem}-rows.csv", batch)
        return rows, summary.hyperparameters, info["score"]

    for path in (state, again):
        np.testing.assert_array_equal(lab.load_state(path).X, kept.X)
    ours, theirs = asked(state), asked(again)
    np.testing.assert_array_equal(ours[0], theirs[0])
    assert ours[1:] == theirs[1:]
    # the tracked fits the two paths keep (what estimate starts from): the same to the last bit
    fits = [lab.load_state(path) for path in (state, again)]
    assert fits[0].tracked_rows == fits[1].tracked_rows == 5 * batch
    assert fits[0].tracked_fit.keys() == fits[1].tracked_fit.keys()
    for name, value in fits[0].tracked_fit.items():
        np.testing.assert_array_equal(value, fits[1].tracked_fit[name], err_msg=name)
    # taking back an add the kept fit covers: it no longer applies
    lab.remove(state, 1)
    assert lab.load_state(state).saved_tracked_fit() == (0, None)
    rows, _, _ = lab.next_rows(state, tmp_path / "rows.csv", batch)
    assert rows.shape == (batch, basis.d) and lab.load_state(state).tracked_rows == 4 * batch
    # a damaged tracked fit is refused like any damaged state
    with h5py.File(state, "a") as f:
        f["tracked/coef_"][0] += 1.0
    with pytest.raises(lab.StateError, match="do not match their checksum"):
        lab.load_state(state)


def test_level_is_a_wavelet_depth_kept_in_the_state(tmp_path, capsys):
    from adaptcs.bases.images import make_basis

    state = tmp_path / "s.h5"
    assert design("init", "--basis", "haar", "--side", 16, "--level", 1, "--strategy", "predict", "--state",
                  state) == 0
    assert "depth 1" in capsys.readouterr().out
    loaded = lab.load_state(state)
    assert loaded.level == 1 and loaded.basis.level == 1 and loaded.uses_tree
    np.testing.assert_array_equal(loaded.groups, make_basis("haar", 16, level=1).groups())
    lab.next_rows(state, tmp_path / "rows.csv", 64)  # the 8 x 8 approximation's basis images first
    rows = np.loadtxt(tmp_path / "rows.csv", delimiter=",", ndmin=2)
    assert set(np.abs(loaded.basis.analyze(rows)).argmax(axis=1)) == set(range(64))
    with pytest.raises(lab.StateError, match="--level is the depth of a wavelet basis"):
        lab.init(tmp_path / "t.h5", basis="dct", side=16, level=1)
    with pytest.raises(lab.StateError, match="level must be in 1..4"):
        lab.init(tmp_path / "t.h5", basis="haar", side=16, level=5)
    with pytest.raises(lab.StateError, match="p0"):  # GSS-EP's parameter: the loop keeps GSS-EP
        lab.init(tmp_path / "u.h5", basis="haar", side=16, strategy="predict", p0=1.5)
    assert not lab.init(tmp_path / "u.h5", basis="haar", side=16, strategy="predict", p0=0.2).uses_tree


@pytest.mark.parametrize("given", [False, True])
def test_a_noise_learned_from_few_rows_is_flagged_and_random_rows_are_not_called_best(tmp_path, capsys, given):
    """A lab session on an image (8 x 8, Haar; the instrument's noise variance 1e-4): while the noise is learned
    from fewer than d/4 rows, next and estimate say so and name --noise-var; given, nothing is said. Rows of the
    random start are never called the fit's best."""
    u = np.arange(8) / 8
    image = (0.5 + 0.3 * np.sin(2 * np.pi * u)[:, None] * np.cos(2 * np.pi * u)[None, :]).ravel()
    rng = np.random.default_rng(0)
    state = tmp_path / "lab.h5"
    assert design("init", "--basis", "haar", "--side", 8, "--state", state,
                  *(["--noise-var", "1e-4"] if given else [])) == 0
    random_rows = 0
    for _ in range(6):
        capsys.readouterr()
        assert design("next", "--state", state, "--batch", 2, "--out", tmp_path / "rows.csv") == 0
        said = capsys.readouterr().err
        if lab.load_state(state).log[-1]["chosen_by"].startswith("random"):  # the first 4 rows of 64
            random_rows += 1
            assert "best the current fit suggests" not in said
        rows = np.loadtxt(tmp_path / "rows.csv", delimiter=",", ndmin=2)
        np.savetxt(tmp_path / "y.csv", rows @ image + rng.normal(0.0, 1e-2, len(rows)))
        assert design("add", "--state", state, "--rows", tmp_path / "rows.csv", "--values", tmp_path / "y.csv") == 0
    assert random_rows == 2
    capsys.readouterr()
    assert design("estimate", "--state", state, "--out", tmp_path / "estimate.csv") == 0
    said = capsys.readouterr().err
    if given:
        assert "caution" not in said
        assert lab.load_state(state).designer().estimator_.noise_var_ == pytest.approx(1e-4, rel=1e-12)
    else:
        assert "caution: noise_var=" in said and "learned from 12 rows for 64 unknowns" in said
        assert "--noise-var" in said
