import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

# One MNIST binary cache per test session (not the user's ~/.cache), shared with the workflow runs it starts.
os.environ["ADAPTCS_CACHE_DIR"] = tempfile.mkdtemp(prefix="adaptcs-test-cache-")


def _hide_slurm_clients() -> None:
    """Put failing stand-ins for SLURM's client commands first on PATH for this session and the Snakemake runs it
    starts. The SLURM executor plugin queries the cluster when it is imported (every ``snakemake`` call); on a
    machine with SLURM's clients but no reachable controller each query waits ~9 s for its connection retries.
    The suite runs Snakemake locally only (the real cluster is .ci/slurm-e2e's)."""
    stubs = Path(tempfile.mkdtemp(prefix="adaptcs-test-noslurm-"))
    for name in ("sacct", "scontrol", "squeue", "sinfo", "sbatch", "scancel", "sacctmgr"):
        (stubs / name).write_text("#!/bin/sh\necho 'no SLURM in the test suite' >&2\nexit 1\n")
        (stubs / name).chmod(0o755)
    os.environ["PATH"] = f"{stubs}{os.pathsep}{os.environ.get('PATH', '')}"


_hide_slurm_clients()


@pytest.fixture(autouse=True)
def _close_figures():
    """Close every figure a test leaves open: matplotlib warns at 20 open figures in a process (an xdist worker),
    and this suite makes the warning an error, so which tests share a worker would decide a failure. pyplot is
    not imported here if no test did."""
    yield
    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")


def pytest_collection_modifyitems(config, items):
    """Slow tests first (the order is otherwise kept): under pytest-xdist the long ones then run beside the many
    short ones, instead of one worker finishing a workflow run alone at the end (3-4 minutes on 2 cores)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


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
