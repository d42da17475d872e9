import os
import tempfile

import numpy as np
import pytest

# One MNIST binary cache per test session (not the user's ~/.cache), shared with the workflow runs it starts.
os.environ["ADAPTCS_CACHE_DIR"] = tempfile.mkdtemp(prefix="adaptcs-test-cache-")


def random_group_problem(rng, n, n_groups, group_size, noise_var, p0=0.3, v0=1.0):
    """Small problem drawn from the model itself (shuffled group layout); returns X, y, groups, w."""
    d = n_groups * group_size
    groups = rng.permutation(np.repeat(np.arange(n_groups), group_size))
    active = np.zeros(n_groups, dtype=bool)
    active[rng.choice(n_groups, max(1, round(p0 * n_groups)), replace=False)] = True
    w = np.where(active[groups], rng.normal(0.0, np.sqrt(v0), d), 0.0)
    X = rng.normal(size=(n, d))
    y = X @ w + rng.normal(0.0, np.sqrt(noise_var), n)
    return X, y, groups, w


@pytest.fixture
def rng():
    return np.random.default_rng(20130101)
