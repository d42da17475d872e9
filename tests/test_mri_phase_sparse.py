"""The sparse phase-aware line model (adaptcs.models.line_phase_sparse): block rows with one matrix per block against
dense algebra, the EP fit on the block path against the same fit on dense rows, its Gaussian limit against the exact
Gaussian phase model, and the gain of every line against dense log determinants."""

import numpy as np
import pytest

from adaptcs.bases.separable import SeparableWavelet, to_kspace
from adaptcs.models import _ep_learning as lrn
from adaptcs.models._blocks import BlockGaussianModel, BlockRows
from adaptcs.models.line_phase import PhaseLineGaussian
from adaptcs.models.line_phase_sparse import PhaseLineSpikeSlab, line_groups

N = 16


def test_block_rows_with_a_matrix_per_block_give_the_dense_posterior():
    rng = np.random.default_rng(0)
    blocks = rng.normal(size=(3, 4, 6))
    rows = BlockRows(blocks)
    X = rows.dense()
    assert X.shape == rows.shape == (12, 18)
    coef, values = rng.normal(size=18), rng.normal(size=12)
    np.testing.assert_allclose(rows.matvec(coef), X @ coef, atol=1e-12)
    np.testing.assert_allclose(rows.rmatvec(values), X.T @ values, atol=1e-12)
    np.testing.assert_allclose(rows.column_power(), np.mean(X * X, axis=0), atol=1e-14)
    lam, shift, s = rng.uniform(0.5, 2.0, 18), rng.normal(size=18), 0.3
    post = BlockGaussianModel(rows, values, s).posterior(lam, shift)
    V = np.linalg.inv(X.T @ X / s + np.diag(1 / lam))
    np.testing.assert_allclose(post.mean, V @ (X.T @ values / s + shift), atol=1e-12)
    np.testing.assert_allclose(post.var, np.diag(V), atol=1e-12)
    K = X @ np.diag(lam) @ X.T + s * np.eye(12)
    assert post.log_det_marginal() == pytest.approx(np.linalg.slogdet(K)[1], rel=1e-12)


def test_groups_are_a_coefficients_two_parts_or_two_by_two_blocks_of_one_subband():
    scale_y = SeparableWavelet((16, 8), "haar", 2).scale_y  # 4, 4, 8 coefficients
    coef_group, group_class = line_groups(scale_y, 8, "coefficient")
    assert coef_group.shape == (8 * 32,) and group_class.shape == (8 * 16,)
    column = coef_group[:32]
    np.testing.assert_array_equal(column[:16], column[16:])  # a and b of one coefficient together
    np.testing.assert_array_equal(group_class[:16], np.where(scale_y == 0, -1, scale_y - 1))
    coef_group, group_class = line_groups(scale_y, 8, "block")
    per_group = np.bincount(coef_group)
    assert np.all(per_group == 8) and group_class.shape == (4 * 8,)
    first = np.flatnonzero(coef_group == coef_group[32 * 2 + 5])  # column 2, coefficient 5
    columns, within = first // 32, first % 32 % 16
    assert set(columns) == {2, 3} and set(within) == {4, 5}
    with pytest.raises(ValueError, match="even"):
        line_groups(scale_y, 7, "block")


@pytest.fixture(scope="module")
def scan():
    rng = np.random.default_rng(0)
    basis = SeparableWavelet((N, N), "haar", 2)
    y, x = np.mgrid[:N, :N] / N
    magnitude = np.where(rng.uniform(size=(N, N)) < 0.3, 1.0 + rng.uniform(size=(N, N)), 0.05)
    image = magnitude * np.exp(1j * (1.5 * np.cos(2 * np.pi * x) + y))
    K = to_kspace(image) + 0.05 * (rng.normal(size=(N, N)) + 1j * rng.normal(size=(N, N)))
    lines = np.array([6, 7, 8, 9, 3, 12, 1])
    return basis, K, lines


