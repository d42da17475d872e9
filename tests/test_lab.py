"""The lab loop's command line: ask, measure, tell, estimate, with all state in one HDF5 file."""

import hashlib
import warnings

import h5py
import numpy as np
import pandas as pd
import pytest
from sklearn.exceptions import ConvergenceWarning

from adaptcs import lab
from adaptcs.cli import main
from adaptcs.models import GroupSpikeSlabEP


@pytest.fixture
def bench(tmp_path):
    """A folder with a groups file and a hidden signal (16 groups of 4, 2 active)."""
    groups = np.repeat(np.arange(16), 4)
    np.savetxt(tmp_path / "groups.csv", groups, fmt="%d")
    w = np.where(np.isin(groups, [2, 9]), np.random.default_rng(0).normal(size=64), 0.0)
    return tmp_path, groups, w


def design(*args):
    return main(["design", *map(str, args)])


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
        assert '"learn": ["p0", "v0", "noise_var"]' in f.attrs["estimator"]
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


def test_an_interrupted_write_leaves_the_state_as_it_was(bench, monkeypatch):
    folder, _, w = bench
    state = asked_and_measured(folder, w, batch=2, seed=4)
    before = digest(state)

    def dies(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(lab.h5py.Dataset, "__setitem__", dies)
    monkeypatch.setattr(lab.h5py.Group, "__setitem__", dies)
    with pytest.raises(KeyboardInterrupt):
        lab.add(state, folder / "rows.csv", folder / "y.csv")
    assert digest(state) == before
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith(".s.h5.tmp")) == []


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
    from adaptcs.basis import make_basis

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
    estimate = pd.read_csv(folder / "est.csv")
    np.testing.assert_allclose(estimate["mean"], refit.coef_, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(image.ravel(), basis.synthesize(refit.coef_), atol=1e-10)


def test_the_prediction_scan_at_the_instrument_shows_basis_images(photo):
    from adaptcs.basis import make_basis

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
        f.attrs["format_version"] = 3
    assert design("estimate", "--state", state, "--out", folder / "e.csv") == 2
    assert "version 3 is not supported" in capsys.readouterr().err
