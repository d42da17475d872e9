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
    loop : {"design", "random", "sequence", "predict", "lines"}
        What :func:`adaptcs.design.run_sequential_design` does: designed rows, random rows, the rows given in
        order, or the wavelet prediction scan (which needs the experiment's wavelet basis); "lines": a choice of
        k-space lines that only experiments of lines make (:mod:`adaptcs.experiments.mri`).
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
    def needs_kspace_lines(self) -> bool:
        """Whether it chooses Cartesian k-space lines (only experiments of k-space lines run it)."""
        return self.loop == "lines"

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
    Strategy("low_to_high", "k-space lines from the lowest frequency up (the low-pass mask)", "-.", "lines"),
    Strategy("partial_fourier_5_8", "partial Fourier: contiguous k-space lines, 5/8 of them from ky = 0 up",
             (0, (4, 1)), "lines"),
    Strategy("partial_fourier_6_8", "partial Fourier: contiguous k-space lines, 6/8 of them from ky = 0 up",
             (0, (4, 2)), "lines"),
    Strategy("partial_fourier_7_8", "partial Fourier: contiguous k-space lines, 7/8 of them from ky = 0 up",
             (0, (4, 3)), "lines"),
    Strategy("pf_variable_density", "partial Fourier (3/4 of k-space) sampled by a variable density",
             (0, (2, 1, 1, 1)), "lines"),
    Strategy("pf_equispaced", "partial Fourier (3/4 of k-space) sampled by equispaced lines", (0, (2, 2, 1, 2)),
             "lines"),
    Strategy("equispaced", "centre k-space lines and equispaced ones", (0, (5, 2)), "lines"),
    Strategy("variable_density", "centre k-space lines and random ones of a polynomial variable density",
             (0, (1, 1)), "lines"),
    Strategy("jittered_density", "centre k-space lines and jittered (Poisson-like) variable-density ones",
             (0, (3, 1)), "lines"),
    Strategy("fastmri_random", "fastMRI's random mask (its centre fraction, uniform lines outside it)",
             (0, (1, 2)), "lines"),
    Strategy("fastmri_equispaced", "fastMRI's equispaced mask (its centre fraction, a random offset)",
             (0, (6, 2)), "lines"),
    Strategy("offline_greedy", "the greedy line order learned on training slices, then fixed", (0, (5, 1, 1, 1)),
             "lines"),
    Strategy("oracle_greedy", "greedy lines chosen knowing the image, each the one that leaves the smallest magnitude "
             "error where the tables score it (a greedy bound no scan can reach)", ":", "lines"),
)}


def check_strategy(name: str) -> Strategy:
    """The strategy called ``name`` (ValueError naming the known ones otherwise)."""
    if name not in STRATEGIES:
        raise ValueError(f"strategy must be one of {list(STRATEGIES)}; got {name!r}")
    return STRATEGIES[name]


def allowed_strategies(experiment) -> list[str]:
    """The strategies an experiment can run: every adaptive one, those it lists that need rows it supplies or a
    wavelet basis it fits in, and the choices of k-space lines if its measurements are lines; never one of its
    ``refused_strategies`` (an attribute it may have)."""
    refused = getattr(experiment, "refused_strategies", ())
    return [name for name, s in STRATEGIES.items() if name not in refused and (
        (s.needs_kspace_lines and experiment.kspace_lines)
        or not (s.fixed or s.needs_wavelet_basis or s.needs_kspace_lines) or name in experiment.strategies)]