def test_the_block_fit_equals_the_same_fit_on_dense_rows(scan, monkeypatch):
    """The same fixed point by two paths: on blocks, learning refines by SQUAREM between EP runs that freeze
    settled blocks; on dense rows, by the joint run of sites and values. Each stops by its own test (the two
    differ by 5e-5 in p0 at the shipped tolerances), so both are taken close to the fixed point here."""
    monkeypatch.setattr(lrn, "SQUAREM_THETA_TOL", 1e-7)
    monkeypatch.setattr(lrn, "THETA_TOL", 1e-7)
    joint_run = lrn.joint_run
    basis, K, lines = scan
    kwargs = dict(noise_var=2 * 0.05**2, profile=np.array([4.0, 2.0, 1.0]), band=4, p0=0.3, tol=1e-7)
    joint_runs = []
    monkeypatch.setattr(lrn, "joint_run", lambda *args, **kw: joint_runs.append(1) or joint_run(*args, **kw))
    block = PhaseLineSpikeSlab(basis, **kwargs).fit(K[lines], lines)
    assert not joint_runs  # SQUAREM reached the fixed point: no joint run (which factorises every block every time)
    dense = PhaseLineSpikeSlab(basis, dense_rows=True, **kwargs).fit(K[lines], lines)
    assert joint_runs
    assert block.converged_ and dense.converged_
    np.testing.assert_allclose(block.coef_, dense.coef_, atol=1e-6 * np.abs(dense.coef_).max())
    np.testing.assert_allclose(block.p0_, dense.p0_, rtol=1e-5)
    np.testing.assert_allclose(block.v0_, dense.v0_, rtol=1e-5)
    assert block.log_evidence_ == pytest.approx(dense.log_evidence_, rel=1e-7)
    assert np.all(block.p0_[1:] < 0.9)  # learned: the detail scales are sparse in this image


def test_warm_refits_hold_the_learned_values_and_a_fit_from_scratch_learns_again(scan):
    """A design loop's warm refit runs EP at the values the last fit from scratch learned; a fit from scratch on
    the same lines learns them again (and so differs)."""
    basis, K, lines = scan
    model = PhaseLineSpikeSlab(basis, noise_var=2 * 0.05**2, profile=np.array([4.0, 2.0, 1.0]), band=4, p0=0.3,
                               v0_follows_gaussian=False)
    first = model.fit(K[lines[:6]], lines[:6]).snapshot()
    warm = model.fit(K[lines], lines, warm=True).snapshot()
    np.testing.assert_array_equal(warm.p0_, first.p0_)
    np.testing.assert_array_equal(warm.v0_, first.v0_)
    cold = PhaseLineSpikeSlab(basis, noise_var=2 * 0.05**2, profile=np.array([4.0, 2.0, 1.0]), band=4,
                              p0=0.3).fit(K[lines], lines)
    assert not np.allclose(cold.v0_, first.v0_, rtol=1e-3)
    assert not np.array_equal(warm.coef_, first.coef_)  # the new line was used


def test_in_warm_refits_v0_follows_the_gaussian_models_scale_at_the_ratio_last_learned(scan):
    """``v0 = kappa v / p0`` in a warm refit, ``v`` the Gaussian phase model's scale on the same lines (a separate
    Gaussian model, fitted the same way) and ``kappa`` the ratio the fit from scratch learned; p0 held."""
    basis, K, lines = scan
    kwargs = dict(noise_var=2 * 0.05**2, profile=np.array([4.0, 2.0, 1.0]), band=4)
    model = PhaseLineSpikeSlab(basis, p0=0.3, learn=("v0",), **kwargs)
    gaussian = PhaseLineGaussian(basis, **kwargs)
    first = model.fit(K[lines[:4]], lines[:4]).snapshot()
    v_first = gaussian.fit(K[lines[:4]], lines[:4])._state[0]
    kappa = first.v0_[0] / 4.0 / (v_first / 0.3)
    for m in (5, 6, 7):
        warm = model.fit(K[lines[:m]], lines[:m], warm=True)
        v = gaussian.fit(K[lines[:m]], lines[:m], warm=True)._state[0]
        assert warm.v0_[0] / 4.0 == pytest.approx(kappa * v / 0.3, rel=1e-10)
        np.testing.assert_array_equal(warm.p0_, first.p0_)
    assert v != pytest.approx(v_first, rel=1e-3)  # the scale moved with the lines, and v0 with it


def test_a_warm_refit_on_lines_grown_by_relearn_growth_is_the_fit_from_scratch(scan):
    """Once the lines have grown by ``relearn_growth`` since the values were learned, a warm refit learns them again:
    it is the fit a new model makes from scratch on the same lines (an independent fit), not the held values."""
    basis, K, lines = scan
    kwargs = dict(noise_var=2 * 0.05**2, profile=np.array([4.0, 2.0, 1.0]), band=4, p0=0.3, relearn_growth=1.5,
                  v0_follows_gaussian=False)
    model = PhaseLineSpikeSlab(basis, **kwargs)
    first = model.fit(K[lines[:4]], lines[:4]).snapshot()
    held = model.fit(K[lines[:5]], lines[:5], warm=True).snapshot()  # 5 < 1.5 x 4 lines: the values held
    np.testing.assert_array_equal(held.v0_, first.v0_)
    assert held.learned_lines_ == 4
    grown = model.fit(K[lines[:6]], lines[:6], warm=True).snapshot()  # 6 = 1.5 x 4: learned again
    scratch = PhaseLineSpikeSlab(basis, **kwargs).fit(K[lines[:6]], lines[:6])
    assert grown.learned_lines_ == 6 and not np.allclose(grown.v0_, first.v0_, rtol=1e-3)
    np.testing.assert_allclose(grown.v0_, scratch.v0_, rtol=1e-12)
    np.testing.assert_allclose(grown.coef_, scratch.coef_, atol=1e-12 * np.abs(scratch.coef_).max())
    assert grown.converged_ == scratch.converged_
    never = PhaseLineSpikeSlab(basis, **{**kwargs, "relearn_growth": None})
    never.fit(K[lines[:4]], lines[:4])
    np.testing.assert_array_equal(never.fit(K[lines], lines, warm=True).v0_, first.v0_)


