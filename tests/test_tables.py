"""Paper-style tables: mean +- std and paired tests against the best method."""

import numpy as np
import pandas as pd
import pytest

from adaptcs.tables import paired_p_value, summary_table, to_markdown


def finals(errors_by_method, setting='{"label_noise": 0.1}', setting_index=0, not_converged=None):
    """Final rows as :func:`adaptcs.results.final_rows` gives them; a NaN error is a failed replicate."""
    rows = []
    for method, errors in errors_by_method.items():
        for replicate, error in enumerate(errors):
            rows.append({"experiment": "E2", "setting_index": setting_index, "setting": setting, "method": method,
                         "strategy": "random", "replicate": replicate, "error": error,
                         "failed": not np.isfinite(error), "fits": 1,
                         "not_converged": (not_converged or {}).get(method, [0] * len(errors))[replicate]})
    return pd.DataFrame(rows)


def test_paired_test_flags_consistent_differences(rng):
    base = rng.uniform(0.2, 0.4, 12)
    table = summary_table(finals({"gss_ep": base, "ss_ep": base + 0.3, "g_ard": base + rng.normal(0, 0.01, 12)}))
    by_method = table.set_index("method")
    assert by_method.loc["gss_ep", "best"] or by_method.loc["g_ard", "best"]
    assert by_method.loc["ss_ep", "significant"] and by_method.loc["ss_ep", "p_value"] < 0.01
    assert by_method.loc["ss_ep", "mean"] == np.mean(base + 0.3)
    assert by_method.loc["ss_ep", "n"] == 12


def test_identical_errors_are_not_significant():
    a = pd.Series([0.1, 0.2, 0.3])
    assert paired_p_value(a, a) == 1.0


def test_markdown_has_a_column_per_setting(rng):
    both = pd.concat([finals({"gss_ep": [0.1, 0.2], "ss_ep": [0.5, 0.6]}),
                      finals({"gss_ep": [0.9, 0.8], "ss_ep": [0.5, 0.6]}, '{"label_noise": 1.0}', 4)])
    text = to_markdown(summary_table(both))
    assert "| method | strategy | label noise 0.1 | label noise 1.0 |" in text
    assert "**0.15 +- 0.07**" in text  # gss_ep is best at 0.1 (sample std of 0.1 and 0.2: 0.0707)
    assert "**0.55 +- 0.07**" in text  # ss_ep is best at 1.0
    # two replicates cannot make any difference significant: no cell is marked, the caption says why
    assert "\u2020" not in text and "too few for the paired test" in text


def test_significance_marks_appear_from_six_replicates():
    """With 6 paired replicates the Wilcoxon test can reach p < 0.05 (p = 2 / 2^6 = 0.031 when every difference
    has the same sign): a clearly worse row is not marked, a row that is sometimes better is."""
    table = summary_table(finals({"gss_ep": [0.1, 0.2, 0.1, 0.2, 0.1, 0.2], "ss_ep": [0.5, 0.6, 0.5, 0.6, 0.5, 0.6],
                                  "g_ard": [0.05, 0.3, 0.05, 0.3, 0.12, 0.25]}))
    text = to_markdown(table)
    ss_ep = next(line for line in text.splitlines() if line.startswith("| ss_ep"))
    g_ard = next(line for line in text.splitlines() if line.startswith("| g_ard"))
    assert "\u2020" not in ss_ep and "\u2020" in g_ard
    assert "paired Wilcoxon signed-rank test" in text
    assert table.set_index("method").loc["ss_ep", "std"] == pytest.approx(np.std([0.5, 0.6] * 3, ddof=1))


def test_failed_replicates_are_counted_never_averaged_in(rng):
    """A failed replicate is out of the mean, counted per cell, and the paired test uses the replicates both
    rows have; the Markdown cell says "k of N failed"."""
    table = summary_table(finals({"gss_ep": [0.1, np.nan, 0.3, 0.2], "ss_ep": [0.5, 0.6, 0.7, 0.8]},
                                 not_converged={"ss_ep": [0, 1, 1, 0]}))
    by_method = table.set_index("method")
    assert by_method.loc["gss_ep", "mean"] == np.mean([0.1, 0.3, 0.2])
    assert (by_method.loc["gss_ep", "failed"], by_method.loc["gss_ep", "n"]) == (1, 4)
    assert by_method.loc["ss_ep", "failed"] == 0 and by_method.loc["ss_ep", "not_converged"] == 2
    assert by_method.loc["gss_ep", "best"]
    assert by_method.loc["ss_ep", "p_value"] == paired_p_value(pd.Series([0.5, 0.7, 0.8], index=[0, 2, 3]),
                                                               pd.Series([0.1, 0.3, 0.2], index=[0, 2, 3]))
    text = to_markdown(table)
    assert "**0.20 +- 0.10** (1 of 4 failed)" in text  # sample std of 0.1, 0.3, 0.2
    assert "(2 of 4 final fits not converged)" in text
    assert "Failed replicates (a fit raised a numerical error or gave a non-finite estimate; left out of the " \
           "mean): 1. Final fits (the ones in the cells) that stopped before meeting their convergence test: " \
           "2 of 8" in text


def test_a_cell_whose_replicates_all_failed():
    table = summary_table(finals({"gss_ep": [np.nan, np.nan], "ss_ep": [0.5, 0.6]}))
    by_method = table.set_index("method")
    assert by_method.loc["ss_ep", "best"] and not by_method.loc["gss_ep", "best"]
    assert np.isnan(by_method.loc["gss_ep", "mean"]) and np.isnan(by_method.loc["gss_ep", "p_value"])
    assert "all failed (2 of 2 failed)" in to_markdown(table)


def test_rows_follow_the_method_order_of_the_figures():
    """gss_ep first, then ss_ep, g_ard ... (the registry's order), each oracle row before its learned one."""
    table = summary_table(finals({"g_ard": [0.4, 0.5], "gss_ep+learned": [0.3, 0.2], "gss_ep": [0.1, 0.2],
                                  "ss_ep": [0.6, 0.7]}))
    rows = [line.split(" | ")[0][2:] for line in to_markdown(table).splitlines()[2:6]]
    assert rows == ["gss_ep", "gss_ep+learned", "ss_ep", "g_ard"]
