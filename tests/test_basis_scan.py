"""Basis scans: the photon-noise instrument and replaying acquisition orders on a scan's values."""

import copy
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import Ridge

from adaptcs.bases.images import make_basis
from adaptcs.design.basis_scan import photon_basis_scan, replay_basis_scan, replay_recording
from adaptcs.design.candidates import READ_FIT_BUDGET, converged_copy
from adaptcs.models import GroupARD
from adaptcs.models.wavelet_tree import WaveletTreeSpikeSlab

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_photon_scan_is_unbiased_with_the_poisson_variance():
    basis = make_basis("haar", 8)
    image = np.random.default_rng(0).uniform(0, 1, basis.d)
    photons, draws = 200.0, 3000
    rng = np.random.default_rng(1)
    values = np.array([photon_basis_scan(basis, image, photons, rng) for _ in range(draws)])
    patterns = basis.synthesize(np.eye(basis.d))
    expected_var = (np.maximum(patterns, 0) @ image + np.maximum(-patterns, 0) @ image) / photons
    z = (values.mean(axis=0) - basis.analyze(image)) / np.sqrt(expected_var / draws)
    assert np.abs(z).max() < 4.5
    np.testing.assert_allclose(values.var(axis=0, ddof=1), expected_var, rtol=0.12)
    with pytest.raises(ValueError, match="non-negative"):
        photon_basis_scan(basis, -image, photons)


def scan(side=16, photons=1e4, seed=0):
    basis = make_basis("haar", side)
    r, c = np.mgrid[:side, :side]
    image = 0.2 + 0.6 * ((r - 0.4 * side) ** 2 + (c - 0.6 * side) ** 2 < (0.25 * side) ** 2)
    return basis, image.ravel(), photon_basis_scan(basis, image.ravel(), photons, np.random.default_rng(seed))


def test_topdown_replay_is_a_fit_on_the_first_coefficients():
    basis, _, values = scan()
    est = GroupARD(basis.groups(), noise_var=1e-3)
    replay = replay_basis_scan(est, basis, values, "topdown", [0.1, 0.25], batch_size=7)
    assert replay.n.tolist() == [25, 64] and np.array_equal(replay.measured, np.arange(64))
    direct = GroupARD(basis.groups(), noise_var=1e-3).fit(np.eye(basis.d)[:25], values[:25])
    np.testing.assert_allclose(replay.coef[0], direct.coef_, atol=1e-8)


@pytest.mark.parametrize("order", ["design", "topdown", "predict", "random"])
def test_orders_choose_only_measured_coefficients_once_approximation_first(order):
    basis, _, values = scan()
    values = values.copy()
    missing = np.random.default_rng(2).choice(np.arange(16, basis.d), size=100, replace=False)
    values[missing] = np.nan
    replay = replay_basis_scan(WaveletTreeSpikeSlab(basis), basis, values, order, [0.5], batch_size=16, rng=0)
    assert replay.measured.size == 128 == np.unique(replay.measured).size
    assert not np.isin(replay.measured, missing).any()
    assert np.array_equal(np.sort(replay.measured[:16]), np.arange(16))
    with pytest.raises(ValueError, match="only 156 of 256"):
        replay_basis_scan(WaveletTreeSpikeSlab(basis), basis, values, order, [0.7])


def test_designed_basis_rows_are_the_largest_posterior_variances():
    basis, _, values = scan()
    replay = replay_basis_scan(WaveletTreeSpikeSlab(basis), basis, values, "design", [20 / 256], batch_size=4, rng=0)
    after_approximation = WaveletTreeSpikeSlab(basis).fit(np.eye(basis.d)[:16], values[:16])
    variance = np.where(np.arange(basis.d) < 16, -np.inf, after_approximation.coef_var_)
    chosen = replay.measured[16:20]
    rest = np.setdiff1d(np.arange(16, basis.d), chosen)
    assert variance[chosen].min() >= variance[rest].max() * (1 - 1e-10)