def test_a_design_loop_reads_a_refit_that_relearned_without_fitting_it_again(scan):
    """A warm refit that has just learned again (the lines grew by ``relearn_growth``) is read as it is; the replay
    fits the counts it reads from scratch once, at the tell."""
    from adaptcs.bases.separable import centre_lines
    from adaptcs.design.candidates import CandidateDesigner
    from adaptcs.mri.design import design_lines
    from adaptcs.operators import KSpaceLines

    basis, K, _ = scan

    def counted_model():
        model = PhaseLineSpikeSlab(basis, noise_var=2 * 0.05**2, profile=np.array([4.0, 2.0, 1.0]), band=4, p0=0.3,
                                   relearn_growth=1.5)
        calls, fit = [], model.fit
        model.fit = lambda *args, **kwargs: calls.append(kwargs.get("warm", False)) or fit(*args, **kwargs)
        return model, calls

    model, calls = counted_model()
    designer = CandidateDesigner(model, KSpaceLines(basis, n_first=4))
    designer.tell(centre_lines(N, 4), K[centre_lines(N, 4)])
    for _ in range(2):
        new, _ = designer.ask()
        designer.tell(new, K[new])  # warm: the refit at 6 lines learns again (6 >= 1.5 x 4)
    read = designer.converge()
    assert calls == [False, True, True] and read.learned_lines_ == 6 and read.converged_
    model, calls = counted_model()
    run = design_lines(K, model, start=centre_lines(N, 4), budget=8, checkpoints=[6, 8])
    # first fit, warm refits at 5 and 7 lines, from scratch at the counts read (6, 8), each once
    assert calls == [False, True, False, True, False]
    assert run.fits[6].learned_lines_ == 6 and run.fits[8].learned_lines_ == 8
    assert run.fits[6].converged_ and run.fits[8].converged_


def test_warm_refits_run_to_warm_tol_and_the_fits_a_design_loop_reads_to_tol(scan):
    """A warm refit (it only chooses the next line) stops at ``warm_tol``, sooner than at ``tol``; the fits a design
    loop reads are fits from scratch at ``tol`` whatever ``warm_tol`` is."""
    from adaptcs.bases.separable import centre_lines
    from adaptcs.models._ep import RESIDUAL_FACTOR
    from adaptcs.mri.design import design_lines

    basis, K, lines = scan
    kwargs = dict(noise_var=2 * 0.05**2, profile=np.array([4.0, 2.0, 1.0]), band=4, p0=0.3, tol=1e-7)
    iterations = {}
    for warm_tol in (None, 1e-2):
        model = PhaseLineSpikeSlab(basis, warm_tol=warm_tol, **kwargs)
        model.fit(K[lines[:6]], lines[:6])
        warm = model.fit(K[lines], lines, warm=True)
        iterations[warm_tol] = warm.n_iter_
        assert warm.converged_ and warm.fixed_point_residual_ < RESIDUAL_FACTOR * (warm_tol or 1e-7)
    assert iterations[1e-2] < iterations[None]
    run = design_lines(K, PhaseLineSpikeSlab(basis, warm_tol=1e-2, **kwargs), start=centre_lines(N, 4), budget=8,
                       checkpoints=[6, 8])
    for b in (6, 8):
        assert run.fits[b].converged_ and run.fits[b].fixed_point_residual_ < RESIDUAL_FACTOR * 1e-7


def test_with_the_spike_almost_never_taken_the_fit_is_the_exact_gaussian_one(scan):
    basis, K, lines = scan
    kwargs = dict(noise_var=2 * 0.05**2, profile=np.array([4.0, 2.0, 1.0]), band=4, eps=0.1)
    gaussian = PhaseLineGaussian(basis, **kwargs).fit(K[lines], lines)
    v = gaussian._state[0]
    sparse = PhaseLineSpikeSlab(basis, p0=1 - 1e-9, learn=(), **kwargs).fit(K[lines], lines)
    assert sparse.v0_[0] == pytest.approx(v * 4.0 / (1 - 1e-9), rel=1e-12)  # its slab: p0 v0 = the Gaussian's v
    np.testing.assert_allclose(sparse.image_, gaussian.image_, atol=1e-6 * np.abs(gaussian.image_).max())
    np.testing.assert_allclose(sparse.line_gains(), gaussian.line_gains(), rtol=1e-6)


