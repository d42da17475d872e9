"""Simulated k-space of the Colin27 slices in its three phase regimes (adaptcs.mri.data)."""

import numpy as np
import pytest

from adaptcs.mri.data import (
    MID_TERMS,
    colin27_kspace,
    colin27_slices,
    gradient_echo_phase,
    simulate,
    smooth_phase,
    susceptibility_phase,
)


def test_spin_echo_is_the_simulation_as_it_was():
    # the sum of |k-space| of test slice 0 at 64 x 64, computed by the code before the phase regimes existed
    assert np.sum(np.abs(colin27_kspace(64)[0].kspace)) == pytest.approx(233.37111183115059, rel=1e-12)
    np.testing.assert_array_equal(colin27_kspace(64, phase="spin_echo")[0].kspace, colin27_kspace(64)[0].kspace)


def _band_energy(phase: np.ndarray, lo: int, hi: int) -> float:
    spectrum = np.abs(np.fft.fft2(phase - phase.mean())) ** 2
    f = np.abs(np.fft.fftfreq(phase.shape[0], 1 / phase.shape[0]))
    band = np.maximum(f[:, None], f[None, :])
    return float(spectrum[(band >= lo) & (band <= hi)].sum() / spectrum.sum())


def test_gradient_echo_phase_has_mid_spatial_frequencies_and_spin_echo_has_none():
    rng = np.random.default_rng(0)
    ge = gradient_echo_phase((256, 256), rng)
    se = smooth_phase((256, 256), np.random.default_rng(0))
    lo, hi = MID_TERMS
    assert _band_energy(se, lo, hi) < 1e-20
    assert _band_energy(ge, lo, hi) > 0.05  # a few radians of the 4-10 cycle band beside a 2 pi smooth field
    assert 2 * np.pi < np.ptp(ge) < 2 * np.pi + 3.0 + 1e-9


def test_susceptibility_bumps_sit_on_the_brain_outline():
    brain = np.zeros((256, 256), bool)
    brain[64:192, 80:176] = True
    rng = np.random.default_rng(3)
    bumps = susceptibility_phase(brain, rng) - smooth_phase(brain.shape, np.random.default_rng(3))
    peak = np.unravel_index(np.argmax(np.abs(bumps)), bumps.shape)
    inner = np.zeros_like(brain)
    inner[72:184, 88:168] = True  # 8 pixels (4 mm at this size) inside the outline
    assert not inner[peak]  # a bump's peak is on the outline (or between two bumps near it), never deep inside
    assert 1.5 < np.max(np.abs(bumps)) < 6.5


def test_phase_regimes_change_only_the_phase():
    u8 = colin27_slices("test")[0][2]
    acqs = {p: simulate(u8, 64, noise=0.02, seed=5, phase=p) for p in ("spin_echo", "gradient_echo",
                                                                       "susceptibility")}
    ref = acqs["spin_echo"]
    for acq in acqs.values():
        np.testing.assert_array_equal(acq.mask, ref.mask)
        corr = np.corrcoef(np.abs(acq.reference).ravel(), np.abs(ref.reference).ravel())[0, 1]
        assert corr > 0.9
    with pytest.raises(ValueError, match="phase must be one of"):
        simulate(u8, 64, noise=0.02, seed=5, phase="flow")
