"""Figures from summaries: failed replicates are left out of what is drawn and counted in the labels."""

import subprocess
import sys

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from adaptcs.metrics import image_quality  # noqa: E402
from adaptcs.plotting import (  # noqa: E402
    FIGURES,
    plot_curves,
    plot_errors,
    plot_fit_times,
    plot_images,
    plot_importance,
)
from adaptcs.results import JobResult  # noqa: E402


def job_with_a_failure(rng, method, *, setting_index=0, setting=None, R=3, T=4, d=784, G=196, checkpoints=False,
                       strategy="design"):
    """A job whose replicate 1 failed at step 2 (NaN from there on, as the design loop records it); with R = 1 a
    job of one replicate that did not fail."""
    errors = rng.uniform(0.2, 0.6, (R, T))
    fit_seconds = rng.uniform(0.01, 0.1, (R, T))
    coef = rng.uniform(0, 1, (R, d))
    group_prob = rng.uniform(0, 1, (R, G))
    converged = np.ones((R, T), dtype=np.int8)
    failed = 1 if R > 1 else slice(0, 0)
    errors[failed, 2:] = np.nan
    fit_seconds[failed, 3:] = np.nan
    coef[failed] = np.nan
    group_prob[failed] = np.nan
    converged[failed, 2:] = -1
    groups = np.tile(np.arange(d) % G, (R, 1))
    return JobResult(
        experiment="E5", setting_index=setting_index, setting=setting or {"digit": 3}, method=method,
        strategy=strategy, replicate=np.arange(R), n_measurements=np.arange(128, 128 + T), errors=errors,
        fit_seconds=fit_seconds, select_seconds=np.zeros((R, T - 1)), coef=coef, w_true=rng.uniform(0, 1, (R, d)),
        true_groups=groups, fit_groups=groups, group_prob=group_prob, problem_seed=np.zeros((R, 3), dtype=np.int64),
        design_seed=np.zeros((R, 4), dtype=np.int64), config={}, converged=converged,
        n_iter=np.full((R, T), 5), finite=np.isfinite(errors),
        failure=np.array((["", "step 2 (n=130): non-finite estimate"] + [""] * (R - 2))[:R]),
        checkpoint_n=np.array([128, 131]) if checkpoints else None,
        checkpoint_coef=coef[:, None, :].repeat(2, axis=1) if checkpoints else None)


@pytest.fixture
def summary(rng):
    return {(0, "gss_ep", "design"): job_with_a_failure(rng, "gss_ep", checkpoints=True),
            (0, "ss_ep", "design"): job_with_a_failure(rng, "ss_ep", checkpoints=True)}


@pytest.mark.parametrize("kind", sorted(FIGURES))
def test_every_figure_draws_a_summary_with_failures(summary, kind):
    """No figure breaks (or warns: warnings are errors here) on NaN from failed replicates."""
    fig = FIGURES[kind](summary, "E5")
    fig.canvas.draw()
    assert fig.axes


