"""Figures from stored summaries (never from inference).

Every figure function takes a summary, ``{(setting_index, label, strategy): JobResult}`` as returned by
:func:`adaptcs.results.read_summary`, and returns a matplotlib Figure. :data:`FIGURES` maps the figure
kinds named in the experiment definitions to these functions; :func:`save` writes one figure in several
formats with the shared style (``adaptcs.mplstyle``).

Over 500 lines: one function per figure kind of :data:`FIGURES`, each a few dozen lines, on the panel, label, colour
and style helpers they share (splitting the figures would scatter those helpers or import them across modules).
"""

from __future__ import annotations

import json
import math
from contextlib import contextmanager
from importlib.resources import files
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; no display is ever needed
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import to_rgb  # noqa: E402

from adaptcs._names import base_method, method_order  # noqa: E402
from adaptcs._styles import DISPLAY_NAMES, display_name, label_note, method_color  # noqa: E402
from adaptcs.experiments.strategies import STRATEGIES  # noqa: E402
from adaptcs.metrics import image_quality  # noqa: E402
from adaptcs.tables import STD_DDOF  # noqa: E402

_MPL = tuple(int(part) for part in matplotlib.__version__.split(".")[:2])


@contextmanager
def style():
    """The project's matplotlib style."""
    with plt.style.context(str(files("adaptcs") / "adaptcs.mplstyle")):
        yield


def _color(label: str):
    """The method's colour; a darker shade of it for its learned-hyper-parameter variant (``gss_ep+learned``)."""
    color = method_color(base_method(label))
    if _is_learned(label):
        return tuple(0.55 * c for c in to_rgb(color))
    return color


def _is_learned(label: str) -> bool:
    return label != base_method(label)


def _style_boxes(box, labels) -> None:
    """Fill each box with its method's colour; hatch the learned variants."""
    for patch, label in zip(box["boxes"], labels, strict=True):
        patch.set_facecolor(_color(label))
        patch.set_alpha(0.35)
        if _is_learned(label):
            patch.set_hatch("///")


def _label(method: str, strategy: str, summary) -> str:
    """Method's display name with oracle or learned, the strategy when the summary has several, and the sweeps of
    a shortened Gibbs run."""
    strategies = {k[2] for k in summary}
    label = display_name(method) if len(strategies) == 1 else f"{display_name(method)} ({strategy})"
    job = next(j for (_, m, s), j in summary.items() if (m, s) == (method, strategy))
    note = label_note(base_method(method), job.config.get("method_params", {}))
    if note:  # e.g. a sampler run shorter (or longer) than the paper's
        label += f"\n{note}"
    jobs = [j for (_, m, s), j in summary.items() if (m, s) == (method, strategy)]
    failed = sum(int(j.failed.sum()) for j in jobs)
    if failed:  # failed replicates are left out of what is drawn; the label says how many
        label += f"\n{failed} of {sum(len(j.replicate) for j in jobs)} failed"
    return label


def _final_errors(job) -> np.ndarray:
    """Final errors of the replicates that did not fail."""
    return job.errors[~job.failed, -1]


def _box_height(n_boxes: int) -> float:
    """Figure height (inches) that leaves room for a two-line label beside every (horizontal) box."""
    return max(3.0, 0.5 * n_boxes + 1.3)


def _horizontal_boxes(ax, data, items, summary) -> None:
    """One horizontal box per item, the first at the top, labelled on the y axis (labels never overlap)."""
    orientation = {"orientation": "horizontal"} if _MPL >= (3, 10) else {"vert": False}
    box = ax.boxplot(data, patch_artist=True, widths=0.6, **orientation)
    _style_boxes(box, [method for (_, method, _), _ in items])
    ax.set_yticks(range(1, len(items) + 1), [_label(m, s, summary) for (_, m, s), _ in items])
    ax.set_ylim(len(items) + 0.6, 0.4)  # first item on top


