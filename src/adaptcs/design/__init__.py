"""Sequential experimental design: choose each new measurement row where the posterior is most uncertain.

- :class:`SequentialDesigner`: the ask/tell loop for an instrument (no true signal anywhere);
- :func:`run_sequential_design`: the same loop as a simulation, measurements made up from a known signal;
- :class:`CandidateDesigner`: the ask/tell loop over an operator's candidates for a model fitted on them (k-space
  lines), and :func:`replay_candidates`, that loop fed from a complete recording;
- :func:`top_eigenvectors`: leading eigenvectors of the posterior covariance operator (block power method);
- :func:`binary_rows`: +-1 rows with large ``x^T V x`` (what a digital micromirror device can show).
"""

from adaptcs.design.binary import BinaryRows, binary_rows
from adaptcs.design.candidates import CandidateDesigner, DesignRun, replay_candidates
from adaptcs.design.designer import (
    ROW_CONSTRAINTS,
    STRATEGIES,
    Asked,
    FitFailedWarning,
    SequentialDesigner,
    Told,
    has_posterior_covariance,
)
from adaptcs.design.eigen import EigenResult, leading_eigenvector, top_eigenvectors
from adaptcs.design.simulation import FITTED_HYPERPARAMETERS, SequentialDesignResult, run_sequential_design

__all__ = ["ROW_CONSTRAINTS", "STRATEGIES", "FITTED_HYPERPARAMETERS", "Asked", "BinaryRows", "CandidateDesigner",
           "DesignRun", "EigenResult", "FitFailedWarning", "SequentialDesignResult", "SequentialDesigner", "Told",
           "binary_rows", "has_posterior_covariance", "leading_eigenvector", "replay_candidates",
           "run_sequential_design", "top_eigenvectors"]