def _texts(fig) -> str:
    labels = [t.get_text() for ax in fig.axes for t in ax.get_xticklabels() + ax.get_yticklabels() + ax.texts]
    labels += [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    return "\n".join(labels)


def test_failed_replicates_are_counted_in_labels_and_left_out(summary):
    fig = plot_errors(summary, "E5")
    assert _texts(fig).count("1 of 3 failed") == 2
    points = [line.get_xdata() for line in fig.axes[0].lines if line.get_marker() == "."]  # horizontal boxes
    job = summary[0, "gss_ep", "design"]
    np.testing.assert_allclose(points[0], job.errors[[0, 2], -1])  # the replicates drawn: those that did not fail
    fig = plot_curves(summary, "E5")
    assert "1 of 3 failed" in _texts(fig)
    mean_line = next(line for line in fig.axes[0].lines if line.get_label().startswith("GSS-EP"))
    expected = [job.errors[:, t][np.isfinite(job.errors[:, t])].mean() for t in range(4)]
    np.testing.assert_allclose(mean_line.get_ydata(), expected)


def test_errors_across_settings_average_what_did_not_fail(rng):
    summary = {(s, "gss_ep", "random"): job_with_a_failure(rng, "gss_ep", setting_index=s,
                                                           setting={"label_noise": f})
               for s, f in enumerate([0.1, 0.4])}
    fig = plot_errors(summary, "E2")
    line = fig.axes[0].lines[0]
    expected = [np.mean(summary[s, "gss_ep", "random"].errors[[0, 2], -1]) for s in range(2)]
    np.testing.assert_allclose(np.asarray(line.get_ydata(), dtype=float), expected)
    assert "2 of 6 failed" in _texts(fig)


def test_images_show_every_setting_at_its_last_checkpoints(rng):
    """E7: one column block per setting (its own image size), the truth once, a row per method and strategy."""
    settings = [{"images": "natural", "side": 32}, {"images": "mnist", "side": 64}]
    summary = {(s, "gss_ep", strategy): job_with_a_failure(rng, "gss_ep", setting_index=s, setting=settings[s],
                                                           d=settings[s]["side"] ** 2, G=4, checkpoints=True,
                                                           strategy=strategy)
               for s in range(2) for strategy in ("design", "random")}
    fig = plot_images(summary, "E7")
    images = np.asarray(fig.axes, dtype=object).reshape(3, 4)  # truth + 2 strategies; 2 checkpoints x 2 settings
    titles = [ax.get_title() for ax in images[0]]
    assert titles[0] == "images natural, side 32\ntruth" and titles[2] == "images mnist, side 64\ntruth"
    assert not images[0, 1].images and not images[0, 3].images  # the truth once per setting
    for s, column in ((0, 1), (1, 3)):
        job = summary[s, "gss_ep", "random"]  # row 2; replicate 0 (replicate 1 failed)
        shown = images[2, column].images[0].get_array()
        np.testing.assert_array_equal(shown, job.checkpoint_coef[0, 1].reshape(shown.shape))
        assert shown.shape == (settings[s]["side"],) * 2
        # each reconstruction says its PSNR against the truth (as the tables compute it), each column n and fraction
        truth = summary[s, "gss_ep", "design"].w_true[0].reshape(shown.shape)  # the truth the figure shows
        psnr = image_quality(job.checkpoint_coef[0, 1], truth.ravel(), shown.shape)[0]
        assert images[2, column].get_xlabel() == f"{psnr:.1f} dB"
        n = job.checkpoint_n[1]
        assert images[1, column].get_title() == f"n = {n}\n({n / truth.size:.0%})"
    assert "GSS-EP, oracle (random)" in _texts(fig)


def test_learned_curves_differ_from_oracle_curves_in_shape_not_only_shade(rng):
    summary = {(0, method, "design"): job_with_a_failure(rng, method) for method in ("gss_ep", "gss_ep+learned")}
    lines = {line.get_label(): line for line in plot_curves(summary, "E3").axes[0].get_lines()
             if not line.get_label().startswith("_")}
    markers = {"learned" in label: line.get_marker() for label, line in lines.items()}
    assert len(lines) == 2 and markers[False] in ("None", "", None) and markers[True] == "o", lines


def _overlap(boxes) -> bool:
    return any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])


@pytest.mark.parametrize("plot", [plot_errors, plot_fit_times])
def test_box_figures_have_labels_that_never_overlap_and_carry_n(rng, plot):
    """Eleven methods with oracle and learned variants (E1's default run): one label per box, on the y axis, no
    two overlapping once drawn; the title says over how many replicates."""
    methods = ["gss_ep", "ss_ep", "g_ard", "g_lasso", "gss_mcmc", "g_hs", "bg_lasso", "vg", "vg_ungrouped", "flas",
               "flas_ungrouped"]
    summary = {(0, label, "random"): job_with_a_failure(rng, label, strategy="random")
               for m in methods for label in (m, f"{m}+learned")}
    fig = plot(summary, "E1")
    fig.canvas.draw()
    ax = fig.axes[0]
    labels = [t for t in ax.get_yticklabels() if t.get_text()]
    assert len(labels) == 22 and labels[0].get_text().startswith("GSS-EP, oracle")
    assert labels[1].get_text().startswith("GSS-EP, learned")  # display names, oracle or learned said
    renderer = fig.canvas.get_renderer()
    assert not _overlap([t.get_window_extent(renderer) for t in labels])
    assert "n = 3" in ax.get_title()
    if plot is plot_fit_times:
        assert ax.get_xlabel() == "CPU ms per fit" and ax.get_xscale() == "log"


def test_importance_has_a_colour_bar_and_says_which_images(summary):
    fig = plot_importance(summary, "E4")
    colorbars = [ax for ax in fig.axes if ax.get_ylabel() == "P(group active)"]
    assert len(colorbars) == 1
    assert "(first 3 of 3 images)" in fig.get_suptitle()  # the failed replicate 1 is shown last


def test_curves_titles_carry_n(summary):
    fig = plot_curves(summary, "E5")
    assert "n = 3" in fig.axes[0].get_title(loc="left")


