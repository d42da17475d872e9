"""MRI line design (issue 48): the operator, the block-diagonal posterior against the dense path, the exact line
gains against dense linear algebra, and the shipped data."""

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from adaptcs.bases.separable import (
    LineScan,
    SeparableWavelet,
    centred_dft,
    real_form,
    stack_columns,
    to_image,
    to_kspace,
    unstack_columns,
    zero_filled,
)
from adaptcs.models import _ep
from adaptcs.models._blocks import BlockGaussianModel, BlockRows, SharedBlockRows
from adaptcs.models._gaussian import LinearGaussianModel
from adaptcs.models.line_spike_slab import LineSpikeSlab, pair_profile
from adaptcs.mri.data import colin27_kspace, colin27_slices, simulate
from adaptcs.mri.design import (
    centre_lines,
    design_lines,
    equispaced,
    jittered_density,
    low_to_high,
    variable_density,
)
from adaptcs.mri.greedy import offline_greedy, oracle_choice

MRI_REPLAY = ["replay", "--instrument", "mri"]  # python -m adaptcs replay --instrument mri


def _complex(rng, shape):
    return rng.normal(size=shape) + 1j * rng.normal(size=shape)


def test_kspace_and_wavelet_are_unitary():
    rng = np.random.default_rng(0)
    x = _complex(rng, (16, 24))
    K = to_kspace(x)
    np.testing.assert_allclose(np.linalg.norm(K), np.linalg.norm(x), rtol=1e-13)
    np.testing.assert_allclose(to_image(K), x, atol=1e-13)
    np.testing.assert_allclose(centred_dft(16) @ x @ centred_dft(24).T, K, atol=1e-13)
    # DC at the centre: a constant image has one nonzero sample
    assert np.argmax(np.abs(to_kspace(np.ones((16, 24))))) == np.ravel_multi_index((8, 12), (16, 24))
    basis = SeparableWavelet((16, 24), "db2", 2)
    np.testing.assert_allclose(basis.Wy @ basis.Wy.T, np.eye(16), atol=1e-13)
    np.testing.assert_allclose(basis.inverse(basis.forward(x)), x, atol=1e-12)


def test_lines_measure_each_coefficient_column_by_the_same_matrix():
    rng = np.random.default_rng(1)
    basis = SeparableWavelet((16, 16), "db4", 2)
    x = _complex(rng, (16, 16))
    scan = LineScan(basis, [2, 8, 9, 13])
    K = to_kspace(x)
    C = basis.forward(x)
    np.testing.assert_allclose(scan.column_data(K[scan.lines]), scan.A @ C, atol=1e-12)
    X = SharedBlockRows(scan.real_block(), 16).dense()
    np.testing.assert_allclose(X @ stack_columns(C), stack_columns(scan.A @ C), atol=1e-12)
    np.testing.assert_allclose(unstack_columns(stack_columns(C), 16), C)
    # the whole-image operator (lines of the 2-D DFT) has no entries between columns in coefficient space
    full = np.stack([to_kspace(basis.inverse(e.reshape(16, 16)))[scan.lines].ravel() for e in np.eye(256)], axis=1)
    precision = full.conj().T @ full  # coefficients in row-major (y, x) order
    by_column = precision.reshape(16, 16, 16, 16)
    off = by_column - np.einsum("iajb,ab->iajb", by_column, np.eye(16))
    assert np.max(np.abs(off)) < 1e-12


def test_bad_lines_are_refused():
    basis = SeparableWavelet((16, 16), "haar", 2)
    with pytest.raises(ValueError, match="at most once"):
        LineScan(basis, [1, 1])
    with pytest.raises(ValueError, match="row indices"):
        LineScan(basis, [16])
    with pytest.raises(ValueError, match="shape"):
        LineScan(basis, [1, 2]).column_data(np.zeros((3, 16)))
    with pytest.raises(ValueError, match="not orthogonal"):
        SeparableWavelet((16, 16), "bior2.2", 2)
    with pytest.raises(ValueError, match="divisible"):
        SeparableWavelet((12, 16), "haar", 3)


