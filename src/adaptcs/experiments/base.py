"""The interface every experiment implements: what the runner, the workflow, the command line and the captions
ask of an experiment, so that none of them tests an experiment's name or kind.

An experiment turns ``(setting, replicate)`` into a :class:`~adaptcs.experiments.case.Case` (the signal, the
initial rows, the groups, what the methods are told) and says how the design loop measures it
(:meth:`Experiment.plan`: steps, rows per step, rows kept as checkpoints, a basis, rows fixed in advance, the
image side). Experiments are found by name in :mod:`adaptcs.experiments.registry`. Two ways in (docs/architecture.md):

- a built-in experiment (E1-E7) is an instance registered under its name; a config entry may set its
  kind-specific keys (:meth:`Experiment.configured`);
- an experiment *kind* (``kind: user``) is a class registered under the kind; the config names the experiment
  and describes its data (:meth:`Experiment.from_config`).

Either way, the experiment's :attr:`~Experiment.options` are recorded in every result file and rebuild it
(:meth:`Experiment.with_options`, :meth:`Experiment.from_options`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar

import numpy as np

from adaptcs.experiments.case import Case, case_estimator

# The keys every experiment entry of a config takes (config/README.md); a kind adds its own (config_keys).
COMMON_KEYS = ("replicates", "methods", "strategies", "hyperparameters", "n_steps")


@dataclass(frozen=True)
class Plan:
    """How the design loop measures the replicates of one setting with one strategy.

    Attributes
    ----------
    n_steps : int
        Steps of the loop after the initial rows.
    batch_size : int
        Rows added per step.
    checkpoints : tuple of int
        Numbers of rows at which the estimate is kept (the images figure).
    basis : adaptcs.bases.images.Basis or None
        Orthonormal basis the coefficients are fitted in (signals and rows stay in their own domain).
    fixed_rows : ndarray of shape (n_steps * batch_size, d) or None
        The rows of a non-adaptive strategy, in order (:attr:`~adaptcs.experiments.strategies.Strategy.fixed`).
    image_side : int or None
        Side of a square image when the signals are images (PSNR and SSIM are then recorded).
    """

    n_steps: int
    batch_size: int = 1
    checkpoints: tuple[int, ...] = ()
    basis: object | None = None
    fixed_rows: np.ndarray | None = None
    image_side: int | None = None


class Experiment(ABC):
    """An experiment: its settings, strategies, figures and defaults, its cases and its measurement plan.

    Attributes every experiment has (a dataclass field or a property)
    -----------------------------------------------------------------
    name : str
        The name in the config and in every output file.
    key : int
        Seeds its problems: ``SeedSequence((key, setting, replicate))`` and so on (E1-E7 use 1-7).
    settings : tuple of dict
        One dict per setting (``{}`` for an experiment with one setting), e.g. ``{"label_noise": 0.1}``.
    strategies : tuple of str
        The strategies a config entry runs by default; also every strategy whose rows the experiment supplies
        (names of :data:`adaptcs.experiments.strategies.STRATEGIES`).
    figures : tuple of str
        Figure kinds made for it (keys of :data:`adaptcs.plotting.FIGURES`).
    n_steps : int
        Design steps unless the config says otherwise.
    d, n_initial : int
        Coefficients and initial rows, for the default :meth:`max_steps` (an experiment whose protocol differs
        overrides it).
    """

    #: Config keys of this kind beyond :data:`COMMON_KEYS` (``settings``, ``digits``, ``basis``, ``kind``, ...).
    config_keys: ClassVar[tuple[str, ...]] = ()
    #: Whether the true signal yields the paper's oracle hyper-parameters (it is exactly sparse in the groups).
    has_oracle: ClassVar[bool] = True
    #: Whether its problems carry a profile of the scales from training images (:attr:`PriorInfo.scale_profile`).
    has_training_images: ClassVar[bool] = False
    #: Whether its measurements are images of a basis (a scan: rows select coefficients), so that methods that fit
    #: only such measurements (:attr:`adaptcs.models.registry.Method.scans_only`) can run.
    basis_scans: ClassVar[bool] = False
    #: Whether its measurements are Cartesian k-space lines (:mod:`adaptcs.mri`), so that only the line models
    #: (:attr:`adaptcs.models.registry.Method.lines_only`) can run, and only they.
    kspace_lines: ClassVar[bool] = False
    #: What its measurements are called in captions, and what its errors measure.
    measurement_words: ClassVar[str] = "measurement rows"
    error_words: ClassVar[str] = "relative error"
    #: What :meth:`calibration_problems` are, when the experiment has them (None: it has none).
    calibration: ClassVar[str | None] = None

    #: Data options: what besides the definition decides its problems, recorded in result files (e.g. where the
    #: MNIST images come from, E7's basis, a user experiment's data); none by default.
    options: Mapping = MappingProxyType({})

    name: str
    key: int
    settings: tuple
    strategies: tuple
    figures: tuple
    n_steps: int

    # --- building it -------------------------------------------------------------------------------------------

    def with_options(self, options: dict) -> Experiment:
        """This built-in experiment with recorded ``options`` (the inverse of :attr:`options`)."""
        if options:
            raise ValueError(f"{self.name} takes no data options; got {sorted(options)}")
        return self

    def configured(self, entry: dict, config: dict) -> Experiment:
        """This built-in experiment as the config entry ``entry`` (and the config's global options) sets it."""
        return self

    @classmethod
    def from_config(cls, name: str, entry: dict, config: dict) -> Experiment:
        """An experiment of this kind named ``name`` from its config entry (kinds only; ValueError on bad data)."""
        raise NotImplementedError(f"{cls.__name__} is a built-in experiment, not a kind")

    @classmethod
    def from_options(cls, name: str, options: dict) -> Experiment:
        """An experiment of this kind from recorded options (kinds only; their options hold ``kind``)."""
        raise NotImplementedError(f"{cls.__name__} is a built-in experiment, not a kind")

    # --- what a config may ask of it ---------------------------------------------------------------------------

    @property
    def default_hyperparameters(self) -> tuple[str, ...]:
        """``("oracle",)``, or ``("learned",)`` for an experiment without an oracle."""
        return ("oracle",) if self.has_oracle else ("learned",)

    def setting_indices(self, entry: dict) -> list[int]:
        """The settings a config entry selects (``settings: [...]``; all by default)."""
        return list(entry.get("settings", range(len(self.settings))))

    def settings_note(self, settings) -> str:
        """What distinguishes the given settings, for captions ("" when their values say it all)."""
        return ""

    def check_setting(self, setting: int) -> None:
        """ValueError unless ``setting`` is an index into :attr:`settings`."""
        if not 0 <= setting < len(self.settings):
            raise ValueError(f"setting_index must be in 0..{len(self.settings) - 1} for {self.name}; got {setting}")

    def check_replicates(self, replicates: int, settings) -> None:  # noqa: B027 (no limit unless overridden)
        """ValueError when the selected settings have fewer than ``replicates`` signals (no limit by default)."""

    def max_steps(self) -> int:
        """The most design steps: the rows must not outnumber the coefficients."""
        return self.d - self.n_initial

    def check_n_steps(self, n_steps: int | None) -> int:
        """The design steps: :attr:`n_steps` when ``n_steps`` is None, else ``n_steps`` if it is at most
        :meth:`max_steps` (ValueError otherwise)."""
        if n_steps is None:
            return self.n_steps
        if isinstance(n_steps, bool) or not isinstance(n_steps, (int, np.integer)) or n_steps < 0:
            raise ValueError(f"n_steps must be a non-negative integer; got {n_steps!r}")
        if n_steps > self.max_steps():
            raise ValueError(f"n_steps must be at most {self.max_steps()} in {self.name} ({self.steps_limit()}); got "
                             f"{n_steps}")
        return int(n_steps)

    def steps_limit(self) -> str:
        """Why :meth:`max_steps` is the limit, for the error message."""
        return (f"its {self.n_initial} initial rows + n_steps rows must not exceed its d = {self.d} "
                "coefficients")

    def check_oracle(self, case: Case | None = None) -> None:
        """ValueError if the oracle hyper-parameters do not exist (for the experiment, or for ``case``)."""
        if not self.has_oracle:
            raise ValueError(f"{self.name}'s signals are not exactly sparse, so there is no oracle: use "
                             "hyperparameters: [learned]")

    # --- problems and how they are measured --------------------------------------------------------------------

    @abstractmethod
    def case(self, setting: int, replicate: int) -> Case:
        """The problem of ``(setting, replicate)``: the same for every method, strategy and hyper-parameters."""

    def make_estimator(self, method: str, case: Case, method_params: dict, hyperparameters: str):
        """The estimator of ``method`` for ``case`` (:func:`adaptcs.experiments.case.case_estimator` by default)."""
        return case_estimator(method, case, method_params, hyperparameters)

    #: Whether the curves show the reconstructions' PSNR (dB, as the tables put it in brackets) rather than their
    #: relative error: for an experiment whose readers quote PSNR (a camera scan), and whose result files keep the
    #: reconstruction at every point of the curve (``checkpoint_coef``).
    curves_in_db = False

    def region(self, setting: int, replicate: int) -> np.ndarray | None:
        """The pixels an image of ``(setting, replicate)`` is scored in, shape (d,) bool (None: all of them)."""
        return None

    def strategy_description(self, strategy: str) -> str:
        """What a strategy's measurements are, for captions (the strategy's own description by default)."""
        from adaptcs.experiments.strategies import STRATEGIES

        return STRATEGIES[strategy].description

    def checkpoint_label(self, count: int, d: int) -> str:
        """How much ``count`` measurements of ``d`` coefficients are, for figure titles (a percentage)."""
        return f"{count / d:.0%}"

    def replicate_label(self, replicate: int) -> str:
        """What replicate ``replicate`` is, for the figures that show one ("" when a number says nothing more)."""
        return ""

    def calibration_problems(self, setting: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        """Problems ``(X, y, w_true, groups)`` of the setting that are never reconstructed, on which a method may
        choose a parameter per setting (:attr:`adaptcs.models.registry.Method.calibrate`); none by default."""
        return []

    def checkpoints(self, setting: int, n_steps: int) -> tuple[int, ...]:
        """Numbers of rows at which estimates are kept (none by default)."""
        return ()

    def batch_size(self, setting: int) -> int:
        """Rows added per design step (1 by default)."""
        return 1

    def image_side(self, setting: int) -> int | None:
        """Side of the square images of the setting (None: the signals are not images)."""
        return None

    def basis(self, setting: int):
        """The orthonormal basis coefficients are fitted in (None: the signal's own domain)."""
        return None

    def fixed_rows(self, setting: int, strategy: str, n_rows: int) -> np.ndarray:
        """The rows of a strategy the experiment supplies, shape (n_rows, d)."""
        raise ValueError(f"{self.name} supplies no rows for strategy {strategy!r}")

    def run_case(self, estimator, case: Case, replicate: int, plan: Plan, strategy: str, rng, callback=None,
                 resume_file=None):
        """Measure one replicate with ``strategy`` as ``plan`` says, fitting ``estimator`` along the way.

        By default the sequential design loop (:func:`adaptcs.design.run_sequential_design`) simulates new
        measurements of the case's signal, keeping its state in ``resume_file`` (if given) as it goes and going on
        from it when it is there; a kind whose measurements were recorded replays them instead.

        Returns
        -------
        adaptcs.design.SequentialDesignResult
        """
        from adaptcs.design import run_sequential_design
        from adaptcs.experiments.strategies import STRATEGIES

        p = case.problem
        return run_sequential_design(estimator, p.w_true, p.X, p.y, plan.n_steps, strategy=STRATEGIES[strategy].loop,
                                     noise_var=p.noise_var, row_norm=float(np.sqrt(p.w_true.shape[0])), rng=rng,
                                     checkpoints=plan.checkpoints, pool=plan.fixed_rows, batch_size=plan.batch_size,
                                     basis=plan.basis, callback=callback, resume_file=resume_file)

    def plan(self, setting: int, n_steps: int, strategy: str) -> Plan:
        """How the design loop measures the setting's replicates with ``strategy`` for ``n_steps`` steps."""
        from adaptcs.experiments.strategies import STRATEGIES

        self.check_setting(setting)
        batch = self.batch_size(setting)
        fixed = self.fixed_rows(setting, strategy, n_steps * batch) if STRATEGIES[strategy].fixed else None
        return Plan(n_steps=n_steps, batch_size=batch, checkpoints=self.checkpoints(setting, n_steps),
                    basis=self.basis(setting), fixed_rows=fixed, image_side=self.image_side(setting))