def test_many_curves_are_split_into_panels_on_one_y_axis_and_few_replicates_are_drawn(rng):
    """E3 with every method has 26 curves: panels of at most 8, a method's oracle and learned curves together, one
    y-axis for all; with fewer than 5 replicates the replicates are drawn, not a quartile band."""
    from adaptcs.plotting import MAX_CURVES

    summary = {}
    for method in ("gss_ep", "ss_ep", "g_ard", "g_lasso", "vg", "flas", "flas_ungrouped"):
        for label in (method, f"{method}+learned"):
            for strategy in ("design", "random"):
                summary[0, label, strategy] = job_with_a_failure(rng, label, strategy=strategy, R=6)
    fig = plot_curves(summary, "E3")
    panels = [ax for ax in fig.axes if ax.get_visible()]
    means = [[line for line in ax.lines if not line.get_label().startswith("_")] for ax in panels]
    assert len(panels) >= 4 and all(len(m) <= MAX_CURVES for m in means) and sum(map(len, means)) == 28
    assert all(ax.get_shared_y_axes().joined(panels[0], ax) for ax in panels)
    assert all(ax.collections for ax in panels)  # 6 replicates: bands
    few = {(0, "gss_ep", "design"): job_with_a_failure(rng, "gss_ep", R=3)}
    fig = plot_curves(few, "E5")
    assert not fig.axes[0].collections and len(fig.axes[0].lines) == 1 + 3  # the mean and each replicate
    assert "thin lines: each replicate" in fig.get_suptitle()
    one = {(0, "gss_ep", "design"): job_with_a_failure(rng, "gss_ep", R=1)}
    fig = plot_curves(one, "E7")
    assert len(fig.axes[0].lines) == 1 and fig.get_suptitle() == "E7: mean error"  # one replicate: its curve only


def test_figure_styles_are_the_registrys():
    """Figures read colours and label notes without importing the registry; they are the registry's own."""
    from adaptcs import _styles
    from adaptcs.models.registry import METHODS

    assert set(_styles.COLORS) == set(METHODS)
    for name, entry in METHODS.items():
        assert _styles.COLORS[name] == entry.color
        for params in ({}, {"n_samples": 200, "burn_in": 50}, {"n_samples": 10_000}, {"burn_in": 10}):
            expected = entry.label_note(params)
            assert _styles.label_note(name, params) == expected
            with pytest.MonkeyPatch.context() as patch:  # as a figure job sees it: no registry loaded
                patch.delitem(sys.modules, "adaptcs.models.registry")
                assert _styles.label_note(name, params) == expected and _styles.method_color(name) == entry.color
    assert _styles.label_note("gss_mcmc", {"n_samples": 200, "burn_in": 50}) == "250 sweeps"


def test_jobs_that_only_aggregate_tabulate_or_draw_do_not_import_the_estimators():
    """What the workflow's aggregate, table and figure jobs import (scripts/rule_adapter.py) leaves out
    scikit-learn and the estimators: about 2 CPU s of start-up per job on a small machine."""
    code = ("import sys, adaptcs.plugins, adaptcs.workflow, adaptcs.results, adaptcs.tables, adaptcs.plotting; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'sklearn', 'skglm', 'numba', 'scipy'}), "
            "'adaptcs.models.registry' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["[]", "False"], out


def test_curves_of_an_experiment_read_in_db_show_the_psnr_of_every_kept_reconstruction(rng, monkeypatch):
    """A camera scan's curves (``curves_in_db``): the mean PSNR of the reconstruction kept at each step, as the tables
    and the image grids compute it; a failed replicate's NaN image drops out of the mean."""
    import matplotlib.pyplot as plt

    import adaptcs.plotting as plotting

    class Camera:  # what the figure asks of the experiment
        curves_in_db = True

        def region(self, setting, replicate):
            return None

    T = 2
    job = job_with_a_failure(rng, "gss_ep", T=T, checkpoints=True, d=64, G=16)
    job.n_measurements = job.checkpoint_n.copy()
    job.checkpoint_coef = rng.uniform(0, 1, job.checkpoint_coef.shape)
    job.checkpoint_coef[1] = np.nan  # replicate 1 failed
    monkeypatch.setattr(plotting, "_experiment_of", lambda _job: Camera())
    fig = plot_curves({(0, "gss_ep", "design"): job}, "camera")
    (mean,) = [line for line in fig.axes[0].get_lines() if not line.get_label().startswith("_")]
    expected = [np.mean([image_quality(job.checkpoint_coef[i, t], job.w_true[i], (8, 8))[0] for i in (0, 2)])
                for t in range(T)]
    np.testing.assert_allclose(mean.get_ydata(), expected, rtol=1e-12)
    assert fig.axes[0].get_ylabel() == "PSNR (dB)" and "mean PSNR" in fig._suptitle.get_text()
    plt.close(fig)  # figures left open count towards matplotlib's 20 in this worker
    monkeypatch.setattr(plotting, "_experiment_of", lambda _job: None)  # no experiment: relative errors
    fig = plot_curves({(0, "gss_ep", "design"): job}, "camera")
    assert fig.axes[0].get_ylabel() == "relative error"
    plt.close(fig)