def _n_phrase(items) -> str:
    """How many replicates the drawn jobs have: ``n = 20 replicates``, ``n = 1 replicate`` or ``n = 5-20
    replicates``."""
    counts = sorted({len(job.replicate) for _, job in items})
    return replicates_phrase(counts[0]) if len(counts) == 1 else f"n = {counts[0]}-{counts[-1]} replicates"


def replicates_phrase(n: int) -> str:
    """``n = 1 replicate`` or ``n = 20 replicates``."""
    return f"n = {n} replicate" + ("" if n == 1 else "s")


def _shown_replicates(jobs) -> list:
    """Replicates every job has, those that failed in none first (so that an example shows results)."""
    shared = set.intersection(*(set(j.replicate.tolist()) for j in jobs))
    if not shared:
        raise ValueError("the jobs in the summary share no replicate")
    failed = set().union(*(set(j.replicate[j.failed].tolist()) for j in jobs))
    return sorted(shared - failed) + sorted(shared & failed)


def _mean_and_band(errors: np.ndarray):
    """Per step (column) over the replicates still running (finite): mean, 25% and 75% quantiles (NaN where
    none is)."""
    stats = np.full((3, errors.shape[1]), np.nan)
    for t, column in enumerate(errors.T):
        alive = column[np.isfinite(column)]
        if alive.size:
            stats[:, t] = alive.mean(), *np.quantile(alive, [0.25, 0.75])
    return stats


def _ordered(summary):
    """Items by setting, then method (in the registry's order, each oracle before learned), strategy."""
    order = method_order()

    def key(item):
        setting, label, strategy = item[0]
        method = base_method(label)
        rank = order.index(method) if method in order else len(order)
        return setting, rank, label, strategy

    return sorted(summary.items(), key=key)


def plot_errors(summary, experiment: str):
    """Final errors per method: a box plot for one setting, mean +- std against the setting for several."""
    settings = sorted({k[0] for k in summary})
    with style():
        items = _ordered(summary)
        if len(settings) == 1:
            fig, ax = plt.subplots(figsize=(6.4, _box_height(len(items))))
            data = [_final_errors(job) for _, job in items]
            _horizontal_boxes(ax, data, items, summary)
            rng = np.random.default_rng(0)
            for i, values in enumerate(data, start=1):
                ax.plot(values, i + rng.uniform(-0.12, 0.12, len(values)), ".", color="0.25", ms=3)
            ax.set_xlabel("relative error")
        else:
            fig, ax = plt.subplots(figsize=(6.4, 4.0))
            by_method = {}
            for (setting, method, strategy), job in summary.items():
                by_method.setdefault((method, strategy), {})[setting] = job
            labels = {s: _setting_value(next(j for k, j in summary.items() if k[0] == s).setting) for s in settings}
            for (method, strategy), jobs in sorted(by_method.items()):
                xs = sorted(jobs)
                finals = [_final_errors(jobs[s]) for s in xs]
                means = [e.mean() if e.size else np.nan for e in finals]
                stds = [e.std(ddof=STD_DDOF) if e.size > STD_DDOF else np.nan for e in finals]
                ax.errorbar([labels[s] for s in xs], means, yerr=stds, capsize=3,
                            marker="s" if _is_learned(method) else "o",
                            color=_color(method), label=_label(method, strategy, summary))
            ax.set_xlabel(_setting_name(next(iter(summary.values())).setting))
            ax.set_ylabel("relative error (mean +- sample std)")
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
        ax.set_title(f"{experiment}: final relative error ({_n_phrase(items)})")
        fig.tight_layout()
    return fig


MAX_CURVES = 8  # curves per panel: more are split into panels by method
MIN_BAND = 5  # replicates below which the curves of the replicates are drawn instead of a quartile band
PANELS_PER_ROW = 3


