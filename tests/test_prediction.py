"""The wavelet prediction scan (Rousset et al. 2017): its predictions, its order, and the designer running it."""

import numpy as np
import pytest
from scipy import ndimage

from adaptcs.bases.images import make_basis
from adaptcs.bases.prediction import measured_coefficients, predicted_coefficients
from adaptcs.design import SequentialDesigner, run_sequential_design
from adaptcs.design.prediction import prediction_order
from adaptcs.experiments.strategies import STRATEGIES, allowed_strategies
from adaptcs.experiments.wavelet import E7
from adaptcs.metrics import relative_error
from adaptcs.models import GroupARD


def smooth_image(side: int) -> np.ndarray:
    """A smooth periodic image (sinusoids of one period, well sampled by the 4 x 4 approximation), flattened."""
    u = np.arange(side) / side
    return (np.sin(2 * np.pi * u)[:, None] * np.cos(2 * np.pi * u)[None, :] + 0.5 * np.cos(2 * np.pi * u)[None, :]
            ).ravel()


def disc_image(side: int) -> np.ndarray:
    """A bright disc off the dyadic grid on a dark background, flattened."""
    r, c = np.mgrid[:side, :side]
    return ((r - 0.37 * side) ** 2 + (c - 0.58 * side) ** 2 < (0.23 * side) ** 2).astype(float).ravel()


@pytest.mark.parametrize("wavelet", ["haar", "db2"])
def test_predictions_of_a_smooth_image_match_its_details(wavelet):
    # interpolating the coarse image of a smooth image predicts its details: sign and size, at every level
    basis = make_basis(wavelet, 32)
    c = basis.analyze(smooth_image(32))
    predicted = predicted_coefficients(basis, c)
    scales = basis.scales()
    assert np.array_equal(predicted[scales == 0], c[scales == 0])
    for level in range(1, scales.max() + 1):
        here = scales == level
        correlation = np.corrcoef(predicted[here], c[here])[0, 1]
        assert correlation > 0.99, (level, correlation)
        assert 0.6 < np.linalg.norm(predicted[here]) / np.linalg.norm(c[here]) < 1.1


