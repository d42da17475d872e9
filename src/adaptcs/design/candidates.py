"""The ask/tell loop over an operator's candidates: which of a finite set of measurements to take next.

An instrument whose measurements are a finite set of candidates (k-space lines, basis images of a single-pixel
camera, Walsh-Hadamard patterns: any :class:`adaptcs.operators.MeasurementOperator`) is driven by
:class:`CandidateDesigner`: :meth:`~CandidateDesigner.ask` returns the candidates to measure next (the operator's
first ones, then those the order picks: the largest exact information gain, the coarse-to-fine scan, the wavelet
prediction scan or a random order), :meth:`~CandidateDesigner.tell` refits, and :meth:`~CandidateDesigner.converge`
gives the fit as someone reads it. The model is either fitted on the candidates' values directly (a line model,
:class:`adaptcs.models._line_model.LineModel`, refitted in place) or a scikit-learn style estimator fitted on the
operator's rows (cloned, warm-started).

The retrospective replays and the simulations are this loop fed from a complete recording: :func:`replay_candidates`
(one candidate at a time, the k-space line design of :func:`adaptcs.mri.design.design_lines`) and
:func:`adaptcs.design.basis_scan.replay_recording` (batches, checkpoints at fractions: the camera's replay); the
scanner's lab (:mod:`adaptcs.lab.lines`) is this loop fed by the person at the scanner.

Free rows (any unit vector, designed as the posterior covariance's leading eigenvectors) go through
:class:`adaptcs.design.SequentialDesigner` instead.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning

from adaptcs import _validation as val
from adaptcs.design.prediction import prediction_order
from adaptcs.operators import MeasurementOperator

ORDERS = ("design", "topdown", "predict", "random")
TIES = ("first", "random")

# A checkpoint fit (one that is read) that stops short of its fixed point goes on for this many times the
# estimator's own max_iter: measured on 64 x 64 simulated scans, the crawling ones converge in 883-1,971 iterations.
READ_FIT_BUDGET = 8


def largest_gain(model, candidates: np.ndarray, operator: MeasurementOperator) -> tuple[int, float]:
    """Bayesian design's choice: the candidate of largest exact information gain under the model's fit, as
    ``operator`` scores it (its index into ``candidates`` and the gain in nats; the first of ties)."""
    gains = operator.gains(model, candidates)
    best = int(np.argmax(gains))
    return best, float(gains[best])


class CandidateDesigner:
    """Ask for the candidates to measure next, tell their values; the model is refitted on everything told.

    Parameters
    ----------
    model : line model or scikit-learn style estimator
        A model with ``fits_candidates = True`` (:class:`adaptcs.models._line_model.LineModel`) is fitted on the
        candidates told and their values, ``model.fit(values, chosen, warm=...)``, in place (warm after the first
        tell); :meth:`converge` refits it from scratch where the last refit stopped short or where it relearns its
        hyper-parameters only when read (``relearn_when_read``). Any other estimator is cloned at the first tell and
        fitted on the operator's rows and values (``warm_start=True`` where it has it; a scipy.sparse selection
        where it ``accepts_sparse_selection``); one that tracks its hyper-parameters
        (``replay_tracking_iterations``) takes that many iterations per refit, and :meth:`converge` reads
        :func:`converged_copy` of it.
    operator : :class:`adaptcs.operators.MeasurementOperator`
        The candidates, their first ones (:meth:`~adaptcs.operators.MeasurementOperator.first`), rows and gains.
    order : {"design", "topdown", "predict", "random"}
        What :meth:`ask` returns once the operator's first candidates are told: "design" the largest exact
        information gains under the fit (what the operator's ``gains`` need: ``line_gains``, ``coef_var_`` or
        ``cov_matvec``), "topdown" the operator's coarse-to-fine order, "predict" the wavelet prediction scan
        (basis images of a wavelet only), "random" a random order. "topdown" and "random" choose without the
        model, so :meth:`tell` leaves the refit to :meth:`converge`.
    choose : callable, optional
        ``choose(model, candidates) -> (index into candidates, score)`` under the model's current fit, in place of
        the order's choice, one candidate per :meth:`ask` (an oracle that knows the signal, a timed choice).
    available : array-like of bool, shape (n_candidates,), optional
        Candidates that can be measured (a replay: those in the recording); default all.
    ties : {"first", "random"}
        "design" among equal gains: the lowest candidate number (exact ties only), or the random order's (gains equal
        to 10 significant digits are ties: neither rounding nor units decide, :func:`largest_first`).
    rng : None, int or numpy.random.Generator
        The "random" order and the random ties (one permutation, drawn at construction).

    Attributes
    ----------
    model_ : model
        The fitted model (``model`` itself for a line model, its clone otherwise; None before the first tell).
    chosen_ : ndarray of int, shape (m,)
        The candidates told, in the order told.
    values_ : ndarray, shape (m, ...)
        Their values, in the operator's :meth:`~adaptcs.operators.MeasurementOperator.read` layout (None before the
        first tell).
    averages_ : ndarray, shape (m,)
        How many readouts each candidate's values average (1 unless told otherwise).

    Examples
    --------
    >>> from adaptcs.mri.data import colin27_kspace
    >>> from adaptcs.bases.separable import SeparableWavelet
    >>> from adaptcs.models.line_phase import PhaseLineGaussian
    >>> from adaptcs.operators import KSpaceLines
    >>> acq = colin27_kspace(32)[0]                      # a simulated slice (only the scanner knows it)
    >>> basis = SeparableWavelet((32, 32), "db2", 2)
    >>> designer = CandidateDesigner(PhaseLineGaussian(basis, noise_var=acq.noise_var), KSpaceLines(basis))
    >>> lines, _ = designer.ask(2)                       # the operator's first lines: the k-space centre
    >>> for _ in range(3):
    ...     _ = designer.tell(lines, acq.kspace[lines])  # the scanner's readouts
    ...     lines, gains = designer.ask()                # then one line at a time, the largest gain
    >>> designer.chosen_.shape
    (4,)
    """

    def __init__(self, model, operator: MeasurementOperator, *, order: str = "design", choose: Callable | None = None,
                 available=None, ties: str = "first", rng=None):
        if order not in ORDERS:
            raise ValueError(f"order must be one of {ORDERS}; got {order!r}")
        if ties not in TIES:
            raise ValueError(f"ties must be one of {TIES}; got {ties!r}")
        m = operator.n_candidates
        self.model, self.operator, self.order, self.choose, self.ties = model, operator, order, choose, ties
        self.available = np.ones(m, dtype=bool) if available is None else np.asarray(available, dtype=bool)
        if self.available.shape != (m,):
            raise ValueError(f"available must hold one flag per candidate ({m}); got shape {self.available.shape}")
        self.rng = val.check_random_generator(rng)
        self._permutation = self.rng.permutation(m)
        self._tie_rank = np.empty(m, dtype=np.intp)
        self._tie_rank[self._permutation] = np.arange(m)
        self.fits_candidates = bool(getattr(model, "fits_candidates", False))
        self.model_ = model if self.fits_candidates else None
        self.chosen_ = np.zeros(0, dtype=np.intp)
        self.values_ = None
        self.averages_ = np.zeros(0)
        self._cold = True  # a line model's last fit was from scratch
        self._stale = False  # told since the last refit

    @property
    def n_told_(self) -> int:
        """Candidates told so far."""
        return int(self.chosen_.shape[0])

    def _taken(self) -> np.ndarray:
        taken = ~self.available
        taken[self.chosen_] = True
        return taken

    def ask(self, k: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """The next ``k`` candidates (fewer if fewer are left) and their scores (gains in nats for "design" and
        a ``choose``'s score; NaN otherwise).

        The operator's first candidates come first, in their coarse-to-fine order (at most ``k`` per ask); then the
        order's choice among the available candidates not yet told, or the one ``choose`` picks.
        """
        if k < 1:
            raise ValueError(f"k must be a positive integer; got {k}")
        taken = self._taken()
        first = np.array([j for j in self.operator.first() if not taken[j]][:k], dtype=np.intp)
        if first.size:
            return first, np.full(first.shape[0], np.nan)
        if taken.all():
            raise ValueError("every candidate that can be measured has been measured")
        if self.order in ("topdown", "random"):
            scan = self.operator.coarse_to_fine() if self.order == "topdown" else self._permutation
            return scan[~taken[scan]][:k], np.full(min(k, int(np.count_nonzero(~taken))), np.nan)
        self._refit_if_stale()
        if self.choose is not None:
            if k != 1:
                raise ValueError(f"a choose picks one candidate per ask; got k={k}")
            free = np.flatnonzero(~taken)
            best, score = self.choose(self.model_, free)
            return free[[best]], np.array([score], dtype=float)
        if self.order == "predict":
            new = prediction_order(self.operator.basis, self.model_.coef_, taken, k)
            return new, np.full(new.shape[0], np.nan)
        if self.ties == "random":
            score = _design_scores(self.operator, self.model_, taken)
            new = largest_first(score, taken, k, self._tie_rank)
            return new, score[new]
        free = np.flatnonzero(~taken)
        gains = self.operator.gains(self.model_, free)
        best = np.argsort(-gains, kind="stable")[:k]
        return free[best], gains[best]

    def tell(self, chosen, values, *, averages=None, read_next: bool = False) -> CandidateDesigner:
        """Add measured candidates and their values (``operator.read`` layout, one per candidate) and refit on
        everything told ("topdown" and "random": at the next :meth:`converge`). A line model is fitted from scratch
        the first time, warm after; ``read_next`` (the caller reads this fit next, by :meth:`converge`): a line model
        that relearns its values where a fit is read (``relearn_when_read``) is fitted from scratch at once, the fit
        :meth:`converge` would make after a warm one. A candidate told twice or values that do not fit raise
        ValueError and change nothing; so does a first fit that fails.

        ``averages`` (one per candidate; line models only): how many readouts each candidate's values average, a
        candidate measured more than once told once with the mean of its readouts (its noise variance is the
        model's divided by that number)."""
        if averages is not None and not self.fits_candidates:
            raise ValueError("averages are for a model fitted on candidates (a line model); tell an estimator's "
                             "repeated rows as rows")
        chosen = self.operator.check_chosen(chosen)
        values = np.asarray(values)
        if values.shape[:1] != chosen.shape:
            raise ValueError(f"values must hold one entry per candidate told ({chosen.shape[0]}); got shape "
                             f"{values.shape}")
        again = np.intersect1d(chosen, self.chosen_)
        if again.size:
            raise ValueError(f"candidate(s) {again.tolist()} told already: each is measured once")
        first = self.values_ is None
        averages = np.ones(chosen.shape[0]) if averages is None else np.asarray(averages, dtype=float)
        all_chosen = chosen if first else np.concatenate([self.chosen_, chosen])
        all_values = values if first else np.concatenate([self.values_, values])
        all_averages = np.concatenate([self.averages_, averages])
        if self.fits_candidates:
            cold = first or (read_next and getattr(self.model, "relearn_when_read", False))
            self.model.fit(all_values, all_chosen, warm=not cold, averages=self._averages(all_averages))
            # a line model that learned its values again in this refit (learned_lines_) was fitted from scratch
            self._cold = cold or getattr(self.model, "learned_lines_", None) == all_chosen.shape[0]
        elif first:
            self.model_ = clone(self.model)
            if "warm_start" in self.model_.get_params():
                self.model_.set_params(warm_start=True)
        self.chosen_, self.values_, self.averages_ = all_chosen, all_values, all_averages
        self._stale = not self.fits_candidates
        if self.order in ("design", "predict"):
            self._refit_if_stale()
        return self

    @staticmethod
    def _averages(averages: np.ndarray):
        """What the line model is told: None where every candidate is one readout (the fit as it always was)."""
        return None if np.all(averages == 1.0) else averages

    def _rows_and_values(self):
        sparse_rows = getattr(self.model_, "accepts_sparse_selection", False)  # else dense rows: n x d floats
        return (self.operator.rows(self.chosen_, as_sparse=sparse_rows),
                self.operator.model_values(self.chosen_, self.values_))

    def _refit_if_stale(self) -> None:
        """Refit an estimator on the operator's rows if candidates were told since its last fit."""
        if not self._stale:
            return
        rows, values = self._rows_and_values()
        tracking = getattr(self.model_, "replay_tracking_iterations", None)
        if tracking is None:
            self.model_.fit(rows, values)
        else:
            tracked_fit(self.model_, rows, values, tracking)
        self._stale = False

    def converge(self):
        """The fit as someone reads it. A line model: at its strict test (a refit from scratch where the last,
        warm, refit stopped short, or where it relearns its hyper-parameters only when read), returned as a
        snapshot (its fitted attributes; the model stands at that fit and later refits start from it). An
        estimator: the last refit, or for one that tracks its hyper-parameters :func:`converged_copy` of it."""
        if self.values_ is None:
            raise ValueError("nothing has been told yet")
        if self.fits_candidates:
            relearn = getattr(self.model, "relearn_when_read", False)
            if not self.model.converged_ or (relearn and not self._cold):
                self.model.fit(self.values_, self.chosen_, averages=self._averages(self.averages_))
                self._cold = True
            return self.model.snapshot()
        self._refit_if_stale()
        if getattr(self.model_, "replay_tracking_iterations", None) is None:
            return self.model_
        return converged_copy(self.model_, *self._rows_and_values())

def _design_scores(operator: MeasurementOperator, est, taken: np.ndarray) -> np.ndarray:
    """The information gain of every untaken candidate (-inf for the taken ones), as ``x^T V x / s2`` for
    single-value candidates: the same order, and scores that tie to 10 digits exactly where the variances do."""
    free = np.flatnonzero(~taken)
    score = np.full(taken.shape[0], -np.inf)
    gains = operator.gains(est, free)
    score[free] = np.expm1(2.0 * gains) if operator.values_per_candidate == 1 else gains
    return score


def tracked_fit(est, rows, values, iterations: int) -> None:
    """Refit ``est`` (warm-started) with at most ``iterations`` iterations and no convergence warning: its
    hyper-parameters go on moving at the next refit (the tracked fit only chooses the next rows)."""
    full = est.get_params()["max_iter"]
    est.set_params(max_iter=min(iterations, full))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            est.fit(rows, values)
    finally:
        est.set_params(max_iter=full)


def converged_copy(est, rows, values):
    """A fit of ``rows`` and ``values`` at a fixed point, for reading: the better of the tracked ``est`` taken on
    to convergence and a fit from scratch.

    Each of the two is fitted with the estimator's own ``max_iter`` and, where that ends short of a fixed point (EM
    crawling along a ridge), on from where it stopped with :data:`READ_FIT_BUDGET` times as many iterations. Of the
    fits that converge, the one with the larger ``log_evidence_`` is returned: a tracked fit can reach a fixed point
    of EM far below the one a fit from scratch reaches (simulated Le Gall 5/3 scans: 101 nats and 4 dB lower, see
    docs/log/results.md), while the rows were chosen well. An estimator without ``log_evidence_`` returns the tracked
    fit when it converges. Where neither converges, the tracked one is returned (``converged_`` False, and one
    ``ConvergenceWarning``). ``est`` is not changed; ``n_iter_`` counts the returned fit's last run only."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        tracked = copy.deepcopy(est).fit(rows, values)
        if "max_iter" not in tracked.get_params():
            return tracked
        own = tracked.get_params()["max_iter"]
        tracked = _on_to_fixed_point(tracked, rows, values, own)
        if getattr(tracked, "converged_", True) and not hasattr(tracked, "log_evidence_"):
            return tracked
        scratch = _on_to_fixed_point(clone(est).fit(rows, values), rows, values, own)
    converged = [fit for fit in (tracked, scratch) if getattr(fit, "converged_", True)]
    if converged:
        return max(converged, key=lambda fit: getattr(fit, "log_evidence_", -np.inf))  # the tracked one on ties
    warnings.warn(f"{type(est).__name__}: a fit that is read did not converge, in {(1 + READ_FIT_BUDGET) * own} "
                  f"iterations from the tracked fit nor in as many from scratch; it is marked not converged",
                  ConvergenceWarning, stacklevel=3)
    return tracked


def _on_to_fixed_point(fit, rows, values, own: int):
    """``fit`` (warm-started) refitted with ``READ_FIT_BUDGET * own`` iterations if it has not converged."""
    if getattr(fit, "converged_", True):
        return fit
    fit.set_params(max_iter=READ_FIT_BUDGET * own)
    try:
        fit.fit(rows, values)
    finally:
        fit.set_params(max_iter=own)
    return fit


def largest_first(score: np.ndarray, taken: np.ndarray, k: int, tie_rank: np.ndarray) -> np.ndarray:
    """The ``k`` untaken entries of largest ``score`` (a posterior variance, or a predictive standard deviation).
    Scores equal to 10 significant digits are ties (the unmeasured coefficients of one context share their
    variance up to rounding), broken by ``tie_rank``, a fixed random order: neither rounding nor the data's units
    decide between them, and tied coefficients are spread over the image rather than taken in raster order."""
    free = np.where(taken, -np.inf, score)
    top = np.max(free)
    score = np.round(free / top, 10) if np.isfinite(top) and top > 0 else free
    return np.lexsort((tie_rank, -score))[:k]


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
    """The designer fed from a complete recording, one candidate at a time: tell ``start``, then ask for one
    candidate at a time and tell its value read from ``recording`` (``operator.read``), until ``budget`` candidates
    (the k-space line design; :func:`adaptcs.design.basis_scan.replay_recording` is the same loop in batches).

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
        designer.tell(new, operator.read(recording, new), read_next=designer.n_told_ + new.shape[0] in keep)
        out.refits += 1
        out.refits_stopped += int(not designer.model_.converged_)
        if progress is not None:
            progress(designer.n_told_, designer.model_)
    out.lines = designer.chosen_.copy()
    return out
