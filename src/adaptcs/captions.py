"""Captions of the report's figures and tables, from the workflow config: what is plotted, over how many
replicates, with which settings, methods and rows.

The Snakemake rules pass them to the report as a rule parameter (``workflow/report/*.rst`` render it), so a
caption always describes the run that made the file.
"""

from __future__ import annotations

from adaptcs.tables import ALPHA, MIN_TEST_REPLICATES
from adaptcs.workflow import experiment_options, experiment_spec, user_data_options

# What each figure kind shows; {rows} is replaced by the description of the rows (experiment-specific).
_FIGURES = {
    "errors": "Final relative error ||w_hat - w|| / ||w|| of every method (box: quartiles, points: replicates; with "
              "several settings, mean +- sample standard deviation against the setting)",
    "curves": "Mean relative error against the number of measurement rows (band: 25 %-75 % of the replicates), "
              "{rows}",
    "example": "The true signal of the first replicate and every method's final reconstruction of it",
    "group_probs": "Posterior probability that each group (for ungrouped methods, each coefficient) is active, for "
                   "the first replicate; grey bars mark the truly active groups",
    "fit_times": "CPU time of single fits per method (log scale; one BLAS thread per job)",
    "images": "Reconstructions as images: the true image, then each method's reconstruction",
    "importance": "Pixel importance: each pixel shaded by the posterior probability that its group is active "
                  "(colour bar), for the first images, from the first method (in the figures' order) that has group "
                  "probabilities (GSS-EP when it ran)",
}
# What each strategy's rows are; the line style is read from adaptcs.plotting.STRATEGY_STYLES.
_STRATEGIES = {
    "design": "designed rows (the leading eigenvectors of the posterior covariance)",
    "random": "random rows",
    "pool": "the best rows of a candidate pool",
    "topdown": "wavelet top-down rows (coarse scales first)",
    "pca": "PCA rows of training images",
}
_LINE_NAMES = {"-": "solid", "--": "dashed", ":": "dotted", "-.": "dash-dot"}
_PRIOR_KNOWLEDGE = ("; the settings differ in group-specific prior knowledge: none (p0 from the image), prior (p0 "
                    "doubled for the 25 groups most active in the grouping images and halved for the 25 least) and "
                    "prior_random (doubled or halved for 50 random groups)")


def _rows_words(options: dict, spec) -> str:
    """The strategies of the run as the curves figure draws them, and what distinguishes its settings."""
    from adaptcs.plotting import STRATEGY_STYLES  # deferred: matplotlib only when a caption is made

    def drawn(strategy: str) -> str:
        line = _LINE_NAMES.get(STRATEGY_STYLES.get(strategy, "-"), "dotted")  # a dash tuple: a fine dotted line
        return f"{_STRATEGIES.get(strategy, strategy)}, {line}"

    words = "for " + "; ".join(drawn(s) for s in options["strategies"])
    if any("prior_knowledge" in spec.settings[i] for i in options["settings"]):
        words += _PRIOR_KNOWLEDGE
    return words


def _keeps_checkpoints(spec) -> bool:
    """Whether the experiment keeps reconstructions at several numbers of rows (its images figure shows them)."""
    return bool(getattr(spec, "checkpoints", ())) or hasattr(spec, "default_checkpoints")


def _setting_words(setting: dict) -> str:
    return ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in sorted(setting.items())) or "one setting"


def _resolved(config: dict, experiment: str):
    """The experiment's config entry with defaults filled in, and its definition."""
    return (experiment_options(config, experiment),
            experiment_spec(experiment, user_data_options(config, experiment) or {}))


def _run_words(options: dict, spec) -> str:
    """Replicates, settings, methods, hyper-parameters, strategies and steps of the experiment's run."""
    settings = [_setting_words(spec.settings[i]) for i in options["settings"]]
    words = [f"{options['replicates']} replicate{'s' if options['replicates'] != 1 else ''} per setting"]
    if len(settings) > 1 or settings[0] != "one setting":
        words.append(f"settings: {'; '.join(settings)}")
    words.append(f"methods: {', '.join(options['methods'])}")
    meaning = {"oracle": "oracle (the paper's values, from the true signal)",
               "learned": "learned (from the measurements alone)"}
    words.append(f"hyper-parameters: {' and '.join(meaning[h] for h in options['hyperparameters'])}")
    if options["n_steps"]:
        words.append(f"{options['n_steps']} design steps, strategies {', '.join(options['strategies'])}")
    return "; ".join(words)


def figure_caption(config: dict, experiment: str, kind: str) -> str:
    """The caption of ``results/figures/<experiment>_<kind>.png``."""
    if kind not in _FIGURES:
        raise ValueError(f"no caption for figure kind {kind!r}; known: {sorted(_FIGURES)}")
    options, spec = _resolved(config, experiment)
    what = _FIGURES[kind].format(rows=_rows_words(options, spec))
    if kind == "images" and _keeps_checkpoints(spec):
        what += " at several numbers of rows (one replicate per setting; the last checkpoints of a long run)"
    return f"{experiment}: {what}. Run: {_run_words(options, spec)}."


def table_caption(config: dict, experiment: str) -> str:
    """The caption of ``results/tables/<experiment>.html``."""
    options, spec = _resolved(config, experiment)
    return (f"{experiment}: final relative error per method and strategy (mean +- sample standard deviation over "
            "the replicates that did not fail; image experiments add PSNR and SSIM). Bold: best in its column; a "
            "dagger marks rows not significantly different from the best (paired Wilcoxon signed-rank test, p >= "
            f"{ALPHA}), shown only from {MIN_TEST_REPLICATES} replicates. Run: {_run_words(options, spec)}.")
