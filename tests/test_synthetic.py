"""Synthetic E1 problems: layout, row norms, sparsity, determinism from (experiment, setting, replicate)."""

import numpy as np
import pytest

from adaptcs.data.synthetic import (
    experiment_rng,
    group_labels,
    group_sparse_signal,
    make_e1_problem,
    problem_rng,
)
from adaptcs.measurement import sphere_rows


def test_round_robin_and_contiguous_layouts():
    np.testing.assert_array_equal(group_labels(8, 4), [0, 1, 2, 3, 0, 1, 2, 3])
    np.testing.assert_array_equal(group_labels(8, 4, "contiguous"), [0, 0, 1, 1, 2, 2, 3, 3])
    with pytest.raises(ValueError, match="must divide"):
        group_labels(10, 4)
    with pytest.raises(ValueError, match="layout"):
        group_labels(8, 4, "blocks")


def test_e1_problem_matches_the_paper_setup():
    p = make_e1_problem(experiment_rng("E1", 0, 3))
    assert p.X.shape == (64, 512) and p.y.shape == (64,) and p.w_true.shape == (512,)
    np.testing.assert_allclose(np.linalg.norm(p.X, axis=1), np.sqrt(512))
    active_groups = np.unique(p.groups[p.w_true != 0])
    assert active_groups.size == 4
    assert np.count_nonzero(p.w_true) == 16 and np.all(np.abs(p.w_true) <= 1)
    # group g holds coefficients g, g+128, g+256, g+384
    for g in active_groups:
        np.testing.assert_array_equal(np.flatnonzero(p.groups == g), g + 128 * np.arange(4))


def test_problems_depend_only_on_their_key():
    a = make_e1_problem(experiment_rng("E1", 0, 7))
    b = make_e1_problem(experiment_rng("E1", 0, 7))
    c = make_e1_problem(experiment_rng("E1", 0, 8))
    np.testing.assert_array_equal(a.X, b.X)
    np.testing.assert_array_equal(a.y, b.y)
    assert not np.array_equal(a.w_true, c.w_true)
    assert not np.array_equal(experiment_rng("E2", 0, 7).random(3), experiment_rng("E1", 0, 7).random(3))


def test_bad_keys_and_sizes():
    with pytest.raises(ValueError, match="experiment"):
        experiment_rng("E9", 0, 0)
    with pytest.raises(ValueError, match="non-negative integers"):
        problem_rng(1, -2)
    with pytest.raises(ValueError, match="n_active"):
        group_sparse_signal(np.random.default_rng(0), group_labels(8, 4), 5)
    with pytest.raises(ValueError, match="noise_var"):
        make_e1_problem(np.random.default_rng(0), noise_var=0.0)


def test_sphere_rows_radius():
    rows = sphere_rows(np.random.default_rng(0), 5, 10, radius=2.0)
    np.testing.assert_allclose(np.linalg.norm(rows, axis=1), 2.0)