def test_designed_basis_rows_break_ties_by_the_random_order_not_the_units():
    """Unmeasured coefficients of one context tie in posterior variance up to rounding: the replay's random
    order decides between them, so the same scan in other units is replayed the same way, and another seed
    reorders the ties only."""
    basis, _, values = scan()
    orders = [replay_basis_scan(WaveletTreeSpikeSlab(basis), basis, v, "design", [40 / 256], batch_size=4,
                                rng=seed).measured for v, seed in ((values, 0), (1e-3 * values, 0), (values, 1))]
    np.testing.assert_array_equal(orders[0], orders[1])
    assert not np.array_equal(orders[0], orders[2])
    variance = WaveletTreeSpikeSlab(basis).fit(np.eye(basis.d)[:16], values[:16]).coef_var_
    np.testing.assert_allclose(np.sort(variance[orders[0][16:20]]), np.sort(variance[orders[2][16:20]]), rtol=1e-10)


@pytest.mark.slow
def test_a_tracked_replay_does_not_depend_on_its_checkpoints():
    """The tree tracks its hyper-parameters from refit to refit and fits each checkpoint's reconstruction apart:
    asking for an extra checkpoint changes neither the order nor the later reconstructions (the shipped 64 x 64
    camera scan, where a checkpoint fit to convergence once sent the finest scale's p_on to 0.003)."""
    from adaptcs.readers import read_vector
    from adaptcs.replay import scan_values

    basis = make_basis("haar", 64)
    values = scan_values(basis, read_vector(EXAMPLES / "single_pixel" / "camera_haar64.csv"))
    est = WaveletTreeSpikeSlab(basis, learn=WaveletTreeSpikeSlab.LEARNABLE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        # batches of 64: 16 refits, not 64 (fitting the tracked estimator itself to convergence at the checkpoints
        # changes the order with these batches too)
        few = replay_basis_scan(est, basis, values, "design", [0.125, 0.25], batch_size=64, rng=0)
        more = replay_basis_scan(est, basis, values, "design", [0.125, 0.1875, 0.25], batch_size=64, rng=0)
    np.testing.assert_array_equal(few.measured, more.measured)
    np.testing.assert_allclose(few.coef, more.coef[[0, 2]], rtol=1e-12, atol=1e-15)


@pytest.mark.slow
def test_a_fit_that_is_read_goes_on_to_the_fixed_point_or_says_it_did_not():
    """A checkpoint's fit that stops short with the estimator's own max_iter goes on from there (then from scratch)
    with READ_FIT_BUDGET times as many iterations: it ends where one long fit from scratch ends; where none
    converges it is marked not converged, with one warning."""
    basis, _, values = scan()
    rng = np.random.default_rng(1)
    chosen = np.concatenate([np.arange(16), 16 + rng.permutation(basis.d - 16)[:24]])  # 40 rows: 445 iterations
    rows, y = np.eye(basis.d)[chosen], values[chosen]
    tracked = WaveletTreeSpikeSlab(basis, prediction=True, max_iter=100, warm_start=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        read = converged_copy(tracked, rows, y)
    long = WaveletTreeSpikeSlab(basis, prediction=True, max_iter=5000).fit(rows, y)
    assert long.converged_ and 100 < long.n_iter_ <= 100 * READ_FIT_BUDGET
    assert read.converged_ and read.get_params()["max_iter"] == 100 and not hasattr(tracked, "coef_")
    np.testing.assert_allclose(read.coef_, long.coef_, rtol=1e-2, atol=1e-3 * np.abs(long.coef_).max())
    short = WaveletTreeSpikeSlab(basis, prediction=True, max_iter=20, warm_start=True)  # 180 and 180 < 445
    with pytest.warns(ConvergenceWarning, match="in 180 iterations from the tracked fit nor in as many from scratch"):
        assert not converged_copy(short, rows, y).converged_


def test_a_fit_that_is_read_is_the_better_fixed_point_of_the_tracked_fit_and_one_from_scratch():
    """A tracked fit whose hyper-parameters come from other data (pure noise) goes on to a fixed point of EM that
    is 2.7 nats below where a long fit from scratch ends: the fit that is read is the long fit's, and the tracked
    estimator is left as it was."""
    basis, _, values = scan(photons=1e5, seed=3)
    chosen = np.concatenate([np.arange(16), 16 + np.random.default_rng(3).permutation(basis.d - 16)[:40]])
    rows, y = np.eye(basis.d)[chosen], values[chosen]
    learn = WaveletTreeSpikeSlab.LEARNABLE
    tracked = WaveletTreeSpikeSlab(basis, prediction=True, learn=learn, warm_start=True)
    tracked.fit(rows, np.random.default_rng(9).normal(0.0, 1.0, y.shape[0]))
    before = tracked.noise_var_
    stays = copy.deepcopy(tracked).fit(rows, y)
    long = WaveletTreeSpikeSlab(basis, prediction=True, learn=learn, max_iter=5000).fit(rows, y)
    assert stays.converged_ and long.converged_ and stays.log_evidence_ < long.log_evidence_ - 1.0  # the bad mode
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        read = converged_copy(tracked, rows, y)
    assert read.converged_ and read.log_evidence_ == pytest.approx(long.log_evidence_, abs=0.01)
    np.testing.assert_allclose(read.coef_, long.coef_, rtol=1e-2, atol=1e-3 * np.abs(long.coef_).max())
    assert tracked.noise_var_ == before


def test_replay_checks_its_input():
    basis, _, values = scan()
    est = WaveletTreeSpikeSlab(basis)
    for kwargs, match in [({"order": "spiral"}, "order must be"), ({"values": values[:10]}, "one entry per"),
                          ({"fractions": [0.0]}, r"in \(0, 1\]"), ({"fractions": [1.5]}, r"in \(0, 1\]")]:
        call = {"order": "topdown", "values": values, "fractions": [0.1], **kwargs}
        with pytest.raises(ValueError, match=match):
            replay_basis_scan(est, basis, call["values"], call["order"], call["fractions"])
    with pytest.raises(ValueError, match="coef_var_"):
        replay_basis_scan(Ridge(fit_intercept=False), basis, values, "design", [0.1])


def test_scan_values_from_patterns_and_gains():
    from adaptcs.replay import scan_values

    basis = make_basis("haar", 8)
    c = np.random.default_rng(3).normal(size=basis.d)
    shown = np.array([5, 9, 5, 40])
    gains = np.array([8.0, -2.0, 4.0, 0.5])
    rows = basis.synthesize(np.eye(basis.d)[shown] * gains[:, None])
    y = rows @ basis.synthesize(c) + np.array([0.0, 0.0, 0.4, 0.0])
    values = scan_values(basis, y, rows)
    assert np.flatnonzero(~np.isnan(values)).tolist() == [5, 9, 40]
    np.testing.assert_allclose(values[[9, 40]], c[[9, 40]])
    assert values[5] == pytest.approx(c[5] + 4 * 0.4 / (64 + 16))  # least squares over the two showings
    with pytest.raises(ValueError, match="not multiples of one haar basis image"):
        scan_values(basis, y, rows + 0.1)
    with pytest.raises(ValueError, match="64 values"):
        scan_values(basis, y)


def test_replay_command_writes_the_table(tmp_path):
    from adaptcs.cli import main

    basis, _, values = scan(side=16)
    values[200:] = np.nan  # a partial scan
    np.savetxt(tmp_path / "scan.csv", values)
    out, images = tmp_path / "replay.csv", tmp_path / "replay.npz"
    status = main(["--quiet", "replay", "--side", "16", "--values", str(tmp_path / "scan.csv"), "--orders", "design",
                   "topdown", "--fractions", "0.25", "0.5", "--batch", "16", "--out", str(out), "--images",
                   str(images)])
    assert status == 0
    import pandas as pd

    table = pd.read_csv(out)
    assert table[["order", "n"]].values.tolist() == [["design", 64], ["design", 128], ["topdown", 64],
                                                    ["topdown", 128]]
    assert np.isfinite(table["psnr"]).all() and set(table["converged"]) <= {0, 1}
    saved = np.load(images)
    assert saved["full"].shape == (256,) and "design_128" in saved.files
    assert main(["replay", "--side", "16", "--values", str(tmp_path / "scan.csv"), "--fractions", "0.9",
                 "--out", str(out)]) == 2  # more than was measured: a message, exit 2


def test_replay_never_overwrites_its_inputs_or_one_output_with_the_other(tmp_path, capsys):
    """--out or --images naming the values file, the rows file or each other (also through a link) is refused with
    one line before anything runs, and every file is left as it was."""
    from adaptcs.cli import main

    basis, _, values = scan(side=16)
    np.savetxt(tmp_path / "scan.csv", values)
    np.savetxt(tmp_path / "rows.csv", basis.row_patterns(np.eye(basis.d)), delimiter=",")  # the patterns shown
    (tmp_path / "link.csv").symlink_to(tmp_path / "scan.csv")
    before = {name: (tmp_path / name).read_bytes() for name in ("scan.csv", "rows.csv")}
    common = ["replay", "--side", "16", "--values", str(tmp_path / "scan.csv"), "--orders", "topdown",
              "--fractions", "0.25"]
    for outputs, named in ((["--out", "scan.csv"], "--values"), (["--out", "link.csv"], "--values"),
                           (["--out", "t.csv", "--images", "t.csv"], "--out"),
                           (["--out", "rows.csv", "--rows", "rows.csv"], "--rows")):
        args = [part if part.startswith("--") else str(tmp_path / part) for part in outputs]
        capsys.readouterr()
        assert main(common + args) == 2
        assert f"names the file of {named}" in capsys.readouterr().err
    assert {name: (tmp_path / name).read_bytes() for name in before} == before
    assert not (tmp_path / "t.csv").exists()


def test_odd_scans_are_refused_in_one_line_and_rounded_patterns_are_read(tmp_path, capsys):
    """Values whose squares overflow, an all-zero scan, complex or boolean .npy files and patterns scaled into
    overflow are refused with a message (exit 2, no traceback); patterns written with 6 significant digits, a
    common export, are basis images all the same."""
    from adaptcs.cli import main

    basis, _, values = scan(side=16)
    patterns = basis.row_patterns(np.eye(basis.d))
    common = ["replay", "--side", "16", "--orders", "topdown", "--fractions", "0.25", "--out", str(tmp_path / "o.csv")]
    cases = {"huge": (values * 1e200, None, "squares overflow"), "zero": (0 * values, None, "every measured value"),
             "complex": (values.astype(complex), None, "complex128 values"), "bool": (values > 0.5, None, "bool"),
             "tiny patterns": (values, patterns * 1e-300, "outside 1e-150..1e+150")}
    for name, (vals, rows, message) in cases.items():
        np.save(tmp_path / "v.npy", vals)
        args = common + ["--values", str(tmp_path / "v.npy")]
        if rows is not None:
            np.save(tmp_path / "rows.npy", rows)
            args += ["--rows", str(tmp_path / "rows.npy")]
        capsys.readouterr()
        assert main(args) == 2, name
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, (name, err)
    np.savetxt(tmp_path / "rows.csv", patterns, fmt="%.6g", delimiter=",")
    np.save(tmp_path / "v.npy", values)
    assert main(common + ["--values", str(tmp_path / "v.npy"), "--rows", str(tmp_path / "rows.csv")]) == 0


def test_scan_files_take_headers_and_comments_and_every_parse_error_names_the_file(tmp_path, capsys):
    """Issue 46, point 5: a header line and # comments are read as --help says (they were refused); blank lines
    ending a file are not values; every file that cannot be read is named in one line (9 were not)."""
    from adaptcs.cli import main
    from adaptcs.replay import load_scan

    basis, _, values = scan(side=16)
    patterns = basis.row_patterns(np.eye(basis.d))
    np.savetxt(tmp_path / "plain.csv", values)
    np.savetxt(tmp_path / "rows.csv", patterns, delimiter=",")
    np.savetxt(tmp_path / "noted.csv", values, header="value\nfrom the camera, 2026-11-26", footer="end",
               comments="# ")
    (tmp_path / "noted.csv").write_text("value\n" + (tmp_path / "noted.csv").read_text() + "\n\n")
    text = (tmp_path / "rows.csv").read_text().splitlines()
    (tmp_path / "noted_rows.csv").write_text("\n".join(["# shown in this order", ",".join(f"p{i}" for i in
                                                         range(basis.d))] + text[:3] + ["# a pause"] + text[3:]))
    plain = load_scan("haar", 16, tmp_path / "plain.csv")[1]
    np.testing.assert_array_equal(load_scan("haar", 16, tmp_path / "noted.csv")[1], plain)
    np.testing.assert_allclose(load_scan("haar", 16, tmp_path / "plain.csv", tmp_path / "noted_rows.csv")[1], plain,
                               rtol=1e-12, atol=1e-12)
    bad = {"word.csv": "1\n2\nabc\n", "two.csv": "1,2\n3,4\n", "short.csv": "1\n2\n", "inf.csv": "1\ninf\n",
           "binary.csv": b"\x89HDF\r\n\x1a\n\x00\xff", "empty.csv": "# nothing\n", "cut.npy": b"\x93NUMPY\x01"}
    for name, content in bad.items():
        (tmp_path / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    (tmp_path / "ragged.csv").write_text("\n".join(text[:2] + ["1,2,3"] + text[2:]))
    common = ["replay", "--side", "16", "--orders", "topdown", "--fractions", "0.25", "--out", str(tmp_path / "o.csv")]
    for values_file, rows_file, says in [("word.csv", None, "line 3 has 'abc'"), ("two.csv", None, "line 1 has 2"),
                                         ("short.csv", None, "has 256 values"), ("inf.csv", None, "line 2 is infinite"),
                                         ("binary.csv", None, "not a text file"), ("empty.csv", None, "no values"),
                                         ("cut.npy", None, "cannot read this .npy"),
                                         ("plain.csv", "ragged.csv", "not a table of numbers"),
                                         ("plain.csv", "short.csv", "rows must have shape")]:
        args = common + ["--values", str(tmp_path / values_file)]
        if rows_file:
            args += ["--rows", str(tmp_path / rows_file)]
        capsys.readouterr()
        assert main(args) == 2, values_file
        err = capsys.readouterr().err
        named = rows_file if rows_file in ("ragged.csv",) else values_file
        assert str(tmp_path / named) in err and says in err and "Traceback" not in err, (values_file, err)


def test_reading_a_scan_s_patterns_takes_memory_of_the_order_of_the_patterns(tmp_path):
    """Issue 46, point 5: a 1 GB rows file took 11 GB. The patterns are parsed by numpy's C reader and transformed a
    block at a time; the peak (numpy's allocations, traced) stays within 3x the patterns' array (it was 4x)."""
    import tracemalloc

    from adaptcs.replay import load_scan

    basis = make_basis("haar", 32)
    np.savetxt(tmp_path / "rows.csv", basis.row_patterns(np.eye(basis.d)), delimiter=",")
    np.savetxt(tmp_path / "values.csv", np.random.default_rng(0).normal(size=basis.d))
    tracemalloc.start()
    try:
        load_scan("haar", 32, tmp_path / "values.csv", tmp_path / "rows.csv")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 * 8 * basis.d * basis.d


def test_a_scan_of_another_depth_is_replayed_at_its_depth(tmp_path):
    """A camera scan with an 8 x 8 approximation (depth 2 at 32 x 32, where the default depth is 3): given its
    patterns, the depth is found from them; given values alone, --level says it; rows of no depth are refused."""
    from adaptcs.cli import main
    from adaptcs.replay import infer_level, load_scan

    camera = make_basis("haar", 32, level=2)
    r, c = np.mgrid[:32, :32]
    image = (0.2 + 0.6 * ((r - 12) ** 2 + (c - 19) ** 2 < 64)).ravel()
    values = photon_basis_scan(camera, image, 1e4, np.random.default_rng(0))
    order = np.random.default_rng(1).permutation(camera.d)
    gains = np.random.default_rng(2).choice([-2.0, 0.5, 1.0], camera.d)
    rows = gains[:, None] * camera.synthesize(np.eye(camera.d)[order])  # patterns shown, with gains and signs
    shown = gains * values[order]
    basis, found = infer_level("haar", 32, shown, rows)
    assert basis.level == 2
    np.testing.assert_allclose(found, values, atol=1e-9)
    np.save(tmp_path / "rows.npy", rows)
    np.savetxt(tmp_path / "shown.csv", shown)
    np.savetxt(tmp_path / "values.csv", values)
    assert load_scan("haar", 32, tmp_path / "shown.csv", tmp_path / "rows.npy")[0].level == 2
    out = tmp_path / "replay.csv"
    for extra in ([], ["--level", "2"]):
        args = ["--quiet", "replay", "--side", "32", "--orders", "topdown", "--fractions", "0.25", "--out", str(out)]
        source = ["--values", str(tmp_path / "values.csv")] + extra if extra else \
            ["--values", str(tmp_path / "shown.csv"), "--rows", str(tmp_path / "rows.npy")]
        assert main(args + source) == 0
    with pytest.raises(ValueError, match="at any depth"):
        infer_level("haar", 32, shown[:3], rows[:3] + 0.01)


def test_prediction_prior_replays_with_photon_noise():
    # the replay's "prediction" prior with the photon noise model runs every order to converged reconstructions
    from adaptcs.replay import make_estimator, replay_scan

    basis, image, values = scan(side=32)
    assert make_estimator("prediction", basis, values, "photon").prediction
    table, images = replay_scan(basis, values, orders=("design", "predict"), fractions=(0.2,), prior="prediction",
                                noise="photon")
    assert table["converged"].tolist() == [1, 1] and np.isfinite(table["psnr"]).all()
    with pytest.raises(ValueError, match="tree priors"):
        make_estimator("scales", basis, values, "photon")


def test_replay_command_takes_a_known_photon_count(tmp_path, capsys):
    """``--photons`` gives the photon model the camera's gain: the replay's noise variance is then the mean light
    over it at every checkpoint (not learned); without ``--noise photon`` it is refused before anything runs."""
    from adaptcs.cli import main

    basis, image, values = scan(side=16, photons=400.0)
    np.savetxt(tmp_path / "scan.csv", values)
    common = ["--quiet", "replay", "--side", "16", "--values", str(tmp_path / "scan.csv"), "--orders", "predict",
              "--fractions", "0.25", "0.5"]
    out = tmp_path / "known.csv"
    assert main(common + ["--noise", "photon", "--photons", "400", "--out", str(out)]) == 0
    import pandas as pd

    table = pd.read_csv(out)
    coarse = basis.synthesize(np.where(basis.scales() == 0, values, 0.0))
    np.testing.assert_allclose(table["noise_var"], basis.pattern_light(coarse).mean() / 400.0, rtol=1e-9)
    assert table["converged"].tolist() == [1, 1]
    for bad in (["--photons", "400"], ["--noise", "photon", "--photons", "0"]):
        assert main(common + bad + ["--out", str(tmp_path / "bad.csv")]) == 2
        assert "--photons must be positive and goes with --noise photon" in capsys.readouterr().err
    assert not (tmp_path / "bad.csv").exists()


@pytest.mark.parametrize("wavelet", ["haar", "bior2.2"])
def test_the_designer_on_a_pool_of_basis_images_is_the_replay(wavelet):
    """A user who drives the camera with the ask/tell designer (a pool of the basis images, the tree) gets the
    replay's rows and reconstructions: approximation first, a tracked fit choosing, a converged fit read. With a
    biorthogonal wavelet the pool is its analysis functions (what the camera shows)."""
    from adaptcs.design import SequentialDesigner

    _, image, _ = scan(side=32)
    basis = make_basis(wavelet, 32)
    values = photon_basis_scan(basis, image, 1e4, np.random.default_rng(4))
    fractions, batch = (0.125, 0.25), 4
    replay = replay_basis_scan(WaveletTreeSpikeSlab(basis, learn=WaveletTreeSpikeSlab.LEARNABLE), basis, values,
                               "design", fractions, batch_size=batch, rng=3)
    pool = basis.row_patterns(np.eye(basis.d))  # the camera's patterns, in pixels
    designer = SequentialDesigner(WaveletTreeSpikeSlab(basis, learn=WaveletTreeSpikeSlab.LEARNABLE), strategy="pool",
                                  pool=pool, basis=basis, batch_size=batch, rng=3)
    coefficients, flags = [], []
    while designer.n_told_ < replay.n[-1]:
        rows = designer.ask()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            designer.tell(rows, values[np.abs(basis.row_coefficients(rows)).argmax(axis=1)])
            if designer.n_told_ in replay.n:
                coefficients.append(designer.estimator_.coef_.copy())
                flags.append(int(designer.estimator_.converged_))
    # every reconstruction says whether it converged (at EM's iteration limit, round-off between the designer's
    # dense rows and the replay's sparse ones may decide the flag differently)
    assert set(flags) <= {0, 1}
    chosen = np.abs(basis.row_coefficients(designer.X_)).argmax(axis=1)
    np.testing.assert_array_equal(chosen, replay.measured)
    full = basis.synthesize(values)
    for ours, theirs in zip(coefficients, replay.coef, strict=True):
        gap = 10 * np.log10(np.mean((basis.synthesize(theirs) - full) ** 2)
                            / np.mean((basis.synthesize(ours) - full) ** 2))
        assert abs(gap) < 0.2


def test_a_designer_told_an_earlier_sessions_tracked_fit_goes_on_as_that_session():
    """tell_fitted: a designer given the rows an earlier session told and that session's tracked fit asks and fits
    as the earlier session's designer goes on to, bit for bit; it refuses where it cannot stand in for tell."""
    from adaptcs.design import SequentialDesigner

    _, image, _ = scan(side=16)
    basis = make_basis("haar", 16, level=2)
    values = photon_basis_scan(basis, image, 1e4, np.random.default_rng(2))
    pool = basis.row_patterns(np.eye(basis.d))

    def camera():
        return SequentialDesigner(WaveletTreeSpikeSlab(basis, prediction=True), strategy="pool", pool=pool,
                                  basis=basis, batch_size=8, rng=5)

    def measure(designer):
        rows = designer.ask()
        designer.tell(rows, values[np.abs(basis.row_coefficients(rows)).argmax(axis=1)])

    session = camera()
    for _ in range(10):
        measure(session)
    later = camera().tell_fitted(session.X_, session.y_, copy.deepcopy(session.tracked_))
    assert later.n_told_ == session.n_told_ and later.tracked_.warm_start
    for _ in range(3):
        measure(session)
        measure(later)
    np.testing.assert_array_equal(later.X_, session.X_)
    for name in WaveletTreeSpikeSlab.FITTED_ATTRIBUTES:
        np.testing.assert_array_equal(getattr(later.tracked_, name), getattr(session.tracked_, name), err_msg=name)
    # what a fit sets is what FITTED_ATTRIBUTES names (the lab keeps exactly these between commands)
    assert {k for k in vars(session.tracked_) if k.endswith("_") and not k.startswith("_")} == \
        set(WaveletTreeSpikeSlab.FITTED_ATTRIBUTES)
    with pytest.raises(ValueError, match="rows have been told already"):
        later.tell_fitted(session.X_, session.y_, session.tracked_)
    with pytest.raises(ValueError, match="needs a pool of basis images"):
        SequentialDesigner(WaveletTreeSpikeSlab(basis), strategy="predict", basis=basis).tell_fitted(
            session.X_, session.y_, session.tracked_)
    small = make_basis("haar", 8, level=1)
    with pytest.raises(ValueError, match="not fitted on 64 coefficients"):
        SequentialDesigner(WaveletTreeSpikeSlab(small), strategy="pool", pool=small.row_patterns(np.eye(64)),
                           basis=small).tell_fitted(np.eye(64)[:4], np.ones(4), session.tracked_)


@pytest.mark.slow
def test_a_le_gall_scan_is_replayed_with_its_analysis_patterns(tmp_path):
    """A camera scan in the biorthogonal Le Gall 5/3 wavelet (bior2.2): the patterns shown are the analysis
    functions (with gains and signs), each measuring one coefficient; the replay finds the depth and the values
    from them, and reconstructs by the synthesis (a full scan gives the image back); designed rows beat top-down."""
    from adaptcs.cli import main
    from adaptcs.replay import infer_level, replay_scan

    camera = make_basis("bior2.2", 32, level=2)
    r, c = np.mgrid[:32, :32]
    image = (0.2 + 0.6 * ((r - 12) ** 2 + (c - 19) ** 2 < 64) + 0.1 * (c > 24)).ravel()
    values = photon_basis_scan(camera, image, 1e6, np.random.default_rng(0))
    np.testing.assert_allclose(camera.synthesize(values), image, atol=0.05)  # the synthesis of a full scan
    gains = np.random.default_rng(2).choice([-2.0, 0.5, 1.0], camera.d)
    rows = gains[:, None] * camera.row_patterns(np.eye(camera.d))
    basis, found = infer_level("bior2.2", 32, gains * values, rows)
    assert basis.level == 2 and basis.wavelet == "bior2.2"
    np.testing.assert_allclose(found, values, atol=1e-9)
    with pytest.raises(ValueError, match="at any depth"):  # the synthesis functions are not what a camera shows
        infer_level("bior2.2", 32, values, camera.synthesize(np.eye(camera.d)))
    table, _ = replay_scan(basis, values, orders=("design", "topdown"), fractions=(0.15,), batch_size=8)
    psnr = table.set_index("order")["psnr"]
    assert set(table["converged"]) <= {0, 1} and psnr["design"] > psnr["topdown"] + 1.0, table
    np.savetxt(tmp_path / "values.csv", values)
    assert main(["--quiet", "replay", "--basis", "bior2.2", "--side", "32", "--level", "2", "--values",
                 str(tmp_path / "values.csv"), "--orders", "predict", "--fractions", "0.2", "--out",
                 str(tmp_path / "replay.csv")]) == 0


def test_a_hadamard_scan_replays_through_the_same_loop():
    """A new operator (Walsh-Hadamard patterns, dense rows on the wavelet coefficients) needs nothing but its
    file: the replay measures its coarsest patterns first, designs by the exact gains of the fit so far, and with
    every pattern does better than the inverse transform."""
    from adaptcs.models import GroupSpikeSlabEP
    from adaptcs.operators import HadamardPatterns, MeasurementOperator

    basis, image, _ = scan()
    op = HadamardPatterns(16, basis)
    noise = 1e-3
    recording = op.record(image) + np.sqrt(noise) * np.random.default_rng(1).standard_normal(op.n_candidates)
    est = GroupSpikeSlabEP(basis.groups(), p0=0.3, v0=0.1, noise_var=noise)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        replay = replay_recording(est, op, recording, "design", [20 / 256, 1.0], batch_size=4, rng=0)
        first = est.fit(op.rows(np.arange(16)), recording[:16])
    np.testing.assert_array_equal(replay.measured[:16], op.coarse_to_fine()[:16])
    gains = MeasurementOperator.gains(op, first)  # the generic formula, not the replay's path
    gains[:16] = -np.inf
    assert gains[replay.measured[16:20]].min() >= gains.max() * (1 - 1e-10)  # many tie: the random order decides
    full = basis.synthesize(replay.coef[-1])
    inverse = op.patterns(np.arange(256)).T @ recording  # the patterns are orthonormal: least squares, no prior
    assert np.linalg.norm(full - image) < np.linalg.norm(inverse - image)
    with pytest.raises(ValueError, match="wavelet basis images"):
        replay_recording(est, op, recording, "predict", [0.5])


def test_the_shipped_example_scan_is_what_its_script_makes(tmp_path):
    """examples/single_pixel/camera_haar64.csv is reproduced by its script (seeded), written where --out says."""
    out = tmp_path / "scan.csv"
    subprocess.run([sys.executable, str(EXAMPLES / "single_pixel" / "make_scan.py"), "--out", str(out)], check=True,
                   capture_output=True)
    np.testing.assert_allclose(np.loadtxt(out), np.loadtxt(EXAMPLES / "single_pixel" / "camera_haar64.csv"),
                               rtol=1e-9, atol=1e-12)
