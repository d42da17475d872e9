"""Every public estimator has a real docstring with parameters and an Examples section, and the examples run
(doctest) with the outputs they show."""

import doctest
import warnings

import pytest
from sklearn.exceptions import ConvergenceWarning

import adaptcs.models as models
from adaptcs.models.line_coils import CoilPhaseLineGaussian
from adaptcs.models.line_phase import PhaseLineGaussian
from adaptcs.models.line_spike_slab import LineSpikeSlab  # not in adaptcs.models.__all__ (k-space lines, not rows)
from adaptcs.models.registry import METHODS

ESTIMATORS = [getattr(models, name) for name in models.__all__
              if isinstance(getattr(models, name), type) and hasattr(getattr(models, name), "fit")] + [
    LineSpikeSlab, PhaseLineGaussian, CoilPhaseLineGaussian]


def test_every_registered_method_is_a_public_estimator():
    assert {m.estimator for m in METHODS.values()} == set(ESTIMATORS)


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=lambda c: c.__name__)
def test_docstring_has_parameters_attributes_and_examples(estimator):
    doc = estimator.__doc__
    assert doc is not None, f"{estimator.__name__} has no docstring"
    for section in ("Parameters\n    ----------", "Examples\n    --------"):
        assert section in doc, f"{estimator.__name__}: no {section.split()[0]} section"


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=lambda c: c.__name__)
def test_examples_run_as_shown(estimator):
    finder = doctest.DocTestFinder(recurse=False)
    (test,) = finder.find(estimator, estimator.__name__, globs={})
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.attempted > 3 and result.failed == 0, f"{estimator.__name__}: {result.failed} example(s) failed"