def test_block_posterior_equals_the_dense_one():
    rng = np.random.default_rng(2)
    rows = SharedBlockRows(rng.normal(size=(6, 10)), 4)
    y, prior_var, shift = rng.normal(size=24), rng.uniform(0.1, 2.0, 40), rng.normal(size=40)
    block = BlockGaussianModel(rows, y, 0.3).posterior(prior_var, shift)
    dense = LinearGaussianModel(rows.dense(), y, 0.3, form="direct").posterior(prior_var, shift)
    np.testing.assert_allclose(block.mean, dense.mean, rtol=1e-10)
    np.testing.assert_allclose(block.var, dense.var, rtol=1e-10)
    np.testing.assert_allclose(block.log_det_marginal(), dense.log_det_marginal(), rtol=1e-12)
    np.testing.assert_allclose(block.log_det(), dense.log_det(), rtol=1e-12)
    np.testing.assert_allclose(block.trace_data(), dense.trace_data(), rtol=1e-10)
    Z = rng.normal(size=(3, 40))
    np.testing.assert_allclose(block.quad_rows(Z), dense.quad_rows(Z), rtol=1e-10)
    np.testing.assert_allclose(block.matvec(Z.T), dense.matvec(Z.T), rtol=1e-10, atol=1e-12)
    V = np.linalg.inv(rows.dense().T @ rows.dense() / 0.3 + np.diag(1 / prior_var))
    R, S = rng.normal(size=(5, 10)), rng.normal(size=(5, 10))
    expected = np.array([[R[k] @ V[q * 10:(q + 1) * 10, q * 10:(q + 1) * 10] @ S[k] for k in range(5)]
                         for q in range(4)])
    np.testing.assert_allclose(block.block_bilinear(R, S), expected, rtol=1e-10)


