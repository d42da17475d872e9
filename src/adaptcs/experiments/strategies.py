"""The strategies of the experiments: how the design loop chooses the rows after the initial ones.

One entry per strategy says what its rows are (captions), how its curves are drawn (figures), whether it needs a
posterior covariance (methods without one do not run it) and whether the experiment supplies its rows in advance
(an experiment lists such a strategy in its ``strategies`` and returns the rows from ``fixed_rows``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Strategy:
    """A way of choosing rows.

    Attributes
    ----------
    name : str
    description : str
        What the rows are, for captions.
    line_style : str or tuple
        Matplotlib line style of its error curves.
    loop : {"design", "random", "sequence", "predict"}
        What :func:`adaptcs.design.run_sequential_design` does: designed rows, random rows, the rows given in
        order, or the wavelet prediction scan (which needs the experiment's wavelet basis).
    """

    name: str
    description: str
    line_style: str | tuple
    loop: str

    @property
    def needs_covariance(self) -> bool:
        """Whether the method must expose a posterior covariance (designed rows)."""
        return self.loop == "design"

    @property
    def fixed(self) -> bool:
        """Whether the rows are fixed in advance and supplied by the experiment."""
        return self.loop == "sequence"

    @property
    def needs_wavelet_basis(self) -> bool:
        """Whether the rows are images of a wavelet basis (the experiment must fit in one)."""
        return self.loop == "predict"


STRATEGIES: dict[str, Strategy] = {s.name: s for s in (
    Strategy("design", "designed rows (the leading eigenvectors of the posterior covariance)", "-", "design"),
    Strategy("random", "random rows", "--", "random"),
    Strategy("topdown", "wavelet top-down rows (coarse scales first)", "-.", "sequence"),
    Strategy("pca", "PCA rows of training images", (0, (1, 1)), "sequence"),
    Strategy("predict", "wavelet prediction scan (coarse to fine, the details predicted largest first; Rousset et "
             "al. 2017)", (0, (3, 1, 1, 1, 1, 1)), "predict"),
)}


def check_strategy(name: str) -> Strategy:
    """The strategy called ``name`` (ValueError naming the known ones otherwise)."""
    if name not in STRATEGIES:
        raise ValueError(f"strategy must be one of {list(STRATEGIES)}; got {name!r}")
    return STRATEGIES[name]


def allowed_strategies(experiment) -> list[str]:
    """The strategies an experiment can run: every adaptive one, and those it lists that need rows it supplies
    or a wavelet basis it fits in."""
    return [name for name, s in STRATEGIES.items()
            if not (s.fixed or s.needs_wavelet_basis) or name in experiment.strategies]
