"""Orthonormal image bases, checked against matrices written out by hand, and design through a basis."""

import numpy as np
import pytest

from adaptcs.bases.images import BASES, BIORTHOGONAL, DCTBasis, WaveletBasis, make_basis, scale_profile
from adaptcs.design import SequentialDesigner, run_sequential_design
from adaptcs.models import GroupSpikeSlabEP

ORTHONORMAL = [name for name in BASES if name not in BIORTHOGONAL]


def haar_1d(n):
    """One level of the orthonormal 1-D Haar transform: rows [low-pass pairs; high-pass pairs], (n, n)."""
    low = np.kron(np.eye(n // 2), [1.0, 1.0]) / np.sqrt(2)
    high = np.kron(np.eye(n // 2), [1.0, -1.0]) / np.sqrt(2)
    return low, high


def dct_matrix(n):
    """The orthonormal DCT-II matrix from its formula."""
    k, i = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    C = np.sqrt(2.0 / n) * np.cos(np.pi * (2 * i + 1) * k / (2 * n))
    C[0] /= np.sqrt(2.0)
    return C


@pytest.mark.parametrize("name", ORTHONORMAL)
@pytest.mark.parametrize("side", [8, 16])
def test_bases_are_orthonormal_and_invert(name, side):
    basis = make_basis(name, side)
    assert basis.orthonormal
    psi_t = basis.analyze(np.eye(basis.d))  # row i = Psi e_i, so this is Psi^T
    np.testing.assert_allclose(psi_t.T @ psi_t, np.eye(basis.d), atol=1e-12)
    np.testing.assert_allclose(basis.synthesize(np.eye(basis.d)), psi_t.T, atol=1e-12)
    x = np.random.default_rng(0).normal(size=(3, basis.d))
    np.testing.assert_allclose(basis.synthesize(basis.analyze(x)), x, atol=1e-12)
    np.testing.assert_allclose(basis.analyze(x[0]), basis.analyze(x)[0])  # a single row keeps its shape
    np.testing.assert_array_equal(basis.row_coefficients(x), basis.analyze(x))  # rows take the image maps
    np.testing.assert_array_equal(basis.row_patterns(x), basis.synthesize(x))


@pytest.mark.parametrize("name", BIORTHOGONAL)
@pytest.mark.parametrize("level", [1, 2])
def test_biorthogonal_rows_are_the_transposes(name, level):
    """A biorthogonal pair (dense W from analyze, S from synthesize): S inverts W, the patterns shown are W's rows
    (pattern j measures c_j), a pixel row measures S^T r on the coefficients, and the light of each pattern."""
    basis = make_basis(name, 16, level)
    assert not basis.orthonormal
    W = basis.analyze(np.eye(basis.d)).T  # column i = W e_i
    S = basis.synthesize(np.eye(basis.d)).T
    np.testing.assert_allclose(S @ W, np.eye(basis.d), atol=1e-10)
    assert np.abs(S - W.T).max() > 0.1  # not orthonormal
    np.testing.assert_allclose(basis.row_patterns(np.eye(basis.d)), W, atol=1e-12)  # row j = W^T e_j
    np.testing.assert_allclose(basis.row_coefficients(np.eye(basis.d)), S, atol=1e-12)  # row i = S^T e_i
    x = np.random.default_rng(5).uniform(size=basis.d)
    np.testing.assert_allclose(basis.row_patterns(np.eye(basis.d)) @ x, basis.analyze(x), atol=1e-12)
    np.testing.assert_allclose(basis.pattern_light(x), np.abs(W) @ x, atol=1e-12)


def test_one_level_haar_matches_the_separable_haar_matrices():
    side = 8
    basis = WaveletBasis(side, "haar", level=1)
    image = np.random.default_rng(1).normal(size=(side, side))
    low, high = haar_1d(side)
    blocks = {"a": low @ image @ low.T, "lh": low @ image @ high.T, "hl": high @ image @ low.T,
              "d": high @ image @ high.T}
    c = basis.analyze(image.ravel())
    s = side // 2
    np.testing.assert_allclose(c[:s * s], blocks["a"].ravel(), atol=1e-12)
    details = c[s * s:].reshape(s * s, 3)  # position-major: h, v, d of each position
    got = [details[:, o] for o in range(3)]
    # the two mixed subbands in either naming, each up to sign (conventions differ between libraries)
    mixed = {"lh": blocks["lh"].ravel(), "hl": blocks["hl"].ravel()}
    for o in range(2):
        assert any(np.allclose(np.abs(got[o]), np.abs(m), atol=1e-12) for m in mixed.values())
    assert not np.allclose(np.abs(got[0]), np.abs(got[1]))
    np.testing.assert_allclose(np.abs(got[2]), np.abs(blocks["d"].ravel()), atol=1e-12)


def test_full_depth_haar_approximation_is_the_scaled_mean():
    basis = WaveletBasis(16, "haar", level=4)
    x = np.random.default_rng(2).uniform(size=256)
    assert basis.analyze(x)[0] == pytest.approx(x.sum() / 16)


def test_dct_matches_its_formula_in_zigzag_order():
    side = 8
    basis = DCTBasis(side)
    image = np.random.default_rng(3).normal(size=(side, side))
    C = dct_matrix(side)
    grid = C @ image @ C.T
    c = basis.analyze(image.ravel())
    u, v = np.divmod(np.arange(side * side), side)
    order = sorted(range(side * side), key=lambda i: (u[i] + v[i], u[i]))
    np.testing.assert_allclose(c, grid.ravel()[order], atol=1e-12)


@pytest.mark.parametrize("name", BASES)
def test_groups_are_two_by_two_blocks_within_one_scale(name):
    basis = make_basis(name, 32)
    groups, scales = basis.groups(), basis.scales()
    labels, sizes = np.unique(groups, return_counts=True)
    assert np.all(sizes == 4) and labels.size == basis.d // 4
    if name != "dct":  # the DCT's blocks are of the frequency grid: u + v differs within one
        for g in labels:
            assert np.unique(scales[groups == g]).size == 1
    assert np.all(np.diff(scales) >= 0)  # coefficients run from coarse to fine


def test_wavelet_group_is_the_children_of_one_parent():
    basis = WaveletBasis(16, "haar", level=2)  # approximation 4 x 4, details 4 x 4 then 8 x 8
    image = np.zeros((16, 16))
    image[:4, :4] = np.random.default_rng(4).normal(size=(4, 4))  # the support of one coarse-level coefficient
    c = basis.analyze(image.ravel())
    fine = np.flatnonzero((basis.scales() == 2) & (np.abs(c) > 1e-12))
    assert np.unique(basis.groups()[fine]).size <= 3  # one 2 x 2 block per orientation


def test_coarse_to_fine_rows_measure_the_first_coefficients():
    basis = make_basis("db2", 16)
    rows = basis.coarse_to_fine(10)
    np.testing.assert_allclose(np.linalg.norm(rows, axis=1), 16.0)
    np.testing.assert_allclose(basis.analyze(rows), np.eye(10, 256) * 16.0, atol=1e-10)


@pytest.mark.parametrize("bad", [dict(name="db3", side=8), dict(name="haar", side=12), dict(name="dct", side=1),
                                 dict(name="haar", side=8, level=4)])
def test_bad_basis_arguments(bad):
    with pytest.raises(ValueError):
        make_basis(**bad)
    with pytest.raises(ValueError, match="rows must have 64"):
        make_basis("haar", 8).analyze(np.ones(63))


def sparse_image(basis, rng):
    """An image whose coefficients are group-sparse in ``basis`` (three active groups)."""
    groups = basis.groups()
    active = rng.choice(np.unique(groups), size=3, replace=False)
    c = np.where(np.isin(groups, active), rng.normal(size=basis.d), 0.0)
    return basis.synthesize(c), c


def test_designer_with_a_basis_fits_the_coefficients_and_designs_pixel_rows():
    basis = make_basis("haar", 8)
    rng = np.random.default_rng(5)
    image, _c = sparse_image(basis, rng)
    estimator = GroupSpikeSlabEP(basis.groups(), p0=0.2, v0=1.0, noise_var=1e-2)
    designer = SequentialDesigner(estimator, rng=1, basis=basis)
    X = rng.normal(size=(20, 64))
    designer.tell(X, X @ image)
    direct = GroupSpikeSlabEP(basis.groups(), p0=0.2, v0=1.0, noise_var=1e-2).fit(basis.analyze(X), X @ image)
    np.testing.assert_allclose(designer.estimator_.coef_, direct.coef_, atol=1e-10)
    np.testing.assert_allclose(designer.reconstruction(), basis.synthesize(direct.coef_), atol=1e-10)
    row = designer.ask()[0]
    # dense ground truth: the leading eigenvector of the coefficients' posterior covariance, in pixels
    V = np.column_stack([direct.cov_matvec(e) for e in np.eye(64)])
    values, vectors = np.linalg.eigh((V + V.T) / 2)
    assert np.linalg.norm(row) == pytest.approx(8.0)
    a = basis.analyze(row)
    assert a @ V @ a == pytest.approx(values[-1] * 64, rel=1e-4)
    assert abs(a @ vectors[:, -1]) / 8.0 == pytest.approx(1.0, abs=1e-3)


def test_sequence_strategy_asks_its_rows_in_order_from_the_start():
    basis = make_basis("haar", 8)
    rows = basis.coarse_to_fine(6)
    estimator = GroupSpikeSlabEP(basis.groups(), p0=0.2, v0=1.0, noise_var=1e-2)
    designer = SequentialDesigner(estimator, strategy="sequence", pool=rows, batch_size=2, basis=basis, rng=0)
    image = np.ones(64)
    for k in range(3):
        asked = designer.ask()
        np.testing.assert_array_equal(asked, rows[2 * k:2 * k + 2])
        if k == 0:  # with random rows too, so that no coefficient is left without data (a flat EP cavity)
            asked = np.vstack([asked, np.random.default_rng(0).normal(size=(10, 64))])
        designer.tell(asked, asked @ image)
    with pytest.raises(ValueError, match="unmeasured rows left"):
        designer.ask()


def test_simulation_through_a_basis_records_the_image():
    basis = make_basis("haar", 8)
    rng = np.random.default_rng(6)
    image, _c = sparse_image(basis, rng)
    X0 = rng.normal(size=(12, 64))
    estimator = GroupSpikeSlabEP(basis.groups(), p0=0.2, v0=1.0, noise_var=1e-4)
    result = run_sequential_design(estimator, image, X0, X0 @ image, 20, strategy="design", noise_var=1e-4,
                                   row_norm=8.0, rng=0, basis=basis, checkpoints=(32,))
    assert result.errors[-1] < 0.05  # 32 designed rows recover 12 non-zero coefficients of 64
    np.testing.assert_allclose(result.errors[-1], np.linalg.norm(result.coef - image) / np.linalg.norm(image))
    np.testing.assert_allclose(result.checkpoint_coef[0], result.coef)
    assert result.X.shape == (32, 64)


def test_scale_profile_recovers_known_per_scale_variances():
    """Images synthesised from coefficients of known variance per scale give those variances back, relative."""
    basis = make_basis("haar", 16)
    scales = basis.scales()
    labels = np.unique(scales)
    variances = np.array([50.0, 1.0, 0.2, 0.03])[: labels.shape[0]]  # chosen, one per label
    rng = np.random.default_rng(3)
    coefficients = rng.normal(size=(4000, basis.d)) * np.sqrt(variances[scales])
    profile = scale_profile(basis, basis.synthesize(coefficients))
    expected = variances / np.mean(variances[scales])  # normalised: mean over the coefficients 1
    np.testing.assert_allclose(profile, expected, rtol=0.05)
    assert np.mean(profile[scales]) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="no energy at scale"):
        scale_profile(basis, np.ones((3, basis.d)))  # constant images: every detail coefficient zero