def prediction_by_definition(basis, coef):
    """The prediction as its docstring defines it, at full resolution: synthesis of the coarser scales, block
    mean, cubic-spline zoom (scipy.ndimage), analysis (the fast path is separable 1-D matrices instead)."""
    scales, side = basis.scales(), basis.side
    predicted = np.where(scales == 0, coef, 0.0)
    for level in range(1, int(scales.max()) + 1):
        coarse = basis.synthesize(np.where(scales < level, coef, 0.0)).reshape(side, side)
        s = side >> (basis.level - level + 1)
        low = coarse.reshape(s, side // s, s, side // s).mean(axis=(1, 3))
        smooth = ndimage.zoom(low, side // s, order=3, mode="grid-wrap", grid_mode=True)
        predicted[scales == level] = basis.analyze(smooth.ravel())[scales == level]
    return predicted


@pytest.mark.parametrize("wavelet", ["haar", "db2", "bior2.2", "bior4.4"])
@pytest.mark.parametrize(("side", "level"), [(16, None), (32, 2), (64, None)])
def test_prediction_equals_its_full_resolution_definition(wavelet, side, level):
    basis = make_basis(wavelet, side, level=level)
    c = np.random.default_rng(side).normal(size=basis.d)
    expected = prediction_by_definition(basis, c)
    assert np.max(np.abs(predicted_coefficients(basis, c) - expected)) < 1e-12 * np.max(np.abs(expected))


def test_a_scale_is_predicted_from_the_coarser_scales_only():
    basis = make_basis("haar", 16)
    rng = np.random.default_rng(0)
    c = rng.normal(size=basis.d)
    scales = basis.scales()
    for level in range(1, scales.max() + 1):
        changed = np.where(scales >= level, rng.normal(size=basis.d), c)
        here = scales == level
        assert np.allclose(predicted_coefficients(basis, changed)[here], predicted_coefficients(basis, c)[here])


def test_order_is_coarse_to_fine_and_within_a_scale_follows_the_edges():
    basis = make_basis("haar", 32)
    c = basis.analyze(disc_image(32))
    scales = basis.scales()
    measured = scales <= 2  # everything but the finest level, as a top-down scan would have it
    finest = int(np.sum(scales == 3))
    chosen = prediction_order(basis, np.where(measured, c, 0.0), measured, finest // 8)
    assert np.all(scales[chosen] == 3) and len(set(chosen)) == len(chosen)
    # Haar details of a disc are non-zero only on its rim (33 of the 768 finest): the predicted-largest eighth
    # holds most of the finest level's energy, the top-down scan's first eighth (raster order) none of it
    energy = np.sum(c[scales == 3] ** 2)
    topdown = np.flatnonzero(scales == 3)[:finest // 8]
    assert np.sum(c[chosen] ** 2) / energy > 0.7 and np.sum(c[topdown] ** 2) / energy < 0.1
    # from nothing: the approximation in order, then level 1
    first = prediction_order(basis, np.zeros(basis.d), np.zeros(basis.d, dtype=bool), 20)
    assert np.array_equal(first[:16], np.arange(16)) and np.all(scales[first[16:]] == 1)
    with pytest.raises(ValueError, match="left unmeasured"):
        prediction_order(basis, c, np.ones(basis.d, dtype=bool), 1)
    with pytest.raises(ValueError, match="wavelet basis"):
        prediction_order(make_basis("dct", 8), np.zeros(64), np.zeros(64, dtype=bool), 1)


def test_measured_coefficients_are_the_basis_rows():
    basis = make_basis("haar", 8)
    rows = basis.synthesize(np.eye(basis.d)[[3, 17, 40]] * np.array([[8.0], [-2.0], [0.5]]))
    mixed = np.random.default_rng(1).normal(size=(2, basis.d))
    measured = measured_coefficients(basis.analyze(np.vstack([rows, mixed])))
    assert np.array_equal(np.flatnonzero(measured), [3, 17, 40])
    assert not measured_coefficients(np.zeros((0, basis.d))).any()


def test_noiseless_scan_beats_top_down_inside_a_scale():
    # measure 15 % of the coefficients of the disc by each order, reconstruct from them alone: the prediction
    # scan spends the finest level's budget on the rim
    basis = make_basis("haar", 32)
    x = disc_image(32)
    c = basis.analyze(x)
    k = int(0.15 * basis.d)
    measured, estimate = np.zeros(basis.d, dtype=bool), np.zeros(basis.d)
    while measured.sum() < k:
        chosen = prediction_order(basis, estimate, measured, min(8, k - measured.sum()))
        measured[chosen], estimate[chosen] = True, c[chosen]
    topdown = np.where(np.arange(basis.d) < k, c, 0.0)
    assert relative_error(basis.synthesize(estimate), x) < 0.8 * relative_error(basis.synthesize(topdown), x)


def test_designer_scans_each_coefficient_once_from_the_approximation():
    basis = make_basis("haar", 16)
    x = disc_image(16)
    designer = SequentialDesigner(GroupARD(basis.groups(), noise_var=1e-4), strategy="predict", basis=basis,
                                  batch_size=8)
    seen = []
    for _ in range(10):
        rows = designer.ask()
        assert np.allclose(np.linalg.norm(rows, axis=1), np.sqrt(basis.d))
        coefficients = basis.analyze(rows)
        index = np.abs(coefficients).argmax(axis=1)
        assert np.allclose(np.abs(coefficients[np.arange(8), index]), np.sqrt(basis.d))
        seen.extend(index)
        designer.tell(rows, rows @ x)
    assert len(set(seen)) == len(seen) == 80
    assert np.array_equal(sorted(seen[:16]), np.arange(16))  # the 4 x 4 approximation first
    assert designer.history_[0].chosen_by == "predict"
    # the run's reconstruction is (nearly) the measured coefficients
    assert relative_error(designer.reconstruction(), x) < 0.5


def test_prediction_needs_a_wavelet_basis():
    with pytest.raises(ValueError, match="wavelet basis"):
        SequentialDesigner(GroupARD(np.arange(64)), strategy="predict")
    with pytest.raises(ValueError, match="wavelet basis"):
        SequentialDesigner(GroupARD(np.arange(64)), strategy="predict", basis=make_basis("dct", 8))
    with pytest.raises(ValueError, match="sphere"):
        SequentialDesigner(GroupARD(np.arange(64)), strategy="predict", basis=make_basis("haar", 8),
                           row_constraint="binary")


def test_simulation_and_experiment_layer_run_the_prediction_scan():
    basis = make_basis("haar", 16)
    x = disc_image(16)
    X0 = np.random.default_rng(2).normal(size=(8, basis.d))
    result = run_sequential_design(GroupARD(basis.groups(), noise_var=1e-4), x, X0, X0 @ x, 5,
                                   strategy="predict", noise_var=1e-4, row_norm=16.0, rng=0, batch_size=4,
                                   basis=basis)
    assert result.n_measurements[-1] == 28 and result.errors[-1] < result.errors[0]
    assert STRATEGIES["predict"].needs_wavelet_basis and not STRATEGIES["predict"].needs_covariance
    assert "predict" in allowed_strategies(E7)
    from adaptcs.experiments.synthetic import E1

    assert "predict" not in allowed_strategies(E1)
