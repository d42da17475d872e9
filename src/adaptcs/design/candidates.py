"""The ask/tell loop over an operator's candidates, for a model fitted on the candidates themselves.

An instrument whose measurements are a finite set of candidates (k-space lines) and whose model is fitted on the
candidates' values directly (a line model, :class:`adaptcs.models._line_model.LineModel`:
``model.fit(values, chosen, warm=...)``) is driven by :class:`CandidateDesigner`: :meth:`~CandidateDesigner.ask`
returns the candidates to measure next (the operator's first ones while nothing is told, then the unmeasured ones of
largest exact information gain, or the one a ``choose`` picks), :meth:`~CandidateDesigner.tell` refits warm, and
:meth:`~CandidateDesigner.converge` takes the fit to its strict test where someone reads it. The retrospective
replay and the simulation are this loop fed from a complete recording (:func:`replay_candidates`); the scanner's lab
(:mod:`adaptcs.lab.lines`) is this loop fed by the person at the scanner.

Rows of numbers (a model fitted on rows, ``fit(X, y)``) go through :class:`adaptcs.design.SequentialDesigner`
instead, whose pool takes an operator's candidates too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from adaptcs.operators import MeasurementOperator


def largest_gain(model, candidates: np.ndarray, operator: MeasurementOperator) -> tuple[int, float]:
    """Bayesian design's choice: the candidate of largest exact information gain under the model's fit, as
    ``operator`` scores it (its index into ``candidates`` and the gain in nats; the first of ties)."""
    gains = operator.gains(model, candidates)
    best = int(np.argmax(gains))
    return best, float(gains[best])


class CandidateDesigner:
    """Ask for the candidates to measure next, tell their values; the model is refitted after every tell.

    Parameters
    ----------
    model : line model
        Fitted on the candidates told, ``model.fit(values, chosen, warm=...)`` returning the model with
        ``converged_`` (:class:`adaptcs.models._line_model.LineModel`); refitted in place (warm after the first
        tell). A model whose warm refits keep their hyper-parameters (``relearn_when_read = True``) is refitted
        from scratch by :meth:`converge`.
    operator : :class:`adaptcs.operators.MeasurementOperator`
        The candidates (:meth:`~adaptcs.operators.MeasurementOperator.first` before anything is told) and their
        gains under the model's fit.
    choose : callable, optional
        ``choose(model, candidates) -> (index into candidates, score)`` under the model's current fit, one candidate
        per :meth:`ask` (an oracle that knows the signal, a timed choice); default: the largest gains by
        ``operator``, any number per ask.

    Attributes
    ----------
    chosen_ : ndarray of int, shape (m,)
        The candidates told, in the order told.
    values_ : ndarray, shape (m, ...)
        Their values, in the operator's :meth:`~adaptcs.operators.MeasurementOperator.read` layout (None before the
        first tell).

    Examples
    --------
    >>> from adaptcs.mri.data import colin27_kspace
    >>> from adaptcs.bases.separable import SeparableWavelet
    >>> from adaptcs.models.line_phase import PhaseLineGaussian
    >>> from adaptcs.operators import KSpaceLines
    >>> acq = colin27_kspace(32)[0]                      # a simulated slice (only the scanner knows it)
    >>> basis = SeparableWavelet((32, 32), "db2", 2)
    >>> designer = CandidateDesigner(PhaseLineGaussian(basis, noise_var=acq.noise_var), KSpaceLines(basis))
    >>> for _ in range(3):
    ...     lines, gains = designer.ask()                # the centre lines first, then one line at a time
    ...     _ = designer.tell(lines, acq.kspace[lines])  # the scanner's readouts
    >>> designer.chosen_.shape
    (4,)
    """

    def __init__(self, model, operator: MeasurementOperator, *, choose: Callable | None = None):
        self.model, self.operator, self.choose = model, operator, choose
        self.chosen_ = np.zeros(0, dtype=np.intp)
        self.values_ = None
        self._cold = True  # the model's last fit was from scratch

    @property
    def n_told_(self) -> int:
        """Candidates told so far."""
        return int(self.chosen_.shape[0])

    def ask(self, k: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """The candidates to measure next and their scores (gains in nats; NaN before anything is told).

        Before anything is told: the operator's first candidates, all of them, in increasing order (whatever
        ``k``). After: the ``k`` unmeasured candidates of largest gain under the model's fit (fewer if fewer are
        left; ties to the lower index), or the one ``choose`` picks.
        """
        if not self.n_told_:
            return np.sort(self.operator.first()), np.full(self.operator.n_first, np.nan)
        if k < 1:
            raise ValueError(f"k must be a positive integer; got {k}")
        candidates = np.setdiff1d(np.arange(self.operator.n_candidates), self.chosen_)
        if not candidates.size:
            raise ValueError("every candidate has been measured")
        if self.choose is None:
            gains = self.operator.gains(self.model, candidates)
            best = np.argsort(-gains, kind="stable")[:k]
            return candidates[best], gains[best]
        if k != 1:
            raise ValueError(f"a choose picks one candidate per ask; got k={k}")
        best, score = self.choose(self.model, candidates)
        return candidates[[best]], np.array([score], dtype=float)

    def tell(self, chosen, values) -> CandidateDesigner:
        """Add measured candidates and their values (``operator.read`` layout, one per candidate), then refit the
        model on everything told: from scratch the first time, warm after. A candidate told twice, or values that
        do not fit, raise ValueError and change nothing; so does a fit that fails."""
        chosen = self.operator.check_chosen(chosen)
        values = np.asarray(values)
        if values.shape[:1] != chosen.shape:
            raise ValueError(f"values must hold one entry per candidate told ({chosen.shape[0]}); got shape "
                             f"{values.shape}")
        again = np.intersect1d(chosen, self.chosen_)
        if again.size:
            raise ValueError(f"candidate(s) {again.tolist()} told already: each is measured once")
        first = self.values_ is None
        all_chosen = chosen if first else np.concatenate([self.chosen_, chosen])
        all_values = values if first else np.concatenate([self.values_, values])
        self.model.fit(all_values, all_chosen, warm=not first)
        self.chosen_, self.values_, self._cold = all_chosen, all_values, first
        return self

    def converge(self):
        """The fit as someone reads it, at its strict test: a refit from scratch where the last (warm) refit
        stopped short, or where the model relearns its hyper-parameters only when read. Returns a snapshot of the
        model (its fitted attributes); the model itself stands at that fit, and later refits start from it."""
        if self.values_ is None:
            raise ValueError("nothing has been told yet")
        relearn = getattr(self.model, "relearn_when_read", False)
        if not self.model.converged_ or (relearn and not self._cold):
            self.model.fit(self.values_, self.chosen_)
            self._cold = True
        return self.model.snapshot()


@dataclass
class DesignRun:
    """A design loop's outcome: the candidates in the order measured and the fit read at each checkpoint.

    Attributes
    ----------
    lines : ndarray of int, shape (m,)
        Candidates (k-space lines) in the order measured, the starting ones first.
    fits : dict of int -> model snapshot
        The fit read at each checkpoint (number of candidates), taken to the strict test
        (:meth:`CandidateDesigner.converge`).
    refits_stopped, refits : int
        Warm refits that only chose the next candidate and stopped short of the fixed point, of all such refits.
    gains : list of float
        The score of each chosen candidate when it was chosen (the information gain in nats for Bayesian design).
    """

    lines: np.ndarray
    fits: dict = field(default_factory=dict)
    refits_stopped: int = 0
    refits: int = 0
    gains: list = field(default_factory=list)


def replay_candidates(designer: CandidateDesigner, recording, *, start, budget: int, checkpoints=(),
                      progress: Callable | None = None) -> DesignRun:
    """The designer fed from a complete recording: tell ``start``, then ask for one candidate at a time and tell its
    value read from ``recording`` (``operator.read``), until ``budget`` candidates.

    Parameters
    ----------
    designer : CandidateDesigner
        Nothing told yet.
    recording : array-like
        The operator's complete recording (recorded, or ``operator.record`` of a known signal).
    start : array-like of int
        The first candidates (e.g. the centre lines).
    budget : int
        Candidates at the end, start included.
    checkpoints : iterable of int
        Counts at which the fit is read (:meth:`CandidateDesigner.converge`) and kept; the last count always is.
    progress : callable, optional
        ``progress(n_told, model)`` after every refit that follows a choice.
    """
    if designer.n_told_:
        raise ValueError("the designer has been told candidates already; start from a new one")
    operator = designer.operator
    start = np.asarray(start, dtype=np.intp)
    if not start.shape[0] <= budget <= operator.n_candidates:
        raise ValueError(f"budget must lie in {start.shape[0]}..{operator.n_candidates}; got {budget}")
    keep = {int(c) for c in checkpoints if start.shape[0] <= c <= budget} | {budget}
    out = DesignRun(lines=start.copy())
    designer.tell(start, operator.read(recording, start))
    while True:
        if designer.n_told_ in keep:
            out.fits[designer.n_told_] = designer.converge()
        if designer.n_told_ == budget:
            break
        new, scores = designer.ask()
        out.gains.append(float(scores[0]))
        designer.tell(new, operator.read(recording, new))
        out.refits += 1
        out.refits_stopped += int(not designer.model.converged_)
        if progress is not None:
            progress(designer.n_told_, designer.model)
    out.lines = designer.chosen_.copy()
    return out
