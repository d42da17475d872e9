"""The candidate loop (adaptcs.design.candidates): ask/tell over k-space lines, its replay, and the line models'
estimator contract (fit returns the model; snapshots of a fit)."""

import doctest
import warnings

import numpy as np
import pytest

import adaptcs.design.candidates as candidates_module
from adaptcs.bases.separable import SeparableWavelet, centre_lines
from adaptcs.design import CandidateDesigner, replay_candidates
from adaptcs.models.line_phase import PhaseLineGaussian
from adaptcs.models.line_spike_slab import LineSpikeSlab
from adaptcs.mri.data import colin27_kspace
from adaptcs.operators import KSpaceLines

BASIS = SeparableWavelet((32, 32), "db2", 2)


@pytest.fixture(scope="module")
def acq():
    return colin27_kspace(32)[0]


def phase_model(acq, eps=None):
    return PhaseLineGaussian(BASIS, noise_var=acq.noise_var, eps=eps)


def test_the_docstring_example_runs():
    result = doctest.testmod(candidates_module)
    assert result.attempted >= 4 and result.failed == 0


def test_fit_returns_the_model_with_its_fitted_attributes(acq):
    lines = centre_lines(32, 6)
    for model in (phase_model(acq), LineSpikeSlab(BASIS, noise_var=acq.noise_var, p0=0.999, learn=("v0",))):
        assert model.fit(acq.kspace[lines], lines) is model
        assert model.image_.shape == model.coef_.shape == (32, 32) and model.converged_ is True
        assert model.n_iter_ >= 0 and np.isfinite(model.log_evidence_) and model.cpu_seconds_ >= 0.0
        assert model.not_converged_reasons_ == [] and model.columns_not_converged_ == 0


def test_the_designer_asks_for_the_centre_then_the_largest_gains(acq):
    operator = KSpaceLines(BASIS, n_first=4)
    designer = CandidateDesigner(phase_model(acq), operator)
    first, scores = designer.ask(3)  # the first candidates, coarse to fine, at most k per ask
    np.testing.assert_array_equal(first, operator.first()[:3])
    assert np.all(np.isnan(scores))
    designer.tell(first, acq.kspace[first])
    rest, _ = designer.ask(3)
    np.testing.assert_array_equal(rest, operator.first()[3:])
    designer.tell(rest, acq.kspace[rest])
    first = np.concatenate([first, rest])
    chosen, gains = designer.ask(3)
    # the ground truth: the model's own gains of every line, the measured ones left out, largest first
    free = np.setdiff1d(np.arange(32), first)
    everything = designer.model_.line_gains(free)
    np.testing.assert_array_equal(chosen, free[np.argsort(-everything, kind="stable")[:3]])
    np.testing.assert_allclose(gains, np.sort(everything)[::-1][:3], rtol=1e-12)
    assert gains[0] > 0.0


def test_a_warm_tell_equals_a_fit_from_scratch_on_the_same_lines(acq):
    # eps given: a warm refit learns only v, as a cold one does, so the two must agree to rounding
    designer = CandidateDesigner(phase_model(acq, eps=0.1), KSpaceLines(BASIS, n_first=4))
    start, _ = designer.ask(4)
    designer.tell(start, acq.kspace[start])
    for _ in range(3):
        new, _ = designer.ask()
        designer.tell(new, acq.kspace[new])
    lines = designer.chosen_
    assert lines.shape == (7,) and np.unique(lines).shape == (7,)
    cold = phase_model(acq, eps=0.1).fit(acq.kspace[lines], lines)
    np.testing.assert_allclose(designer.model_.image_, cold.image_, rtol=1e-10, atol=1e-12)


