"""Tables like the paper's Tables 3 and 4, from tidy result tables (never from inference).

Every row reports the final relative error as mean +- std over replicates and a paired comparison with
the best row of the same setting: a Wilcoxon signed-rank test on the per-replicate errors (every method
sees the same signals, so the errors pair up by replicate). A method run with learned hyper-parameters
(``gss_ep+learned``) is also compared, paired, with the same method given the oracle's, and the median of the
values it learned is reported.

Failures are part of the table, never averaged away: a replicate whose run failed (a fit raised a numerical
error or returned a non-finite estimate) is left out of the mean and counted in ``failed``, and the cell says
"k of N failed"; final fits (the ones the cells report) that stopped without meeting their convergence test are
counted in ``not_converged`` (out of ``fits``, the final fits that have such a test) and the cell says so too. The
earlier refits of a curve (in a design loop, those that only chose the next rows) that stopped short are counted
apart (``refits_stopped`` of ``refits``), in one line under the table.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import numpy as np
import pandas as pd

from adaptcs._names import base_method, method_order

ALPHA = 0.05
# The smallest number of paired replicates at which a two-sided Wilcoxon signed-rank test can reach p < ALPHA
# (with 5 pairs its smallest p-value is 2 / 2^5 = 0.0625): below it, no cell is marked "not significant".
MIN_TEST_REPLICATES = 6
STD_DDOF = 1  # the sample standard deviation over replicates, everywhere (tables, CLI, figures)
FITTED_NAMES = {"fitted_p0": "p0", "fitted_v0": "v0", "fitted_noise_var": "noise variance",
                "fitted_alpha": "penalty"}
FITTED_COLUMNS = tuple(FITTED_NAMES)


def summary_table(finals: pd.DataFrame) -> pd.DataFrame:
    """Mean, std and paired test against the best method per setting.

    Parameters
    ----------
    finals : DataFrame
        One row per (setting, method, strategy, replicate) with an ``error`` column
        (:func:`adaptcs.results.final_rows`).

    Returns
    -------
    DataFrame with columns experiment, setting_index, setting, method, strategy, mean, std (over the
    replicates that did not fail), n (replicates), failed (replicates that failed), fits (final fits with a
    convergence test), not_converged (of those, fits that did not converge), refits and refits_stopped (the same for
    the earlier steps of the curves, where the finals table has them), best (bool), p_value (against
    the best row, on the replicates neither failed; NaN for the best itself and for a row with no
    results), significant (p < 0.05); for learned rows with an oracle row of the same method and strategy
    p_vs_oracle (paired, NaN otherwise) and oracle_mean; median fitted_p0, fitted_v0, fitted_noise_var and
    fitted_alpha over the replicates that did not fail, where the method reports them; blocks_not_converged (summed
    over the final fits) where the jobs record it (k-space lines).
    """
    keys = ["experiment", "setting_index", "setting", "method", "strategy"]
    rows = []
    for (experiment, setting_index, setting), block in finals.groupby(keys[:3], sort=True):
        cells = {k: g.set_index("replicate") for k, g in block.groupby(["method", "strategy"])}
        errors = {k: g.loc[~g["failed"], "error"] for k, g in cells.items()}
        means = {k: v.mean() for k, v in errors.items() if len(v)}
        best = min(means, key=means.get) if means else None
        for (method, strategy), cell in cells.items():
            err = errors[method, strategy]
            if (method, strategy) == best or not len(err):
                p_value = np.nan
            else:
                p_value = paired_p_value(err, errors[best])
            row = {"experiment": experiment, "setting_index": setting_index, "setting": setting,
                   "method": method, "strategy": strategy, "mean": err.mean() if len(err) else np.nan,
                   "std": err.std(ddof=STD_DDOF) if len(err) > STD_DDOF else np.nan, "n": len(cell),
                   "failed": int(cell["failed"].sum()), "fits": int(cell["fits"].sum()),
                   "not_converged": int(cell["not_converged"].sum()),
                   "refits": int(cell["refits"].sum()) if "refits" in cell else 0,
                   "refits_stopped": int(cell["refits_stopped"].sum()) if "refits_stopped" in cell else 0,
                   "best": (method, strategy) == best,
                   "p_value": p_value, "significant": bool(p_value < ALPHA) if np.isfinite(p_value) else False}
            if "blocks_not_converged" in cell and cell["blocks_not_converged"].notna().any():  # k-space lines
                row["blocks_not_converged"] = int(cell["blocks_not_converged"].clip(lower=0).sum())
            for name in ("psnr", "ssim"):  # image experiments
                if name in cell and cell.loc[~cell["failed"], name].notna().any():
                    row[name] = float(cell.loc[~cell["failed"], name].mean())
            for name in FITTED_COLUMNS:
                if name in cell and cell.loc[~cell["failed"], name].notna().any():
                    row[name] = float(cell.loc[~cell["failed"], name].median())
            oracle = (base_method(method), strategy)
            row["p_vs_oracle"], row["oracle_mean"] = np.nan, np.nan
            if oracle != (method, strategy) and oracle in errors and len(err) and len(errors[oracle]):
                row["p_vs_oracle"] = paired_p_value(err, errors[oracle])
                row["oracle_mean"] = float(errors[oracle].mean())
            rows.append(row)
    return pd.DataFrame(rows)


def paired_p_value(a: pd.Series, b: pd.Series) -> float:
    """Two-sided Wilcoxon signed-rank p-value on the replicates both series share (1 if all differences are 0)."""
    common = a.index.intersection(b.index)
    diff = a.loc[common].to_numpy() - b.loc[common].to_numpy()
    if len(common) < 2 or np.all(diff == 0):
        return 1.0
    from scipy.stats import wilcoxon  # imported here: scipy.stats alone costs half a second of start-up

    return float(wilcoxon(a.loc[common], b.loc[common]).pvalue)


def _grid(table: pd.DataFrame) -> tuple[list[str], list[tuple[str, str, list[tuple[str, str, bool]]]], bool]:
    """The table's header (one label per setting) and rows ``(method, strategy, [(value, note, is best), ...])``
    (the note counts failures); and whether significance marks are shown (enough replicates for the test)."""
    testable = int(table["n"].min() - table["failed"].max()) >= MIN_TEST_REPLICATES
    settings = table[["setting_index", "setting"]].drop_duplicates().sort_values("setting_index")
    header = [setting_label(s) for s in settings["setting"]]
    rows = []
    cells_by_row = sorted(table.groupby(["method", "strategy"]), key=lambda item: _row_order(*item[0]))
    for (method, strategy), block in cells_by_row:
        cells = []
        for setting_index in settings["setting_index"]:
            row = block[block["setting_index"] == setting_index]
            if row.empty:
                cells.append(("", "", False))
                continue
            row = row.iloc[0]
            best = False
            if row["failed"] == row["n"]:
                cell = "all failed"
            else:
                cell = f"{row['mean']:.2f}" + (f" +- {row['std']:.2f}" if np.isfinite(row["std"]) else "")
                if "psnr" in row and np.isfinite(row["psnr"]):
                    cell += f" ({row['psnr']:.1f} dB, SSIM {row['ssim']:.2f})"
                best = bool(row["best"])
                if not best and testable and not row["significant"]:
                    cell += " \u2020"
            cells.append((cell, failure_note(row), best))
        rows.append((method, strategy, cells))
    return header, rows, testable


def _row_order(label: str, strategy: str) -> tuple:
    """Rows in the registry's method order (as in the figures), each oracle row before its learned one."""
    order = method_order()
    method = base_method(label)
    return (order.index(method) if method in order else len(order), label != method, label, strategy)