@pytest.mark.parametrize("shared", [True, False])
def test_block_posterior_updated_in_some_blocks_equals_the_dense_one(shared):
    """The active set's partial update (only some blocks factorised again) against the dense posterior at the new
    values; the posterior it starts from is left as it was."""
    rng = np.random.default_rng(5)
    rows = SharedBlockRows(rng.normal(size=(6, 10)), 4) if shared else BlockRows(rng.normal(size=(4, 6, 10)))
    model = BlockGaussianModel(rows, rng.normal(size=24), 0.3)
    prior_var, shift = rng.uniform(0.1, 2.0, 40), rng.normal(size=40)
    old = model.posterior(prior_var, shift)
    kept = (old.mean.copy(), old.var.copy(), old.factor.copy())
    blocks = np.array([False, True, False, True])
    moved = np.repeat(blocks, 10)
    new_var = np.where(moved, rng.uniform(0.1, 2.0, 40), prior_var)
    new_shift = np.where(moved, rng.normal(size=40), shift)
    updated = old.updated(model, new_var, new_shift, blocks)
    dense = LinearGaussianModel(rows.dense(), model.y, 0.3, form="direct").posterior(new_var, new_shift)
    np.testing.assert_allclose(updated.mean, dense.mean, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(updated.var, dense.var, rtol=1e-10)
    np.testing.assert_allclose(updated.log_det_marginal(), dense.log_det_marginal(), rtol=1e-12)
    Z = rng.normal(size=(3, 40))
    np.testing.assert_allclose(updated.quad_rows(Z), dense.quad_rows(Z), rtol=1e-10)
    for before, now in zip(kept, (old.mean, old.var, old.factor), strict=True):
        np.testing.assert_array_equal(before, now)
    # superseding: the same posterior without copying the factor, which undo gives back as it was
    taken = old.updated(model, new_var, new_shift, blocks, supersede=True)
    assert taken.factor is old.factor
    np.testing.assert_allclose(taken.quad_rows(Z), dense.quad_rows(Z), rtol=1e-10)
    np.testing.assert_array_equal(taken.mean, updated.mean)
    taken.undo()
    np.testing.assert_array_equal(old.factor, kept[2])


def _small_acquisition(n=16, seed=3):
    rng = np.random.default_rng(seed)
    basis = SeparableWavelet((n, n), "haar", 2)
    C = np.where(rng.random((n, n)) < 0.15, _complex(rng, (n, n)), 0.0)
    C[: n // 4, : n // 4] = _complex(rng, (n // 4, n // 4)) * 3
    K = to_kspace(basis.inverse(C)) + 0.05 * _complex(rng, (n, n))
    return basis, K, 2 * 0.05**2


@pytest.mark.parametrize("learn", [(), ("p0", "v0")])
def test_block_ep_fit_equals_the_dense_ep_fit(learn, monkeypatch):
    basis, K, noise_var = _small_acquisition()
    # iterate for iterate: every block factorised every iteration (the active set that freezes blocks at their
    # fixed point is checked against the fixed point in test_block_fit_equals_the_dense_fit_at_its_fixed_point_32x32)
    monkeypatch.setattr(_ep, "_group_blocks", lambda *args: None)
    # learning: enough lines for EP to reach its fixed point. With 6 lines it stops short and the two paths' last
    # iterates part by rounding (0.8 % with numpy 2.4 / scipy 1.17): learning amplifies it, so compare fixed points
    lines = np.array([2, 3, 5, 6, 7, 8, 9, 10, 12]) if learn else np.array([3, 6, 7, 8, 9, 12])
    fits = []
    for dense in (False, True):
        model = LineSpikeSlab(basis, noise_var=noise_var, p0=0.2, v0=1.0, learn=learn, max_iter=300,
                              dense_rows=dense)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            fits.append(model.fit(K[lines], lines))
    block, dense = fits
    # the same iteration on both paths (with fixed hyper-parameters EP stops short of its fixed point here: few
    # lines, d = 512): the Gaussian part is what differs, and it must agree to rounding all along
    assert block.converged_ == dense.converged_ and block.n_iter_ == dense.n_iter_
    assert block.converged_ or not learn
    np.testing.assert_allclose(block.coef_, dense.coef_, atol=1e-8 * np.max(np.abs(dense.coef_)))
    np.testing.assert_allclose(block.v0_, dense.v0_, rtol=1e-6)
    np.testing.assert_allclose(block.p0_, dense.p0_, rtol=1e-6)
    np.testing.assert_allclose(block.log_evidence_, dense.log_evidence_, rtol=1e-8)


def test_line_gains_equal_dense_log_determinants():
    basis, K, noise_var = _small_acquisition()
    n = 16
    lines = np.array([6, 7, 8, 9, 2])
    model = LineSpikeSlab(basis, noise_var=noise_var, p0=0.2, v0=1.0, learn=())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(K[lines], lines)
    run = model._run
    s = run.hyper.noise_var
    X = SharedBlockRows(model.scan_.real_block(), n).dense()
    V = np.linalg.inv(X.T @ X / s + np.diag(1.0 / run.sites.var))  # EP's Gaussian, dense
    gains = model.line_gains()
    expected = []
    for ky in range(n):  # all of line ky's 2n real rows, across every column, at once
        B = SharedBlockRows(real_form(model.scan_.Fy_Wt[[ky]]), n).dense()
        expected.append(0.5 * np.linalg.slogdet(np.eye(2 * n) + B @ V @ B.T / s)[1])
    np.testing.assert_allclose(gains, expected, rtol=1e-9)
    assert np.argmax(gains) not in lines


def test_design_loop_measures_new_lines_and_reads_converged_fits():
    basis, K, noise_var = _small_acquisition()
    model = LineSpikeSlab(basis, noise_var=noise_var, p0=0.2, v0=1.0, learn=())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        run = design_lines(K, model, start=centre_lines(16, 4), budget=8, checkpoints=(6,))
    assert len(set(run.lines.tolist())) == 8 and run.lines.shape == (8,)
    assert sorted(run.fits) == [6, 8]
    assert run.refits == 4 and len(run.gains) == 4
    # the first choice is the line of largest gain under the fit on the start lines
    first = LineSpikeSlab(basis, noise_var=noise_var, p0=0.2, v0=1.0, learn=())
    start = centre_lines(16, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        first.fit(K[start], start)
    candidates = np.setdiff1d(np.arange(16), start)
    assert run.lines[4] == candidates[np.argmax(first.line_gains(candidates))]


def test_fixed_masks_have_the_budget():
    rng = np.random.default_rng(0)
    for mask in (low_to_high(64, 16), equispaced(64, 16, 4), variable_density(64, 16, 4, rng)):
        assert mask.shape == (16,) and np.unique(mask).shape == (16,)
        assert set(centre_lines(64, 4)) <= set(mask.tolist())
    np.testing.assert_array_equal(centre_lines(8, 2), [3, 4])


def test_shipped_slices_and_simulated_noise():
    test, test_z = colin27_slices("test")
    train, train_z = colin27_slices("train")
    assert test.shape == (8, 370, 301) and train.shape == (8, 370, 301)
    assert not set(test_z.tolist()) & set(train_z.tolist())
    acq = simulate(test[2], 128, noise=0.05, seed=7)
    residual = acq.kspace - to_kspace(acq.reference)
    np.testing.assert_allclose(np.mean(np.abs(residual) ** 2), acq.noise_var, rtol=0.03)
    assert 0.1 < acq.mask.mean() < 0.6
    assert len(colin27_kspace(64, which="train")) == 8
    with pytest.raises(ValueError, match="which"):
        colin27_slices("validation")


def test_pair_profile_is_the_training_images_second_moment_per_pair():
    rng = np.random.default_rng(5)
    basis = SeparableWavelet((16, 16), "haar", 2)
    images = _complex(rng, (3, 16, 16))
    profile = pair_profile(basis, images)
    pair = basis.scale_pair()
    coef = np.array([basis.forward(im) for im in images])
    raw = np.array([np.mean(np.abs(coef[:, pair == q]) ** 2) for q in range(9)])
    np.testing.assert_allclose(profile / profile[0], raw / raw[0], rtol=1e-12)
    np.testing.assert_allclose(np.mean(profile[pair]), 1.0, rtol=1e-12)
    with pytest.raises(ValueError, match="shape"):
        pair_profile(basis, images[0])


def test_profile_sets_every_pairs_slab_variance_from_one_value():
    basis, K, noise_var = _small_acquisition()
    profile = np.linspace(2.0, 0.2, 9)
    lines = np.array([6, 7, 8, 9])
    model = LineSpikeSlab(basis, noise_var=noise_var, p0=0.999, learn=("v0",), profile=profile)
    fit = model.fit(K[lines], lines)
    assert fit.converged_
    np.testing.assert_allclose(fit.v0_ / fit.v0_[0], profile / profile[0], rtol=1e-12)
    # a Gaussian prior: the posterior mean is the linear (Wiener) estimate with those variances, column by column
    scan = LineScan(basis, lines)
    Z = scan.column_data(K[lines])
    pair = basis.scale_pair()
    slab = 2 * fit.v0_[pair] * fit.p0_[pair]  # complex variance, the tiny spike weight folded in by EP's moments
    expected = np.empty((16, 16), complex)
    for q in range(16):
        L = np.diag(slab[:, q])
        expected[:, q] = L @ scan.A.conj().T @ np.linalg.solve(scan.A @ L @ scan.A.conj().T + noise_var * np.eye(4),
                                                              Z[:, q])
    np.testing.assert_allclose(fit.coef_, expected, atol=2e-3 * np.max(np.abs(expected)))
    with pytest.raises(ValueError, match="profile"):
        LineSpikeSlab(basis, noise_var=noise_var, profile=np.ones(3))


def test_line_gains_need_a_fit_and_valid_candidates():
    basis, K, noise_var = _small_acquisition()
    model = LineSpikeSlab(basis, noise_var=noise_var, p0=0.999, learn=())
    with pytest.raises(RuntimeError, match="fit the model"):
        model.line_gains()
    model.fit(K[[7, 8]], [7, 8])
    with pytest.raises(ValueError, match="candidates"):
        model.line_gains([16])
    with pytest.raises(ValueError, match="noise_var"):
        LineSpikeSlab(basis, noise_var=0.0)
    with pytest.raises(ValueError, match="learn"):
        LineSpikeSlab(basis, noise_var=1.0, learn=("noise_var",))


def test_columns_not_converged_are_counted_from_one_undamped_update(monkeypatch):
    import copy

    import adaptcs.models.line_spike_slab as line_spike_slab
    from adaptcs.models._ep import EPProblem

    basis, K, noise_var = _small_acquisition()
    lines = np.array([3, 6, 7, 8, 9, 12])
    model = LineSpikeSlab(basis, noise_var=noise_var, p0=0.2, v0=1.0, learn=())
    assert model.fit(K[lines], lines).converged_  # the fallback takes this fit to its fixed point; without it:
    monkeypatch.setattr(line_spike_slab, "stable_ep", None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        fit = model.fit(K[lines], lines)
    assert not fit.converged_ and 1 <= fit.columns_not_converged_ <= 16
    # independently: one undamped iteration of run_ep from the final sites, its posterior mean compared per column
    run, scan = model._run, model.scan_
    y = stack_columns(scan.column_data(K[lines])) / model._scale
    problem = EPProblem(SharedBlockRows(scan.real_block(), 16), y, model.coef_group, np.zeros(256),
                        group_class=model.group_class, coef_slab=model.coef_slab, v_inf_ratio=300.0, damping=1.0,
                        damping_decay=1.0)
    step = problem.run(run.hyper, copy.deepcopy(run.sites), tol=0.0, max_iter=1)
    size = np.sqrt(np.max(step.post.mean**2 + np.maximum(step.post.var, 0.0)))
    mean_change = (np.abs(step.post.mean - run.post.mean) / size).reshape(16, -1).max(axis=1)
    prob_change = np.abs(step.group_prob - run.group_prob).reshape(16, -1).max(axis=1)
    assert fit.columns_not_converged_ == np.count_nonzero(np.maximum(mean_change, prob_change) > 10 * model.tol)
    converged = LineSpikeSlab(basis, noise_var=noise_var, p0=0.999, learn=()).fit(K[lines], lines)
    assert converged.converged_ and converged.columns_not_converged_ == 0


def test_noise_from_readout_edges_recovers_pure_noise_and_a_simulated_scan():
    from adaptcs.mri.noise import noise_from_readout_edges

    rng = np.random.default_rng(11)
    pure = 0.3 * np.sqrt(0.5) * _complex(rng, (400, 256))  # complex variance 0.09; the estimate: 1 % s.d.
    np.testing.assert_allclose(noise_from_readout_edges(pure), 0.09, rtol=0.05)
    acq = colin27_kspace(256, noise=0.02)[0]
    estimate = noise_from_readout_edges(acq.kspace[centre_lines(256, 16)])
    np.testing.assert_allclose(estimate, acq.noise_var, rtol=0.15)
    with pytest.raises(ValueError, match="fraction"):
        noise_from_readout_edges(pure, 0.5)
    with pytest.raises(ValueError, match="noise scan"):
        noise_from_readout_edges(np.zeros((2, 64), complex))


def test_command_line_replays_a_user_kspace(tmp_path, capsys):
    import h5py

    from adaptcs.cli import main

    acq = colin27_kspace(32, noise=0.02)[1]
    np.save(tmp_path / "k.npy", acq.kspace)
    out = tmp_path / "mri.h5"
    assert main(["--quiet", *MRI_REPLAY, str(tmp_path / "k.npy"), "--lines", "4", "8", "--level", "2",
                 "--out", str(out), "--masks", str(tmp_path / "masks")]) == 0
    printed = capsys.readouterr().out
    assert "| design |" in printed and "| variable_density |" in printed and "| jittered_density |" in printed
    with h5py.File(out) as f:
        for order in ("design", "low_to_high", "equispaced", "variable_density", "jittered_density"):
            for count in (4, 8):
                saved = np.load(tmp_path / "masks" / f"{order}-{count}.npy")
                assert saved.dtype == bool and saved.sum() == count
                np.testing.assert_array_equal(saved, f[f"{order}/{count}/mask"][()])
        assert f.attrs["noise_source"] == "readout edges of the start lines"
        lines = f["design/8/lines"][()]
        assert lines.shape == (8,) and f["design/8/mask"][()].sum() == 8
        assert set(f["design_lines"][()][:2]) == set(centre_lines(32, 2))
        assert f["design/8/image"].shape == (32, 32) and f["low_to_high/4"].attrs["converged"]
        # the scores are those of the image written, against the fully sampled image
        ref = np.abs(to_image(acq.kspace))
        err = np.linalg.norm(np.abs(f["equispaced/8/image"][()]) - ref) / np.linalg.norm(ref)
        np.testing.assert_allclose(f["equispaced/8"].attrs["relative_error"], err, rtol=1e-12)
    # an HDF5 file as fastMRI writes them: slices first, phase encodes along the last axis
    with h5py.File(tmp_path / "k.h5", "w") as f:
        f["kspace"] = np.stack([acq.kspace.T, acq.kspace.T])
    assert main(["--quiet", *MRI_REPLAY, str(tmp_path / "k.h5"), "--slice", "1", "--phase-axis", "1", "--lines", "4",
                 "--level", "2", "--orders", "design", "--noise-var", str(acq.noise_var),
                 "--out", str(tmp_path / "m2.h5")]) == 0
    with h5py.File(tmp_path / "m2.h5") as f:
        assert f.attrs["noise_source"] == "given"
        designed = f["design_lines"][()]
        assert designed.shape == (4,) and set(designed[:2]) == set(centre_lines(32, 2))
    np.save(tmp_path / "real.npy", np.abs(acq.kspace))
    assert main(["--quiet", *MRI_REPLAY, str(tmp_path / "real.npy"), "--lines", "4",
                 "--out", str(tmp_path / "x.h5")]) == 2
    assert "complex" in capsys.readouterr().err
    assert main(["--quiet", *MRI_REPLAY, str(tmp_path / "k.h5"), "--dataset", "image", "--lines", "4",
                 "--out", str(tmp_path / "x.h5")]) == 2
    assert "no dataset 'image'" in capsys.readouterr().err


def test_l1_wavelet_reaches_the_optimality_conditions():
    from adaptcs.mri.l1 import l1_wavelet

    basis, K, _noise_var = _small_acquisition()
    # fully sampled: the minimiser is the complex soft threshold of the data's coefficients (the operator is unitary)
    full = np.arange(16)
    fit = l1_wavelet(K, full, basis, lam=0.3)
    C = basis.forward(to_image(K))
    expected = C * np.maximum(1 - 0.3 / np.abs(C), 0)
    np.testing.assert_allclose(basis.forward(fit.image), expected, atol=1e-10)
    # 6 lines: the subgradient conditions of the minimiser
    lines = np.array([3, 6, 7, 8, 9, 12])
    fit = l1_wavelet(K[lines], lines, basis, lam=0.2, tol=1e-10, max_iter=20000)
    assert fit.converged
    C = basis.forward(fit.image)
    measured = np.isin(np.arange(16), lines)[:, None]
    g = basis.forward(to_image(np.where(measured, to_kspace(fit.image) - K, 0)))
    on = np.abs(C) > 1e-8
    assert on.any() and (~on).any()
    np.testing.assert_allclose(g[on], -0.2 * C[on] / np.abs(C[on]), atol=1e-6)
    assert np.all(np.abs(g[~on]) <= 0.2 + 1e-6)
    with pytest.raises(ValueError, match="lam"):
        l1_wavelet(K[lines], lines, basis, lam=-1.0)


def test_phase_constrained_l1_reaches_its_optimality_conditions():
    from adaptcs.mri.l1 import l1_wavelet

    basis, K, _noise_var = _small_acquisition()
    phase = np.angle(zero_filled(K[6:10], np.arange(6, 10), (16, 16)))
    carrier = np.exp(1j * phase)
    # fully sampled: the real soft threshold of the real part of the demodulated image's coefficients
    fit = l1_wavelet(K, np.arange(16), basis, lam=0.3, phase=phase)
    z = basis.forward(np.conj(carrier) * to_image(K)).real
    np.testing.assert_allclose(basis.forward(np.conj(carrier) * fit.image), np.sign(z) * np.maximum(np.abs(z) - 0.3, 0),
                               atol=1e-10)
    # one side of k-space and the centre: the subgradient conditions over real coefficients
    lines = np.array([2, 4, 5, 6, 7, 8, 9])
    fit = l1_wavelet(K[lines], lines, basis, lam=0.2, phase=phase, tol=1e-10, max_iter=20000)
    assert fit.converged
    C = basis.forward(np.conj(carrier) * fit.image)
    np.testing.assert_allclose(C.imag, 0.0, atol=1e-12)
    measured = np.isin(np.arange(16), lines)[:, None]
    g = basis.forward(np.conj(carrier) * to_image(np.where(measured, to_kspace(fit.image) - K, 0))).real
    on = np.abs(C.real) > 1e-8
    assert on.any() and (~on).any()
    np.testing.assert_allclose(g[on], -0.2 * np.sign(C.real[on]), atol=1e-6)
    assert np.all(np.abs(g[~on]) <= 0.2 + 1e-6)
    with pytest.raises(ValueError, match="phase"):
        l1_wavelet(K[lines], lines, basis, lam=0.2, phase=phase[:8])


def test_line_mask_func_gives_fastmri_style_masks():
    from adaptcs.mri.design import LineMaskFunc

    kspace = np.ones((3, 64, 40), complex)
    mask, low = LineMaskFunc("equispaced", 16, 4)(kspace.shape)
    assert mask.shape == (64, 1) and mask.sum() == 16 and low == 4
    assert (kspace * mask).shape == kspace.shape
    np.testing.assert_array_equal(np.flatnonzero(mask), equispaced(64, 16, 4))
    a, _ = LineMaskFunc("variable_density", 16, 4)((64, 40), seed=3)
    b, _ = LineMaskFunc("variable_density", 16, 4)((64, 40), seed=3)
    np.testing.assert_array_equal(a, b)
    assert set(centre_lines(64, 4)) <= set(np.flatnonzero(a).tolist())
    jittered, low = LineMaskFunc("jittered_density", 16, 4)((64, 40), seed=3)
    np.testing.assert_array_equal(np.flatnonzero(jittered), jittered_density(64, 16, 4, np.random.default_rng(3)))
    assert low == 4
    mask, low = LineMaskFunc("low_to_high", 8, 8)((64, 40))
    np.testing.assert_array_equal(np.flatnonzero(mask), centre_lines(64, 8))
    assert low == 8
    with pytest.raises(ValueError, match="kind"):
        LineMaskFunc("radial", 8, 2)
    with pytest.raises(ValueError, match="does not fit"):
        LineMaskFunc("equispaced", 80, 4)((64, 40))


def test_errors_after_a_line_equal_dense_gaussian_conditioning():
    """The oracle's one-step errors: the Gaussian of EP's sites conditioned on one more line, densely."""
    basis, K, noise_var = _small_acquisition()
    n = 16
    lines = np.array([6, 7, 8, 9, 2])
    model = LineSpikeSlab(basis, noise_var=noise_var, p0=0.2, v0=1.0, learn=())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(K[lines], lines)
    run, c = model._run, model._scale
    s = run.hyper.noise_var
    shift = run.post.eta - SharedBlockRows(model.scan_.real_block(), n).rmatvec(
        stack_columns(model.scan_.column_data(K[lines])) / c) / s  # the sites' natural means
    rng = np.random.default_rng(7)
    image = to_image(K) + 0.05 * _complex(rng, (n, n))
    truth = basis.forward(image)
    candidates = np.setdiff1d(np.arange(n), lines)
    errors = model.errors_after_line(candidates, K[candidates], image, chunk=3)
    expected = []
    for ky in candidates:
        both = np.append(lines, ky)
        scan = LineScan(basis, both)
        X = SharedBlockRows(scan.real_block(), n).dense()
        y = stack_columns(scan.column_data(K[both])) / c
        mean = np.linalg.solve(X.T @ X / s + np.diag(1.0 / run.sites.var), X.T @ y / s + shift)
        expected.append(np.sum((unstack_columns(mean * c, n) - truth) * np.conj(unstack_columns(mean * c, n) - truth)
                               ).real)
    np.testing.assert_allclose(errors, expected, rtol=1e-9)
    images = model.images_after_line(candidates, K[candidates])  # the mean images of the same updates
    np.testing.assert_allclose(np.sum(np.abs(images - image) ** 2, axis=(1, 2)), expected, rtol=1e-9)
    # a greedy oracle takes the line of smallest error
    choose = oracle_choice(K, image)
    assert choose(model, candidates)[0] == int(np.argmin(expected))


def test_offline_greedy_and_jittered_masks():
    basis, K, noise_var = _small_acquisition()
    image = to_image(K)

    def make():
        return LineSpikeSlab(basis, noise_var=noise_var, p0=0.999, learn=())

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        order = offline_greedy([(K, image)], make, start=4, budget=7)
        # one training slice: offline greedy is the oracle on it
        run = design_lines(K, make(), start=centre_lines(16, 4), budget=7, choose=oracle_choice(K, image))
    np.testing.assert_array_equal(order, run.lines)
    with pytest.raises(ValueError, match="training slice"):
        offline_greedy([], make, start=4, budget=7)
    rng = np.random.default_rng(3)
    for count in (16, 40, 64):
        mask = jittered_density(64, count, 8, rng)
        assert mask.shape == (count,) and np.unique(mask).shape == (count,)
        assert set(centre_lines(64, 8)) <= set(mask.tolist())
    # stratified: the lines follow the density's cumulative distribution to within a line or two everywhere (one
    # per stratum), where independent draws of the same density stray by several
    rest = np.setdiff1d(np.arange(256), centre_lines(256, 16))
    prob = (1.0 - np.abs(rest - 128) / 128) ** 2 + 1e-3
    expected = 48 * np.cumsum(prob) / prob.sum()

    def stray(mask):
        return np.max(np.abs(np.cumsum(np.isin(rest, mask)) - expected))

    assert max(stray(jittered_density(256, 64, 16, rng)) for _ in range(20)) <= 2.0
    assert np.mean([stray(variable_density(256, 64, 16, rng)) for _ in range(20)]) > 3.0


@pytest.mark.slow
def test_block_fit_equals_the_dense_fit_at_its_fixed_point_32x32(monkeypatch):
    """Issue 48, point 1, at 32 x 32 (d = 2048 real unknowns, 6 lines): a spike-and-slab fit that reaches EP's
    fixed point (81 iterations) is the same on the block-diagonal and the dense path (a few CPU s, the dense
    path's): iterate for iterate with every block factorised every iteration; and where blocks at their fixed
    point are frozen (the active set, the default), no farther from the fixed point (a dense run to tol 1e-9) than
    the run that iterates every block."""
    basis, K, noise_var = _small_acquisition(32)
    lines = np.sort(np.random.default_rng(0).choice(32, 6, replace=False))

    def fit(dense, tol=1e-4):
        return LineSpikeSlab(basis, noise_var=noise_var, p0=0.5, v0=1.0, learn=(), dense_rows=dense, tol=tol,
                             max_iter=5000).fit(K[lines], lines)
    active_set = fit(False)
    dense = fit(True)
    fixed_point = fit(True, tol=1e-9)
    with monkeypatch.context() as patch:
        patch.setattr(_ep, "_group_blocks", lambda *args: None)  # no independent blocks: all factorised every time
        block = fit(False)
    assert block.converged_ and dense.converged_ and active_set.converged_ and fixed_point.converged_
    assert block.n_iter_ == dense.n_iter_
    np.testing.assert_allclose(block.coef_, dense.coef_, atol=1e-8 * np.max(np.abs(dense.coef_)))
    np.testing.assert_allclose(block.log_evidence_, dense.log_evidence_, rtol=1e-8)
    size = np.max(np.abs(fixed_point.coef_))
    error_active, error_all = (np.max(np.abs(fit.coef_ - fixed_point.coef_)) / size for fit in (active_set, block))
    # the largest error is in a column neither run froze (the same iterates but for rounding)
    assert 0.0 < error_active <= error_all * (1 + 1e-9) < 1e-2  # tol 1e-4: its residual test allows 1e-3
    assert not np.array_equal(active_set.coef_, block.coef_)  # some block was frozen