def test_line_gains_equal_dense_log_determinants_under_eps_gaussian(scan):
    basis, K, lines = scan
    model = PhaseLineSpikeSlab(basis, noise_var=2 * 0.05**2, profile=np.array([4.0, 2.0, 1.0]), band=4, p0=0.3)
    model.fit(K[lines], lines)
    s = model.noise_var / 2

    def dense_rows(index):
        R = np.concatenate(model._real_rows(index), axis=1)  # (nx, 2k, 2ny)
        X = np.zeros((N * R.shape[1], N * R.shape[2]))
        for c in range(N):
            X[c * R.shape[1]:(c + 1) * R.shape[1], c * R.shape[2]:(c + 1) * R.shape[2]] = R[c]
        return X

    X, lam = dense_rows(lines), model._post["prior_var"].ravel()  # EP's Gaussian: the sites' variances
    V = np.linalg.inv(X.T @ X / s + np.diag(1 / lam))
    np.testing.assert_allclose(np.diag(V), model._post["prior_var"].ravel()
                               - np.sum(model._post["factor"] ** 2, axis=1).ravel(), rtol=1e-9)
    gains = model.line_gains()
    for ky in range(N):
        B = dense_rows(np.array([ky]))
        assert gains[ky] == pytest.approx(0.5 * np.linalg.slogdet(np.eye(B.shape[0]) + B @ V @ B.T / s)[1],
                                          rel=1e-9)


def test_a_sparse_design_depends_on_the_values_measured_not_only_on_the_lines():
    """Images with the same band lines (so the same phase and column weights) and other values elsewhere: the
    Gaussian model's order of lines is the same for all (its covariance depends on the values only through its
    learned scale), the sparse model's differs."""
    basis = SeparableWavelet((N, N), "haar", 2)
    y, x = np.mgrid[:N, :N] / N
    phase = np.exp(1j * (1.5 * np.cos(2 * np.pi * x) + y))
    noise = 0.05 * (np.random.default_rng(0).normal(size=(N, N)) + 1j * np.random.default_rng(1).normal(size=(N, N)))

    def kspace(seed):
        rng = np.random.default_rng(seed)
        magnitude = np.where(rng.uniform(size=(N, N)) < 0.3, 1.0 + rng.uniform(size=(N, N)), 0.05)
        return to_kspace(magnitude * phase) + noise

    first, lines = kspace(0), np.array([6, 7, 8, 9, 3, 12, 1])
    kwargs = dict(noise_var=2 * 0.05**2, profile=np.array([4.0, 2.0, 1.0]), band=4, eps=0.1)
    orders = {"sparse": [], "gaussian": []}
    for seed in range(6):
        K = kspace(seed)
        K[6:10] = first[6:10]
        for name, model in (("sparse", PhaseLineSpikeSlab(basis, p0=0.3, learn=(), **kwargs)),
                            ("gaussian", PhaseLineGaussian(basis, **kwargs))):
            orders[name].append(tuple(np.argsort(-model.fit(K[lines], lines).line_gains())[:4]))
    assert len(set(orders["gaussian"])) == 1
    assert len(set(orders["sparse"])) > 1


def test_the_command_line_and_the_lab_take_the_sparse_phase_prior(tmp_path):
    import h5py

    from adaptcs.cli import main
    from adaptcs.lab import lines as lab
    from adaptcs.mri.data import colin27_kspace

    acq = colin27_kspace(32)[1]
    np.save(tmp_path / "k.npy", acq.kspace)
    assert main(["--quiet", "replay", "--instrument", "mri", str(tmp_path / "k.npy"), "--lines", "4", "8", "--level",
                 "2", "--prior", "phase_sparse", "--orders", "design", "low_to_high",
                 "--out", str(tmp_path / "m.h5")]) == 0
    with h5py.File(tmp_path / "m.h5") as f:
        assert f.attrs["prior"] == "phase_sparse"
        assert {"converged", "columns_not_converged"} <= set(f["design/8"].attrs)
    state = tmp_path / "s.h5"
    lab.init(state, (32, 32), wavelet="db2", level=2, prior="phase_sparse", start=4)
    first, _ = lab.next_lines(state)
    lab.add(state, first, acq.kspace[first])
    chosen, about = lab.next_lines(state)
    assert chosen[0] not in first and "converged" in about