def not_converged_residuals(curves: pd.DataFrame) -> dict[str, np.ndarray]:
    """The ``residual`` of every fit in a tidy curves table that did not converge and reports one (EP's
    ``fixed_point_residual_``), by hyper-parameters ("oracle", "learned"), shape (k,) each; only the kinds with
    such fits (none for tables written before residuals were recorded)."""
    if "residual" not in curves:
        return {}
    missed = curves[(curves["converged"] == 0) & np.isfinite(curves["residual"])]
    return {kind: block["residual"].to_numpy(dtype=float)
            for kind, block in missed.groupby("hyperparameters", sort=True)}


def _notes(table: pd.DataFrame, testable: bool, residuals=None) -> list[str]:
    """What the cells are, the significance marks, learned against oracle, and the failure counts (with how far
    the fits that did not converge were from a fixed point, where ``residuals`` gives it)."""
    n = sorted(set(table["n"]))
    quality = " In brackets: mean PSNR and SSIM of the reconstructions." if "psnr" in table else ""
    test = (f"\u2020: not significantly different from the best (paired Wilcoxon signed-rank test, p >= {ALPHA})"
            if testable else f"no significance marks: fewer than {MIN_TEST_REPLICATES} replicates, too few for the "
                             f"paired test to reach p < {ALPHA}")
    counted = f"{', '.join(map(str, n))} replicate" + ("" if n == [1] else "s")
    lines = ["", f"Final relative error, mean +- std (sample standard deviation) over {counted} (those that did not "
                 f"fail). Bold: best in its column; {test}.{quality}"]
    lines += _learned_vs_oracle(table)
    failed, not_converged = int(table["failed"].sum()), int(table["not_converged"].sum())
    lines += ["", f"Failed replicates (a fit raised a numerical error or gave a non-finite estimate; left out of the "
                  f"mean): {failed}. Final fits (the ones in the cells) that stopped before meeting their convergence "
                  f"test: {not_converged} of {int(table['fits'].sum())}; the cells with any say how many."]
    if "blocks_not_converged" in table and table["blocks_not_converged"].notna().any():
        lines[-1] += (" Independent blocks of the posterior (k-space lines: columns of coefficients) that had not "
                      f"reached EP's fixed point in those final fits: {int(table['blocks_not_converged'].sum())}.")
    refits = int(table["refits"].sum()) if "refits" in table else 0
    if refits:
        lines[-1] += (f" Earlier refits along the curves (in a design loop, the refits that chose the next rows; "
                      f"their errors are in the figures) that stopped before meeting it: "
                      f"{int(table['refits_stopped'].sum())} of {refits}.")
    if residuals:
        kinds = {"oracle": "the paper's (oracle) values", "learned": "learned values"}
        parts = [f"with {kinds.get(kind, kind)}, {len(values)} fit{'s' if len(values) != 1 else ''}: median "
                 f"{np.median(values):.2g}, at most {np.max(values):.2g}"
                 for kind, values in sorted(residuals.items(), reverse=True)]
        lines[-1] += (" EP's fixed-point residual of those fitted by EP, final and earlier (the change one more "
                      "undamped update would "
                      "make to the posterior mean, relative to the largest coefficient, or to a group probability): "
                      f"{'; '.join(parts)}. Below 10 tol (1e-3 at the default tol) EP reached its fixed point and "
                      "the fit is flagged for another reason"
                      + (", with learned values mostly because they were still moving" if "learned" in residuals
                         else "") + " (docs/model.md, 'When a fit does not converge').")
    return lines


