"""Measurement operators: every operator's rows measure what it reads, and its information gains are the Gaussian
entropy reduction (computed independently from the updated covariance)."""

import warnings

import numpy as np
import pytest
from scipy import sparse
from scipy.linalg import hadamard
from sklearn.exceptions import ConvergenceWarning

from adaptcs.bases.images import make_basis
from adaptcs.bases.separable import SeparableWavelet, to_kspace
from adaptcs.models import GroupSpikeSlabEP
from adaptcs.models.line_spike_slab import LineSpikeSlab
from adaptcs.mri.design import centre_lines
from adaptcs.operators import (
    BasisSelection,
    HadamardPatterns,
    KSpaceLines,
    MeasurementOperator,
    RowPool,
    walsh_matrix,
)


def _operators():
    rng = np.random.default_rng(0)
    return {
        "rows": (RowPool(rng.standard_normal((40, 64)), make_basis("db2", 8)), rng.random(64)),
        "basis_images": (BasisSelection(make_basis("db2", 8)), rng.random(64)),
        "biorthogonal_images": (BasisSelection(make_basis("bior2.2", 8)), rng.random(64)),
        "hadamard": (HadamardPatterns(8), rng.random(64)),
        "hadamard_in_a_wavelet": (HadamardPatterns(8, make_basis("haar", 8)), rng.random(64)),
        "kspace_lines": (KSpaceLines(SeparableWavelet((8, 16), "haar", 2), n_first=2),
                         rng.standard_normal((8, 16)) + 1j * rng.standard_normal((8, 16))),
    }


@pytest.mark.parametrize("name", list(_operators()))
def test_rows_measure_what_the_operator_reads(name):
    operator, signal = _operators()[name]
    chosen = np.array([5, 0, 3])
    recording = operator.record(signal)
    values = operator.model_values(chosen, operator.read(recording, chosen))
    rows = operator.rows(chosen)
    assert rows.shape == (3 * operator.values_per_candidate, operator.n_coef)
    np.testing.assert_allclose(rows @ operator.coefficients(signal), values, atol=1e-12)
    as_sparse = operator.rows(chosen, as_sparse=True)
    assert sparse.issparse(as_sparse)
    np.testing.assert_allclose(as_sparse.toarray(), rows, atol=0)
    assert sorted(operator.coarse_to_fine().tolist()) == list(range(operator.n_candidates))


def test_hadamard_patterns_are_sylvester_rows_in_sequency_order():
    W = walsh_matrix(16)
    np.testing.assert_allclose(W @ W.T, np.eye(16), atol=1e-14)
    assert [int(np.sum(np.diff(np.sign(r)) != 0)) for r in W] == list(range(16))  # k sign changes in row k
    sylvester = {tuple(r) for r in hadamard(16) / 4.0}
    assert {tuple(r) for r in W} == sylvester
    op = HadamardPatterns(8)
    P = op.patterns(np.arange(64))
    np.testing.assert_allclose(P @ P.T, np.eye(64), atol=1e-13)
    image = np.random.default_rng(1).random(64)
    np.testing.assert_allclose(op.record(image), P @ image, atol=1e-13)
    # the first 16 candidates are the 4 x 4 lowest sequencies, the first one the constant pattern
    assert set(zip(op.u[:16].tolist(), op.v[:16].tolist(), strict=True)) == {(u, v) for u in range(4) for v in range(4)}
    np.testing.assert_allclose(P[0], np.full(64, 1 / 8))


def test_kspace_lines_start_at_the_centre():
    op = KSpaceLines(SeparableWavelet((32, 32), "db4", 2), n_first=6)
    np.testing.assert_array_equal(np.sort(op.coarse_to_fine()[:6]), centre_lines(32, 6))
    image = np.random.default_rng(2).standard_normal((32, 32))
    np.testing.assert_allclose(op.read(op.record(image), [16, 3]), to_kspace(image)[[16, 3]])


