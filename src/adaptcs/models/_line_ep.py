"""GSS-EP on k-space lines, shared by the sparse line models: one fit (from scratch or warm) and what it tells
about its own convergence, column by column.

The rows are block diagonal over the columns (:mod:`adaptcs.models._blocks`), so a fit that stops short can say
which columns (independent blocks of the posterior) were still moving: the count goes to the tables
(``columns_not_converged_``).
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from scipy.special import expit
from sklearn.utils._param_validation import Interval

from adaptcs.models import _ep_learning as lrn
from adaptcs.models._ep import RESIDUAL_FACTOR, EPProblem, EPSites, Hyper, not_converged_reasons, undamped_changes

#: The EP settings every sparse line model takes (sklearn's parameter constraints).
EP_CONSTRAINTS = {
    "tol": [Interval(Real, 0, None, closed="neither")],
    "max_iter": [Interval(Integral, 1, None, closed="left")],
    "damping": [Interval(Real, 0, 1, closed="right")],
    "damping_decay": [Interval(Real, 0, 1, closed="right")],
    "v_inf_ratio": [Interval(Real, 1, None, closed="neither")],
    "dense_rows": ["boolean"],
}


def fit_lines_ep(problem: EPProblem, start: Hyper, warm_state, learn, *, tol: float, max_iter: int,
                 strict: bool = True):
    """One EP fit on unit-size line data: from ``start`` and the prior's sites with learning from scratch and, with
    ``strict``, the strict test (a fit someone reads; without it, a refit that only chooses the next line and
    learns again, flagged when it stops short), or, with ``warm_state`` ``(sites, hyper, refits)`` of the last fit,
    tracked from there with the adaptive schedule (a design loop's refit, flagged when it stops short).

    Returns
    -------
    Learned
        :class:`adaptcs.models._ep_learning.Learned`.
    """
    if warm_state is None:
        sites = EPSites.initial(expit(problem.prior_logit(start))[problem.coef_group], problem.slab_var(start))
        return lrn.infer(problem, start, sites, learn, tol=tol, max_iter=max_iter, strict=strict)
    sites, hyper, refits = warm_state
    tracked = lrn.WarmStart(sites, hyper, learn, refits) if learn else None
    return lrn.infer(problem, hyper, sites, learn, tol=tol, max_iter=max_iter, schedule="adaptive", warm=tracked)


def fit_outcome(problem: EPProblem, learned, learn, *, tol: float, max_iter: int,
                n_blocks: int) -> tuple[bool, list[str], int]:
    """Whether a fit (:func:`fit_lines_ep`) is at its fixed point, why not, and how many of its ``n_blocks``
    columns an undamped update would still move by more than the strict test allows (0 when converged; costs one
    factorisation otherwise)."""
    run = learned.run
    reasons = [] if learned.converged else [f"learning {', '.join(learn)}: {learned.message}"]
    reasons += not_converged_reasons(run, tol, max_iter)
    columns = 0
    if not run.converged and run.failure is None:
        mean_change, prob_change = undamped_changes(problem, run)
        per_coef = np.maximum(mean_change, prob_change[problem.coef_group])
        columns = int(np.count_nonzero(per_coef.reshape(n_blocks, -1).max(axis=1) > RESIDUAL_FACTOR * tol))
    return bool(run.converged and learned.converged), reasons, columns
