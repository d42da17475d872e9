"""Captions of the report's figures and tables, from an experiment's resolved config entry
(:class:`adaptcs.config.ExperimentRun`): what is plotted, over how many replicates, with which settings, methods
and rows.

The Snakemake rules pass them to the report as a rule parameter (``workflow/report/*.rst`` render it), so a
caption always describes the run that made the file.
"""

from __future__ import annotations

from adaptcs.config import ExperimentRun
from adaptcs.experiments.strategies import STRATEGIES
from adaptcs.tables import ALPHA, MIN_TEST_REPLICATES

# What each figure kind shows; {rows} is replaced by the description of the rows (experiment-specific).
_FIGURES = {
    "errors": "Final relative error ||w_hat - w|| / ||w|| of every method (box: quartiles, points: replicates; with "
              "several settings, mean +- sample standard deviation against the setting)",
    "curves": "Mean {error} against the number of {measurements} (band: 25 %-75 % of the replicates), {rows}",
    "example": "The true signal of the first replicate and every method's final reconstruction of it",
    "group_probs": "Posterior probability that each group (for ungrouped methods, each coefficient) is active, for "
                   "the first replicate; grey bars mark the truly active groups",
    "fit_times": "CPU time of single fits per method (log scale; one BLAS thread per job)",
    "images": "Reconstructions as images: the true image, then each method's reconstruction",
    "importance": "Pixel importance: each pixel shaded by the posterior probability that its group is active "
                  "(colour bar), for the first images, from the first method (in the figures' order) that has group "
                  "probabilities (GSS-EP when it ran)",
}
_LINE_NAMES = {"-": "solid", "--": "dashed", ":": "dotted", "-.": "dash-dot"}

def _rows_words(run: ExperimentRun) -> str:
    """The strategies of the run as the curves figure draws them, and what distinguishes its settings."""
    def drawn(strategy: str) -> str:
        line = _LINE_NAMES.get(STRATEGIES[strategy].line_style, "dotted")  # a dash tuple: a fine dotted line
        return f"{run.experiment.strategy_description(strategy)}, {line}"

    words = "for " + "; ".join(drawn(s) for s in run.strategies)
    note = run.experiment.settings_note(run.settings)
    return words + (f"; {note}" if note else "")


def _keeps_checkpoints(run: ExperimentRun) -> bool:
    """Whether the run keeps reconstructions at several numbers of rows (its images figure shows them)."""
    return any(run.experiment.checkpoints(s, run.n_steps) for s in run.settings)


def _setting_words(setting: dict) -> str:
    return ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in sorted(setting.items())) or "one setting"


def _run_words(run: ExperimentRun) -> str:
    """Replicates, settings, methods, hyper-parameters, strategies and steps of the experiment's run."""
    settings = [_setting_words(run.experiment.settings[i]) for i in run.settings]
    words = [f"{run.replicates} replicate{'s' if run.replicates != 1 else ''} per setting"]
    if len(settings) > 1 or settings[0] != "one setting":
        words.append(f"settings: {'; '.join(settings)}")
    words.append(f"methods: {', '.join(run.methods)}")
    meaning = {"oracle": "oracle (the paper's values, from the true signal)",
               "learned": "learned (from the measurements alone)"}
    words.append(f"hyper-parameters: {' and '.join(meaning[h] for h in run.hyperparameters)}")
    if run.n_steps:
        words.append(f"{run.n_steps} design steps, strategies {', '.join(run.strategies)}")
    return "; ".join(words)


def figure_caption(run: ExperimentRun, kind: str) -> str:
    """The caption of ``results/figures/<experiment>_<kind>.png``."""
    if kind not in _FIGURES:
        raise ValueError(f"no caption for figure kind {kind!r}; known: {sorted(_FIGURES)}")
    experiment = run.experiment
    what = _FIGURES[kind].format(rows=_rows_words(run), error=experiment.error_words,
                                 measurements=experiment.measurement_words)
    if kind == "images" and _keeps_checkpoints(run):
        what += (f" at several numbers of {experiment.measurement_words} (one replicate per setting; the last "
                 "checkpoints of a long run)")
    return f"{run.experiment.name}: {what}. Run: {_run_words(run)}."


def table_caption(run: ExperimentRun) -> str:
    """The caption of ``results/tables/<experiment>.html``."""
    return (f"{run.experiment.name}: final {run.experiment.error_words} per method and strategy (mean +- sample "
            "standard deviation over the replicates that did not fail; image experiments add PSNR and SSIM). Bold: "
            "best in its column; a dagger marks rows not significantly different from the best (paired Wilcoxon "
            f"signed-rank test, p >= {ALPHA}), shown only from {MIN_TEST_REPLICATES} replicates. "
            f"Run: {_run_words(run)}.")
