"""Figures from stored summaries (never from inference).

Every figure function takes a summary, ``{(setting_index, method, strategy): JobResult}`` as returned by
:func:`adaptcs.results.read_summary`, and returns a matplotlib Figure. :data:`FIGURES` maps the figure
kinds named in the experiment definitions to these functions; :func:`save` writes one figure in several
formats with the shared style (``adaptcs.mplstyle``).
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from importlib.resources import files
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; no display is ever needed
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from adaptcs.models.gibbs import PAPER_BURN_IN, PAPER_N_SAMPLES  # noqa: E402

METHOD_COLORS = {"gss_ep": "C0", "ss_ep": "C1", "gss_mcmc": "C2", "g_ard": "C3", "g_lasso": "C4",
                 "g_hs": "C5", "bg_lasso": "C6"}
STRATEGY_STYLES = {"design": "-", "random": "--", "pool": ":"}


@contextmanager
def style():
    """The project's matplotlib style."""
    with plt.style.context(str(files("adaptcs") / "adaptcs.mplstyle")):
        yield


def _color(method: str) -> str:
    return METHOD_COLORS.get(method, "C7")


def _label(method: str, strategy: str, summary) -> str:
    """Method name, the strategy when the summary has several, and the sweeps of a shortened Gibbs run."""
    strategies = {k[2] for k in summary}
    label = method if len(strategies) == 1 else f"{method} ({strategy})"
    job = next(j for (_, m, s), j in summary.items() if (m, s) == (method, strategy))
    params = job.config.get("method_params", {})
    if "n_samples" in params or "burn_in" in params:  # a sampler run shorter (or longer) than the paper's
        sweeps = params.get("n_samples", PAPER_N_SAMPLES) + params.get("burn_in", PAPER_BURN_IN)
        if sweeps != PAPER_N_SAMPLES + PAPER_BURN_IN:
            label += f"\n{sweeps:,} sweeps"
    return label


def _ordered(summary):
    return sorted(summary.items(), key=lambda kv: (kv[0][0], list(METHOD_COLORS).index(kv[0][1])
                                                   if kv[0][1] in METHOD_COLORS else 99, kv[0][2]))


def plot_errors(summary, experiment: str):
    """Final errors per method: a box plot for one setting, mean +- std against the setting for several."""
    settings = sorted({k[0] for k in summary})
    with style():
        fig, ax = plt.subplots(figsize=(6.4, 3.6))
        if len(settings) == 1:
            items = _ordered(summary)
            data = [job.errors[:, -1] for _, job in items]
            box = ax.boxplot(data, patch_artist=True, widths=0.6)
            for patch, ((_, method, _), _job) in zip(box["boxes"], items, strict=True):
                patch.set_facecolor(_color(method))
                patch.set_alpha(0.35)
            rng = np.random.default_rng(0)
            for i, values in enumerate(data, start=1):
                ax.plot(i + rng.uniform(-0.12, 0.12, len(values)), values, ".", color="0.25", ms=3)
            ax.set_xticks(range(1, len(items) + 1), [_label(m, s, summary) for (_, m, s), _ in items])
        else:
            by_method = {}
            for (setting, method, strategy), job in summary.items():
                by_method.setdefault((method, strategy), {})[setting] = job
            labels = {s: _setting_value(next(j for k, j in summary.items() if k[0] == s).setting) for s in settings}
            for (method, strategy), jobs in sorted(by_method.items()):
                xs = sorted(jobs)
                means = [jobs[s].errors[:, -1].mean() for s in xs]
                stds = [jobs[s].errors[:, -1].std() for s in xs]
                ax.errorbar([labels[s] for s in xs], means, yerr=stds, capsize=3, marker="o",
                            color=_color(method), label=_label(method, strategy, summary))
            ax.set_xlabel(_setting_name(next(iter(summary.values())).setting))
            ax.legend()
        ax.set_ylabel("relative error")
        ax.set_title(f"{experiment}: final relative error")
        fig.tight_layout()
    return fig


def plot_curves(summary, experiment: str):
    """Mean error against the number of rows, with the interquartile band, per method and strategy."""
    with style():
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        for (_, method, strategy), job in _ordered(summary):
            n = job.n_measurements
            ax.fill_between(n, np.quantile(job.errors, 0.25, axis=0), np.quantile(job.errors, 0.75, axis=0),
                            color=_color(method), alpha=0.15, linewidth=0)
            ax.plot(n, job.errors.mean(axis=0), STRATEGY_STYLES.get(strategy, "-"), color=_color(method),
                    label=_label(method, strategy, summary))
        ax.set_xlabel("number of measurements")
        ax.set_ylabel("relative error")
        ax.set_title(f"{experiment}: mean error (band: 25%-75% of replicates)")
        ax.legend()
        fig.tight_layout()
    return fig


