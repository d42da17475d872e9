"""A design loop stopped part-way and run again with its checkpoint file gives the result of one never stopped."""

from dataclasses import fields

import numpy as np
import pytest

from adaptcs.bases.images import make_basis
from adaptcs.data.synthetic import experiment_rng, make_e1_problem
from adaptcs.design import run_sequential_design
from adaptcs.design.simulation import SequentialDesignResult
from adaptcs.models import GroupARD, GroupSpikeSlabEP

TIMINGS = {"fit_seconds", "select_seconds"}


class Stop(Exception):
    """A kill, as far as the loop can see one."""


def _e3(n=24, d=128, n_groups=32):
    return make_e1_problem(experiment_rng("E3", 0, 3), d=d, n_groups=n_groups, n_active=4, n=n)


def _loop(kind):
    """(estimator, w_true, X0, y0, keyword arguments) of a small loop of each kind."""
    if kind == "basis":
        basis = make_basis("haar", 8)
        rng = np.random.default_rng(6)
        coefs = np.zeros(64)
        coefs[rng.choice(64, 12, replace=False)] = rng.normal(size=12)
        image = basis.synthesize(coefs)
        X0 = rng.normal(size=(12, 64))
        est = GroupSpikeSlabEP(basis.groups(), p0=0.2, v0=1.0, noise_var=1e-4)
        return est, image, X0, X0 @ image, dict(noise_var=1e-4, row_norm=8.0, basis=basis, checkpoints=(16,))
    p = _e3()
    common = dict(noise_var=p.noise_var, row_norm=float(np.sqrt(p.w_true.size)), checkpoints=(28,))
    if kind == "oracle":
        est = GroupSpikeSlabEP(p.groups, p0=4 / 32, v0=1 / 3, noise_var=p.noise_var)
    elif kind == "learned":
        est = GroupSpikeSlabEP(p.groups, learn=("p0", "v0", "noise_var"))
    else:
        est = GroupARD(p.groups, noise_var=p.noise_var)
        common["batch_size"] = 2
    return est, p.w_true, p.X, p.y, common


def _run(kind, n_steps, **kw):
    est, w, X0, y0, common = _loop(kind)
    return run_sequential_design(est, w, X0, y0, n_steps, strategy="design", rng=np.random.default_rng(9),
                                 **common, **kw)


def _assert_same(a: SequentialDesignResult, b: SequentialDesignResult):
    for f in fields(SequentialDesignResult):
        if f.name in TIMINGS:
            continue
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            np.testing.assert_array_equal(x, y, err_msg=f.name)
        else:
            assert x == y, f.name


@pytest.mark.parametrize("kind", ["oracle", "learned", "ard", "basis"])
def test_a_loop_stopped_and_run_again_gives_the_result_of_one_never_stopped(tmp_path, kind):
    whole = _run(kind, 6)
    path = tmp_path / "loop.npz"
    steps = []

    def stop_in_step_4(step, n, error):
        steps.append(step)
        if step == 4:  # the progress report comes before the step's save: the last save is step 3's
            raise Stop

    with pytest.raises(Stop):
        _run(kind, 6, resume_file=path, save_seconds=0, callback=stop_in_step_4)
    assert path.exists()
    resumed = _run(kind, 6, resume_file=path, save_seconds=0, callback=lambda step, n, e: steps.append(step))
    assert steps == [1, 2, 3, 4, 4, 5, 6]  # the run again began after the saved step 3
    _assert_same(resumed, whole)
    assert not path.exists()  # removed when the loop ended
    # The fits of the stopped run are counted where they were made: the first four fit times are kept.
    assert np.all(np.isfinite(resumed.fit_seconds)) and resumed.fit_seconds.size == whole.fit_seconds.size


def _stopped_at_step_2(path, save_seconds):
    def stop(step, n, error):
        if step == 2:
            raise Stop

    with pytest.raises(Stop):
        _run("oracle", 3, resume_file=path, save_seconds=save_seconds, callback=stop)


def test_a_damaged_loop_checkpoint_is_removed_and_the_loop_starts_again(tmp_path):
    whole = _run("oracle", 3)
    path = tmp_path / "loop.npz"
    _stopped_at_step_2(path, 0)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    steps = []
    with pytest.warns(RuntimeWarning, match="design loop checkpoint not usable"):
        again = _run("oracle", 3, resume_file=path, save_seconds=0, callback=lambda s, n, e: steps.append(s))
    assert steps == [1, 2, 3]
    _assert_same(again, whole)


def test_a_loop_saves_only_when_its_interval_has_passed(tmp_path):
    path = tmp_path / "loop.npz"
    _stopped_at_step_2(path, 3600.0)
    assert not path.exists()  # an hour had not passed
    with pytest.raises(ValueError, match="save_seconds"):
        _run("oracle", 1, resume_file=path, save_seconds=-1.0)


_TERMINATED_CHILD = """
import os, signal, sys
sys.path.insert(0, sys.argv[2])
from test_loop_checkpoint import _run

def terminated_in_step_2(step, n, error):
    print("reported step", step, flush=True)
    if step == 2:  # the progress report comes before the step's save point: SIGTERM is held until then
        os.kill(os.getpid(), signal.SIGTERM)

_run("oracle", 6, resume_file=sys.argv[1], save_seconds=3600.0, callback=terminated_in_step_2)
print("the loop ended")
"""


def test_sigterm_saves_the_loop_at_the_end_of_the_step_under_way_and_ends_the_process(tmp_path):
    """SIGTERM (a time limit) during a step: the loop finishes the step, reports it, saves, and the process ends by
    SIGTERM; run again, the loop goes on from the next step to the result of one never stopped, so every step is
    reported once. No periodic save is due (one an hour), so the file can only come from the signal."""
    import signal
    import subprocess
    import sys
    from pathlib import Path

    path = tmp_path / "loop.npz"
    done = subprocess.run([sys.executable, "-c", _TERMINATED_CHILD, str(path), str(Path(__file__).parent)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == -signal.SIGTERM, done.stderr
    assert "the loop ended" not in done.stdout and "saved after step 2" in done.stderr
    assert done.stdout.split() == ["reported", "step", "1", "reported", "step", "2"]
    steps = []
    resumed = _run("oracle", 6, resume_file=path, save_seconds=3600.0, callback=lambda s, n, e: steps.append(s))
    assert steps == [3, 4, 5, 6]
    _assert_same(resumed, _run("oracle", 6))
    assert not path.exists()
