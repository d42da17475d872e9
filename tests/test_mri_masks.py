"""The fixed line masks an MRI user runs (adaptcs.mri.masks): exact budgets and the structure each one claims."""

import numpy as np
import pytest

from adaptcs.mri.design import LineMaskFunc
from adaptcs.mri.masks import (
    FIXED_MASKS,
    centre_lines,
    fastmri_centre,
    fixed_mask,
    partial_fourier,
    pf_equispaced,
    pf_variable_density,
)


@pytest.mark.parametrize("ny, count", [(64, 8), (64, 16), (128, 16), (128, 32), (256, 32), (256, 64)])
def test_every_mask_has_exactly_its_budget(ny, count):
    for kind in FIXED_MASKS:
        for seed in range(3):
            lines = fixed_mask(kind, ny, count, ny // 16, np.random.default_rng(seed))
            assert lines.shape == (count,) and np.unique(lines).shape == (count,), kind
            assert lines.min() >= 0 and lines.max() < ny, kind


def test_partial_fourier_blocks_are_contiguous_and_one_sided():
    ny, count, centre = 128, 32, 64
    for factor, below in ((5 / 8, 12), (6 / 8, 8), (7 / 8, 4)):
        lines = partial_fourier(ny, count, factor)
        np.testing.assert_array_equal(lines, np.arange(centre - below, centre - below + count))
        assert np.sum(lines < centre) == below
    np.testing.assert_array_equal(partial_fourier(128, 32, 0.5), centre_lines(128, 32))
    with pytest.raises(ValueError, match="partial-Fourier factor"):
        partial_fourier(128, 32, 0.4)


def test_partial_fourier_sides_stay_within_three_quarters_of_k_space():
    ny = 128
    lowest = ny // 2 - 32  # ky >= -(6/8 - 1/2) ny
    for seed in range(5):
        lines = pf_variable_density(ny, 32, 8, np.random.default_rng(seed))
        assert lines.min() >= lowest and set(centre_lines(ny, 8)) <= set(lines.tolist())
    lines = pf_equispaced(ny, 32, 8)
    assert lines.min() >= lowest and lines.max() > ny - 5  # spread over the whole sampled side
    with pytest.raises(ValueError, match="do not fit"):
        pf_equispaced(16, 15, 2)


def test_fastmri_masks_keep_fastmri_centre_fractions():
    assert fastmri_centre(128, 32) == 10 and fastmri_centre(256, 64) == 20  # 0.08 at R = 4
    assert fastmri_centre(128, 16) == 5 and fastmri_centre(256, 32) == 10  # 0.04 at R = 8
    for kind in ("fastmri_random", "fastmri_equispaced"):
        lines = fixed_mask(kind, 256, 64, 16, np.random.default_rng(1))
        assert set(centre_lines(256, 20)) <= set(lines.tolist()), kind
    eq = fixed_mask("fastmri_equispaced", 256, 64, 16, np.random.default_rng(1))
    gaps = np.diff(np.setdiff1d(eq, centre_lines(256, 20)))
    # step (256 - 20) / 44 = 5.36 rows: gaps of 5 or 6, and one across the 20 centre lines
    assert set(gaps[gaps < 20].tolist()) <= {5, 6} and np.sum(gaps >= 20) == 1


def test_mask_func_names_the_low_frequency_lines():
    for kind, low in (("partial_fourier_7_8", 32), ("fastmri_random", 10), ("variable_density", 8),
                      ("low_to_high", 32)):
        mask, n_low = LineMaskFunc(kind, 32, 8)((128, 100), seed=0)
        assert mask.shape == (128, 1) and mask.sum() == 32 and n_low == low, kind