def plot_example(summary, experiment: str, replicate: int | None = None):
    """The true signal of one replicate and every method's final reconstruction of it."""
    items = _ordered(summary)
    shared = set.intersection(*(set(job.replicate.tolist()) for _, job in items))
    if not shared:
        raise ValueError("the jobs in the summary share no replicate")
    replicate = min(shared) if replicate is None else replicate
    with style():
        fig, axes = plt.subplots(len(items) + 1, 1, figsize=(6.4, 1.3 * (len(items) + 1)), sharex=True,
                                 sharey=True)
        first = items[0][1]
        w_true = first.w_true[list(first.replicate).index(replicate)]
        _stem(axes[0], w_true, "0.2")
        axes[0].set_title(f"{experiment}, replicate {replicate}: true signal and reconstructions", loc="left")
        axes[0].set_ylabel("truth")
        for ax, ((_, method, strategy), job) in zip(axes[1:], items, strict=True):
            row = list(job.replicate).index(replicate)
            _stem(ax, job.coef[row], _color(method))
            ax.set_ylabel(_label(method, strategy, summary), rotation=0, ha="right", va="center")
            ax.text(0.99, 0.85, f"error {job.errors[row, -1]:.2f}", transform=ax.transAxes, ha="right", va="top")
        axes[-1].set_xlabel("coefficient")
        fig.tight_layout()
    return fig


def plot_group_probs(summary, experiment: str, replicate: int | None = None):
    """Posterior activation probabilities of one replicate against the truth, for methods that have them."""
    items = [(k, job) for k, job in _ordered(summary) if job.group_prob is not None]
    if not items:
        raise ValueError("no method in the summary has group probabilities")
    replicate = min(set.intersection(*(set(j.replicate.tolist()) for _, j in items))) if replicate is None \
        else replicate
    with style():
        fig, axes = plt.subplots(len(items), 1, figsize=(6.4, 1.8 * len(items)), squeeze=False)
        for ax, ((_, method, strategy), job) in zip(axes[:, 0], items, strict=True):
            row = list(job.replicate).index(replicate)
            prob, w_true = job.group_prob[row], job.w_true[row]
            if prob.shape[0] == w_true.shape[0]:  # one probability per coefficient
                truth, unit = w_true != 0, "coefficient"
            else:  # per group of the labels the method was told
                labels = job.fit_groups[row]
                truth = np.bincount(labels, weights=(w_true != 0), minlength=prob.shape[0]) > 0
                unit = "group"
            idx = np.arange(prob.shape[0])
            ax.vlines(idx[truth], 0, 1, color="0.8", lw=2, label="truly active")
            ax.plot(idx, prob, ".", color=_color(method), ms=4, label="posterior P(active)")
            ax.set_ylim(-0.03, 1.03)
            ax.set_ylabel("P(active)")
            ax.set_xlabel(unit)
            ax.set_title(f"{_label(method, strategy, summary)}, replicate {replicate}", loc="left")
        axes[0, 0].legend(loc="upper right")
        fig.tight_layout()
    return fig


def plot_fit_times(summary, experiment: str):
    """Distribution of the wall time of single fits, per method (log scale)."""
    items = _ordered(summary)
    with style():
        fig, ax = plt.subplots(figsize=(6.4, 3.4))
        box = ax.boxplot([1e3 * job.fit_seconds.ravel() for _, job in items], patch_artist=True, widths=0.6)
        for patch, ((_, method, _), _job) in zip(box["boxes"], items, strict=True):
            patch.set_facecolor(_color(method))
            patch.set_alpha(0.35)
        ax.set_xticks(range(1, len(items) + 1), [_label(m, s, summary) for (_, m, s), _ in items])
        ax.set_yscale("log")
        ax.set_ylabel("ms per fit")
        ax.set_title(f"{experiment}: fit times")
        fig.tight_layout()
    return fig


FIGURES = {"errors": plot_errors, "curves": plot_curves, "example": plot_example,
           "group_probs": plot_group_probs, "fit_times": plot_fit_times}


def save(fig, paths) -> None:
    """Write ``fig`` to every path (format from the suffix) and close it."""
    for path in paths:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
    plt.close(fig)


def _stem(ax, values, color):
    idx = np.flatnonzero(values)
    ax.axhline(0.0, color="0.7", lw=0.5)
    ax.vlines(idx, 0, values[idx], color=color, lw=1)


def _setting_name(setting: dict) -> str:
    return ", ".join(k.replace("_", " ") for k in sorted(setting)) or "setting"


def _setting_value(setting: dict):
    values = [setting[k] for k in sorted(setting)]
    return values[0] if len(values) == 1 else json.dumps(setting)