def test_bad_tells_are_refused_and_change_nothing(acq):
    designer = CandidateDesigner(phase_model(acq), KSpaceLines(BASIS, n_first=4))
    start, _ = designer.ask(4)
    designer.tell(start, acq.kspace[start])
    image = designer.model_.image_
    with pytest.raises(ValueError, match="told already"):
        designer.tell(start[:1], acq.kspace[start[:1]])
    with pytest.raises(ValueError, match="one entry per candidate"):
        designer.tell([3, 5], acq.kspace[[3]])
    with pytest.raises(ValueError, match="at most once"):
        designer.tell([3, 3], acq.kspace[[3, 3]])
    with pytest.raises(ValueError, match="lie in 0..31"):
        designer.tell([32], acq.kspace[[0]])
    np.testing.assert_array_equal(designer.chosen_, start)
    assert designer.model_.image_ is image
    with pytest.raises(ValueError, match="one candidate per ask"):
        CandidateDesigner(phase_model(acq), KSpaceLines(BASIS), choose=lambda m, c: (0, 0.0)).tell(
            start, acq.kspace[start]).ask(2)


def test_a_snapshot_keeps_its_fit_while_the_model_moves_on(acq):
    designer = CandidateDesigner(phase_model(acq), KSpaceLines(BASIS, n_first=4))
    start, _ = designer.ask(4)
    designer.tell(start, acq.kspace[start])
    snap = designer.converge()
    kept = snap.image_.copy()
    new, _ = designer.ask()
    designer.tell(new, acq.kspace[new])
    assert not np.allclose(designer.model_.image_, kept)  # the model moved on
    np.testing.assert_array_equal(snap.image_, kept)  # the snapshot did not
    with pytest.raises(RuntimeError, match="snapshot"):
        snap.line_gains()
    with pytest.raises(RuntimeError, match="fit the model"):
        phase_model(acq).line_gains()


def test_converge_refits_from_scratch_what_relearns_when_read(acq):
    # the phase model's warm refits take at most two rounds from the last eps: the fit that is read is a cold one
    designer = CandidateDesigner(phase_model(acq), KSpaceLines(BASIS, n_first=4))
    start, _ = designer.ask(4)
    designer.tell(start, acq.kspace[start])
    for _ in range(4):
        new, _ = designer.ask()
        designer.tell(new, acq.kspace[new])
    read = designer.converge()
    lines = designer.chosen_
    cold = phase_model(acq).fit(acq.kspace[lines], lines)
    np.testing.assert_allclose(read.image_, cold.image_, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(read.eps_, cold.eps_)


def test_the_replay_is_the_designer_fed_from_the_recording(acq):
    operator = KSpaceLines(BASIS, n_first=4)
    model, fits = phase_model(acq), []
    fit = model.fit
    model.fit = lambda values, lines, **kw: fits.append((len(lines), kw.get("warm", False))) or fit(values, lines, **kw)
    run = replay_candidates(CandidateDesigner(model, operator), acq.kspace, start=centre_lines(32, 4),
                            budget=9, checkpoints=(6, 9))
    # the fits read (6 and 9 lines) are made from scratch once, not warm and then again
    assert fits == [(4, False), (5, True), (6, False), (7, True), (8, True), (9, False)]
    # the same loop by hand, at the instrument: ask, measure, tell
    designer = CandidateDesigner(phase_model(acq), operator)
    designer.tell(centre_lines(32, 4), acq.kspace[centre_lines(32, 4)])
    by_hand = {}
    while designer.n_told_ < 9:
        new, _ = designer.ask()
        designer.tell(new, acq.kspace[new])
        if designer.n_told_ in (6, 9):
            by_hand[designer.n_told_] = designer.converge()
    np.testing.assert_array_equal(run.lines, designer.chosen_)
    assert sorted(run.fits) == [6, 9] and run.refits == 5 and len(run.gains) == 5
    for count in (6, 9):
        np.testing.assert_allclose(run.fits[count].image_, by_hand[count].image_, rtol=1e-12, atol=1e-14)
    with pytest.raises(ValueError, match="budget must lie in 4..32"):
        replay_candidates(CandidateDesigner(phase_model(acq), operator), acq.kspace, start=centre_lines(32, 4),
                          budget=33)


def test_a_warm_spike_slab_refit_that_stops_short_is_counted(acq):
    model = LineSpikeSlab(BASIS, noise_var=acq.noise_var, p0=0.2, v0=1.0, learn=(), max_iter=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run = replay_candidates(CandidateDesigner(model, KSpaceLines(BASIS, n_first=4)), acq.kspace,
                                start=centre_lines(32, 4), budget=6)
    assert run.refits == 2 and run.refits_stopped == 2  # five EP iterations never reach a fixed point