def _curve_panels(summary) -> list[tuple[str, dict]]:
    """Panels of at most :data:`MAX_CURVES` curves: one per setting other than the digit (E6's prior knowledge,
    E7's images and size), split by method (a method's oracle and learned curves stay together) when it has more.
    Each panel: its title and ``{(method, strategy): [jobs]}``."""
    variants: dict[str, dict[tuple, list]] = {}
    for (_, method, strategy), job in _ordered(summary):
        variant = {k: v for k, v in job.setting.items() if k not in ("digit", "label_noise")}
        variants.setdefault(json.dumps(variant, sort_keys=True), {}).setdefault((method, strategy), []).append(job)
    panels = []
    for variant, lines in variants.items():
        title = _setting_title(json.loads(variant))
        by_method: dict[str, dict] = {}
        for (method, strategy), jobs in lines.items():
            by_method.setdefault(base_method(method), {})[method, strategy] = jobs
        chunks: list[dict] = [{}]
        for family in by_method.values():
            if chunks[-1] and len(chunks[-1]) + len(family) > MAX_CURVES:
                chunks.append({})
            chunks[-1].update(family)
        for chunk in chunks:
            methods = list(dict.fromkeys(DISPLAY_NAMES.get(base_method(m), base_method(m)) for m, _ in chunk))
            name = ", ".join(methods) if len(chunks) > 1 else ""
            panels.append((" - ".join(part for part in (title, name) if part), chunk))
    return panels


def _curve_values(jobs, experiment) -> tuple[np.ndarray, bool]:
    """The values a curve shows, shape (replicates, steps), and whether they are PSNR in dB: the relative errors, or
    for an experiment whose curves are in dB (``curves_in_db``) the PSNR of the reconstruction kept at every step,
    as the tables compute it (inside the experiment's region; NaN where a replicate failed)."""
    in_db = experiment is not None and getattr(experiment, "curves_in_db", False) and all(
        j.checkpoint_coef is not None and np.array_equal(j.checkpoint_n, j.n_measurements) for j in jobs)
    if not in_db:
        return np.concatenate([j.errors for j in jobs]), False
    rows = []
    for job in jobs:
        for i, replicate in enumerate(job.replicate):
            truth = job.w_true[i]
            side = math.isqrt(truth.size)
            region = experiment.region(job.setting_index, replicate)
            rows.append([image_quality(estimate, truth, (side, side), region=region)[0]
                         if np.all(np.isfinite(estimate)) else np.nan for estimate in job.checkpoint_coef[i]])
    return np.array(rows, dtype=float), True


def plot_curves(summary, experiment: str):
    """Mean error against the number of rows per method (colour) and strategy (line style): with at least
    :data:`MIN_BAND` replicates the band of their 25-75 % quantiles, with fewer every replicate's own curve (thin).
    One panel per setting other than the digit (replicates of all digits are pooled), split by method into panels
    of at most :data:`MAX_CURVES` curves; every panel on the same y-axis. An experiment whose curves are in dB
    (``curves_in_db``: a camera scan) shows the mean PSNR instead (:func:`_curve_values`)."""
    panels = _curve_panels(summary)
    runs = _experiment_of(next(iter(summary.values())))
    in_db = False
    n_lines = max(len(lines) for _, lines in panels)
    columns = min(len(panels), PANELS_PER_ROW)
    rows = math.ceil(len(panels) / columns)
    with style():
        legend_width = 2.8 if len(panels) == 1 and n_lines > 6 else 0.0
        fig, axes = plt.subplots(rows, columns, figsize=(6.4 + legend_width + 4.6 * (columns - 1), 4.0 * rows),
                                 squeeze=False, sharey=True)
        drawn = set()
        for ax, (title, lines) in zip(axes.flat, panels, strict=False):
            replicates = 0
            for (method, strategy), jobs in lines.items():
                n = jobs[0].n_measurements
                errors, in_db = _curve_values(jobs, runs)
                replicates = max(replicates, errors.shape[0])
                mean, low, high = _mean_and_band(errors)  # a failed replicate drops out from its failed step on
                line = STRATEGIES[strategy].line_style if strategy in STRATEGIES else "-"
                if errors.shape[0] >= MIN_BAND:
                    ax.fill_between(n, low, high, color=_color(method), alpha=0.12, linewidth=0)
                    drawn.add("band")
                elif errors.shape[0] > 1:  # too few for quantiles: the replicates themselves (one is the mean)
                    drawn.add("replicates")
                    for curve in errors:
                        ax.plot(n, curve, linestyle=line, color=_color(method), alpha=0.35, linewidth=0.7)
                # learned values: a darker shade and round markers, so that they differ in shape, not only shade
                marker = {"marker": "o", "markersize": 3.5, "markevery": max(1, len(n) // 8)} \
                    if _is_learned(method) else {}
                ax.plot(n, mean, linestyle=line, color=_color(method), label=_label(method, strategy, summary),
                        **marker)
            ax.set_xlabel("number of measurements")
            ax.set_title(f"{title} (n = {replicates})" if title else replicates_phrase(replicates), loc="left")
            # long handles: the strategies' dash patterns must be told apart in the legend, not only on the plot
            if len(panels) == 1 and n_lines > 6:
                ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), handlelength=4.0)
            else:
                ax.legend(fontsize="small", handlelength=4.0)
        for ax in list(axes.flat)[len(panels):]:
            ax.set_visible(False)
        for ax in axes[:, 0]:
            ax.set_ylabel("PSNR (dB)" if in_db else "relative error")
        notes = {"band": "band: 25%-75% of replicates",
                 "replicates": f"thin lines: each replicate, where fewer than {MIN_BAND}"}
        fig.suptitle(f"{experiment}: mean {'PSNR' if in_db else 'error'}" +
                     (f" ({'; '.join(notes[k] for k in sorted(drawn))})" if drawn else ""))
        fig.tight_layout()
    return fig