class _DenseGaussian:
    """A Gaussian posterior given by its covariance (for the ground truth)."""

    def __init__(self, V, noise_var):
        self.V, self.noise_var_ = V, noise_var

    def cov_matvec(self, v):
        return self.V @ v


def _entropy_reductions(operator, V, noise_var):
    """1/2 (log det V - log det V_after) for every candidate: the update written out in d dimensions."""
    precision = np.linalg.inv(V)
    out = []
    for k in range(operator.n_candidates):
        R = operator.rows([k])
        after = np.linalg.inv(precision + R.T @ R / noise_var)
        out.append(0.5 * (np.linalg.slogdet(V)[1] - np.linalg.slogdet(after)[1]))
    return np.array(out)


@pytest.mark.parametrize("operator", [HadamardPatterns(4, make_basis("haar", 4)),
                                      KSpaceLines(SeparableWavelet((4, 4), "haar", 1))], ids=["rows", "lines"])
def test_generic_gains_are_the_entropy_reduction(operator):
    rng = np.random.default_rng(3)
    L = rng.standard_normal((operator.n_coef, operator.n_coef))
    V = L @ L.T / operator.n_coef + 0.1 * np.eye(operator.n_coef)
    gains = MeasurementOperator.gains(operator, _DenseGaussian(V, 0.3))
    np.testing.assert_allclose(gains, _entropy_reductions(operator, V, 0.3), rtol=1e-10)


def test_basis_image_gains_from_variances_equal_the_generic_gains():
    basis = make_basis("haar", 8)
    op = BasisSelection(basis)
    rng = np.random.default_rng(4)
    coef = np.where(rng.random(64) < 0.2, rng.standard_normal(64), 0.0)
    chosen = np.arange(24)
    est = GroupSpikeSlabEP(basis.groups(), p0=0.2, v0=1.0, noise_var=0.01)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(op.rows(chosen), coef[chosen] + 0.1 * rng.standard_normal(24))
    np.testing.assert_allclose(op.gains(est), MeasurementOperator.gains(op, est), rtol=1e-8)


def test_line_model_gains_equal_the_generic_gains_on_its_posterior():
    rng = np.random.default_rng(5)
    basis = SeparableWavelet((8, 8), "haar", 1)
    op = KSpaceLines(basis)
    image = rng.standard_normal((8, 8)) + 1j * rng.standard_normal((8, 8))
    K = op.record(image) + 0.05 * (rng.standard_normal((8, 8)) + 1j * rng.standard_normal((8, 8)))
    lines = np.array([3, 4, 5])
    model = LineSpikeSlab(basis, noise_var=2 * 0.05**2, p0=0.3, v0=1.0, learn=())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(op.read(K, lines), lines)
    run = model._run
    X = op.rows(lines)  # the model's coordinates (the gains below agree only if they are the same)
    V = np.linalg.inv(X.T @ X / run.hyper.noise_var + np.diag(1.0 / run.sites.var))  # EP's Gaussian, dense
    generic = MeasurementOperator.gains(op, _DenseGaussian(V, run.hyper.noise_var))
    np.testing.assert_allclose(op.gains(model), generic, rtol=1e-9)


def test_bad_candidates_are_refused():
    op = HadamardPatterns(4)
    with pytest.raises(ValueError, match="0..15"):
        op.rows([16])
    with pytest.raises(ValueError, match="at most once"):
        op.read(op.record(np.zeros(16)), [1, 1])
    with pytest.raises(ValueError, match="integers"):
        op.rows([0.5])
    with pytest.raises(ValueError, match="power-of-two"):
        HadamardPatterns(6)
    with pytest.raises(ValueError, match="samples"):
        RowPool(np.eye(4), make_basis("haar", 4))
    with pytest.raises(ValueError, match="noise variance"):
        MeasurementOperator.gains(op, _DenseGaussian(np.eye(16), None))