def to_markdown(table: pd.DataFrame, residuals=None) -> str:
    """Markdown: one row per (method, strategy), one column per setting; cells ``mean +- std``.

    The best cell of each setting is in bold; a dagger marks cells *not* significantly different from the
    best (paired Wilcoxon test, p >= 0.05), only where there are enough replicates for the test to reach
    p < 0.05 (:data:`MIN_TEST_REPLICATES`). ``residuals`` (:func:`not_converged_residuals`), if given, adds to
    the notes how far the fits that did not converge stopped from a fixed point.
    """
    header, rows, testable = _grid(table)
    lines = ["| method | strategy | " + " | ".join(header) + " |", "|---|---|" + "---|" * len(header)]
    for method, strategy, cells in rows:
        lines.append(f"| {method} | {strategy} | "
                     + " | ".join((f"**{value}**" if best else value) + note for value, note, best in cells) + " |")
    return "\n".join(lines + _notes(table, testable, residuals)) + "\n"


def to_html(table: pd.DataFrame, caption: str = "", residuals=None) -> str:
    """The table of :func:`to_markdown` as a standalone HTML page (for the workflow's report), with a caption."""
    header, rows, testable = _grid(table)
    out = ["<!DOCTYPE html>", '<html><head><meta charset="utf-8"><style>',
           "body{font-family:sans-serif;font-size:14px;margin:1em}table{border-collapse:collapse}"
           "th,td{border:1px solid #bbb;padding:4px 8px;text-align:right}th{background:#eee}"
           "td:first-child,td:nth-child(2),th:first-child,th:nth-child(2){text-align:left}caption{caption-side:top;text-align:left;"
           "margin-bottom:.6em;max-width:60em}p,li{max-width:60em}",
           "</style></head><body><table>"]
    if caption:
        out.append(f"<caption>{html.escape(caption)}</caption>")
    out.append("<tr><th>method</th><th>strategy</th>" + "".join(f"<th>{html.escape(h)}</th>" for h in header)
               + "</tr>")
    for method, strategy, cells in rows:
        tds = "".join(f"<td>{f'<b>{html.escape(value)}</b>' if best else html.escape(value)}{html.escape(note)}</td>"
                      for value, note, best in cells)
        out.append(f"<tr><td>{html.escape(method)}</td><td>{html.escape(strategy)}</td>{tds}</tr>")
    out.append("</table>")
    items = []
    for line in _notes(table, testable, residuals):
        if line.startswith("- "):
            items.append(f"<li>{html.escape(line[2:])}</li>")
            continue
        if items:
            out.append("<ul>" + "".join(items) + "</ul>")
            items = []
        if line:
            out.append(f"<p>{html.escape(line)}</p>")
    if items:
        out.append("<ul>" + "".join(items) + "</ul>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _learned_vs_oracle(table: pd.DataFrame) -> list[str]:
    """Markdown lines comparing each learned row with its oracle row (paired) and giving the learned values."""
    learned = table[table["method"] != table["method"].map(base_method)]
    if learned.empty:
        return []
    if learned["p_vs_oracle"].notna().any():
        title = ("Learned against oracle hyper-parameters (same signals; paired Wilcoxon signed-rank test; median "
                 "learned values over the replicates):")
    else:  # e.g. a user experiment on real data, where no oracle exists
        title = "Learned hyper-parameters (median over the replicates; no oracle run to compare with):"
    lines = ["", title, ""]
    for _, row in learned.sort_values(["setting_index", "method", "strategy"]).iterrows():
        where = f"{row['method']} ({row['strategy']}, {setting_label(row['setting'])})"
        if np.isfinite(row["p_vs_oracle"]):
            text = f"{row['mean']:.3f} against {row['oracle_mean']:.3f} with the oracle's, p = {row['p_vs_oracle']:.2g}"
        else:
            missing = "" if title.startswith("Learned hyper") else " (no oracle run to compare with)"
            text = f"{row['mean']:.3f}{missing}"
        values = [f"{FITTED_NAMES[name]} {row[name]:.3g}" for name in FITTED_COLUMNS
                  if name in row and np.isfinite(row[name])]
        lines.append(f"- {where}: {text}" + (f"; learned {', '.join(values)}" if values else ""))
    return lines


def failure_note(row) -> str:
    """`` (k of N failed; m of F fits not converged)`` for a table row, or nothing when there is neither."""
    notes = []
    if row["failed"]:
        notes.append(f"{row['failed']} of {row['n']} failed")
    if row["not_converged"]:
        notes.append(f"{row['not_converged']} of {row['fits']} final fits not converged")
    return f" ({'; '.join(notes)})" if notes else ""


def write_tables(curves_csv, *, markdown_path, csv_path, html_path=None, caption: str = "") -> pd.DataFrame:
    """Read a tidy curves CSV, write the experiment's table as Markdown, CSV and (for the report) HTML with
    ``caption``; returns the table."""
    from adaptcs.results import final_rows, write_csv

    curves = pd.read_csv(curves_csv, dtype={"setting": str})
    table = summary_table(final_rows(curves))
    residuals = not_converged_residuals(curves)
    write_csv(table, csv_path)
    Path(markdown_path).parent.mkdir(parents=True, exist_ok=True)
    Path(markdown_path).write_text(to_markdown(table, residuals))
    if html_path is not None:
        Path(html_path).write_text(to_html(table, caption, residuals))
    return table


def setting_label(setting_json: str) -> str:
    """A setting (JSON) as words: ``label noise 0.1``; ``error`` for an experiment with one setting."""
    setting = json.loads(setting_json)
    if not setting:
        return "error"
    return ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in sorted(setting.items()))