def plot_images(summary, experiment: str, n_images: int = 6):
    """Reconstructions as images. With checkpoints (E5, E7): one replicate per setting at the kept numbers of
    rows, a row per method and strategy (every checkpoint for one setting; the last two of each for several).
    Otherwise: the true images of the first setting and each method's final reconstruction of them."""
    settings = sorted({k[0] for k in summary})
    first_job = _ordered(summary)[0][1]
    with style():
        if first_job.checkpoint_coef is not None:
            fig = _checkpoint_images(summary, settings)
        else:
            fig = _final_images([(k, j) for k, j in _ordered(summary) if k[0] == settings[0]], summary, n_images)
        fig.suptitle(f"{experiment}: reconstructions (grey scale 0-1)\n(PSNR against the truth below each)")
        fig.tight_layout()
    return fig


def _checkpoint_images(summary, settings):
    """Rows: the truth, then each method and strategy; columns: (setting, checkpoint)."""
    variants = list(dict.fromkeys((m, s) for (_, m, s), _ in _ordered(summary)))
    experiment = _experiment_of(next(iter(summary.values())))
    columns = []  # (setting index, checkpoint index, replicate shown)
    for setting in settings:
        jobs = [j for k, j in summary.items() if k[0] == setting]
        n_kept = len(jobs[0].checkpoint_n)
        kept = range(n_kept) if len(settings) == 1 else range(max(0, n_kept - 2), n_kept)
        columns += [(setting, c, _shown_replicates(jobs)[0]) for c in kept]
    fig, axes = plt.subplots(len(variants) + 1, len(columns), squeeze=False,
                             figsize=(3.0 + 1.4 * len(columns), 1.6 * (len(variants) + 1) + 0.3 * (len(settings) > 1)))
    for c, (setting, checkpoint, replicate) in enumerate(columns):
        axes[0, c].axis("off")
        some_job = next(j for k, j in summary.items() if k[0] == setting)
        count = some_job.checkpoint_n[checkpoint]
        if c == 0 or columns[c - 1][0] != setting:  # the truth once per setting, titled with the setting
            title = _setting_title(some_job.setting)
            shown = "truth" if experiment is None or not experiment.replicate_label(replicate) else \
                f"truth\n{experiment.replicate_label(replicate)}"
            _show(axes[0, c], some_job.w_true[list(some_job.replicate).index(replicate)],
                  f"{title}\n{shown}" if len(settings) > 1 and title else shown)
        titled = False  # the number of rows above the first image of the column
        for r, variant in enumerate(variants, start=1):
            job = summary.get((setting, *variant))
            if job is None:
                axes[r, c].axis("off")
                continue
            i = list(job.replicate).index(replicate)
            truth = some_job.w_true[list(some_job.replicate).index(replicate)]
            estimate = job.checkpoint_coef[i, checkpoint]
            label = experiment.checkpoint_label(count, truth.size) if experiment else f"{count / truth.size:.0%}"
            _show(axes[r, c], estimate, None if titled else f"n = {count}\n({label})")
            _psnr_below(axes[r, c], estimate, truth, experiment and experiment.region(setting, replicate))
            titled = True
    for r, (method, strategy) in enumerate(variants, start=1):
        axes[r, 0].text(-0.1, 0.5, _label(method, strategy, summary), transform=axes[r, 0].transAxes,
                        ha="right", va="center")
    return fig


def _final_images(items, summary, n_images):
    """Rows: the truth, then each method's final reconstruction; columns: up to ``n_images`` replicates."""
    chosen = _shown_replicates([j for _, j in items])[:n_images]
    fig, axes = plt.subplots(len(items) + 1, len(chosen), squeeze=False,
                             figsize=(1.5 + 1.3 * len(chosen), 1.4 * (len(items) + 1)))
    first = items[0][1]
    experiment = _experiment_of(first)
    for c, replicate in enumerate(chosen):
        _show(axes[0, c], first.w_true[list(first.replicate).index(replicate)], None)
    axes[0, 0].text(-0.1, 0.5, "truth", transform=axes[0, 0].transAxes, ha="right", va="center")
    for r, ((_, method, strategy), job) in enumerate(items, start=1):
        for c, replicate in enumerate(chosen):
            estimate = job.coef[list(job.replicate).index(replicate)]
            _show(axes[r, c], estimate, None)
            _psnr_below(axes[r, c], estimate, first.w_true[list(first.replicate).index(replicate)],
                        experiment and experiment.region(first.setting_index, replicate))
        axes[r, 0].text(-0.1, 0.5, _label(method, strategy, summary), transform=axes[r, 0].transAxes,
                        ha="right", va="center")
    return fig


def plot_importance(summary, experiment: str, n_images: int = 6):
    """Pixel importance: each pixel shaded by the posterior probability that its group is active."""
    items = [(k, j) for k, j in _ordered(summary) if j.group_prob is not None and k[0] == min(k[0] for k in summary)]
    if not items:
        raise ValueError("no method in the summary has group probabilities")
    (_, method, strategy), job = items[0]
    chosen = _shown_replicates([job])[:n_images]
    with style():
        fig, axes = plt.subplots(2, len(chosen), figsize=(2.6 + 1.3 * len(chosen), 3.2), squeeze=False,
                                 layout="constrained")
        for c, replicate in enumerate(chosen):
            i = list(job.replicate).index(replicate)
            prob = job.group_prob[i]
            pixel_prob = prob if prob.shape[0] == job.w_true.shape[1] else prob[job.fit_groups[i]]
            _show(axes[0, c], job.w_true[i], None)
            image = _show(axes[1, c], pixel_prob, None, cmap="viridis")
        fig.colorbar(image, ax=axes[:, -1].tolist(), label="P(group active)", shrink=0.9)
        axes[0, 0].set_ylabel("truth", rotation=0, ha="right", va="center")
        axes[1, 0].set_ylabel(f"P(active)\n{_label(method, strategy, summary)}", rotation=0, ha="right",
                              va="center")
        fig.suptitle(f"{experiment}: pixel importance from group probabilities (first {len(chosen)} of "
                     f"{len(job.replicate)} images)")
    return fig


def plot_example(summary, experiment: str, replicate: int | None = None):
    """The true signal of one replicate and every method's final reconstruction of it."""
    items = _ordered(summary)
    shown = _shown_replicates([job for _, job in items])
    replicate = shown[0] if replicate is None else replicate
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
            text = "failed" if job.failed[row] else f"error {job.errors[row, -1]:.2f}"
            ax.text(0.99, 0.85, text, transform=ax.transAxes, ha="right", va="top")
        axes[-1].set_xlabel("coefficient")
        fig.tight_layout()
    return fig


def plot_group_probs(summary, experiment: str, replicate: int | None = None):
    """Posterior activation probabilities of one replicate against the truth, for methods that have them."""
    items = [(k, job) for k, job in _ordered(summary) if job.group_prob is not None]
    if not items:
        raise ValueError("no method in the summary has group probabilities")
    replicate = _shown_replicates([j for _, j in items])[0] if replicate is None else replicate
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
    """Distribution of the CPU time of single fits, per method (log scale)."""
    items = _ordered(summary)
    with style():
        fig, ax = plt.subplots(figsize=(6.4, _box_height(len(items))))
        times = [job.fit_seconds[np.isfinite(job.fit_seconds)] for _, job in items]  # steps never reached: NaN
        _horizontal_boxes(ax, [1e3 * t for t in times], items, summary)
        ax.set_xscale("log")
        ax.set_xlabel("CPU ms per fit")
        ax.set_title(f"{experiment}: fit times ({_n_phrase(items)}, every fit)")
        fig.tight_layout()
    return fig


FIGURES = {"errors": plot_errors, "curves": plot_curves, "example": plot_example,
           "group_probs": plot_group_probs, "fit_times": plot_fit_times, "images": plot_images,
           "importance": plot_importance}


def save(fig, paths) -> None:
    """Write ``fig`` to every path (format from the suffix) and close it."""
    for path in paths:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, bbox_inches="tight")  # labels placed outside the axes (row labels) stay in the picture
    plt.close(fig)


def _experiment_of(job):
    """The experiment a job ran (from its recorded options), or None where it cannot be rebuilt here (a plugin's
    kind that is not loaded, data that moved): figures then use the defaults."""
    from adaptcs.experiments.registry import get_experiment

    try:
        return get_experiment(job.experiment, job.config.get("data_options"))
    except (ValueError, OSError):
        return None


def _psnr_below(ax, estimate, truth, region=None) -> None:
    """The PSNR of ``estimate`` against ``truth`` under its image, as the tables compute it (inside ``region``
    where the experiment scores one; a failed replicate's NaN image: no label)."""
    if not np.all(np.isfinite(estimate)):
        return
    side = math.isqrt(np.asarray(truth).size)
    ax.set_xlabel(f"{image_quality(estimate, truth, (side, side), region=region)[0]:.1f} dB", fontsize="small")


def _show(ax, pixels, title, cmap="gray"):
    """A square image from its row-major pixels (side sqrt(d): 28 for MNIST, a user experiment's own side)."""
    pixels = np.asarray(pixels)
    side = math.isqrt(pixels.size)
    if side * side != pixels.size:
        raise ValueError(f"an image needs a square number of pixels; got {pixels.size}")
    image = ax.imshow(pixels.reshape(side, side), cmap=cmap, vmin=0.0, vmax=1.0, interpolation="nearest")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.grid(False)
    if title:
        ax.set_title(title)
    return image


def _stem(ax, values, color):
    idx = np.flatnonzero(values)
    ax.axhline(0.0, color="0.7", lw=0.5)
    ax.vlines(idx, 0, values[idx], color=color, lw=1)


def _setting_name(setting: dict) -> str:
    return ", ".join(k.replace("_", " ") for k in sorted(setting)) or "setting"


def _setting_title(setting: dict) -> str:
    """``images natural, side 64``: a setting's keys and values, for a panel title."""
    return ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in setting.items())


def _setting_value(setting: dict):
    values = [setting[k] for k in sorted(setting)]
    return values[0] if len(values) == 1 else json.dumps(setting)
