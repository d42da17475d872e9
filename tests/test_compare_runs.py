"""adaptcs.compare_runs: equal folders pass, any changed number, attribute or file is reported."""

import json

import h5py
import numpy as np
import pytest

from adaptcs.compare_runs import compare_result_trees, main


def write_run(root, errors, *, fit_seconds=(0.1, 0.2), created="2026-11-23T10:00:00", extra=None, method="gss_ep"):
    path = root / "runs/E1/setting0/job.h5"
    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as f:
        f.attrs["method"] = method
        f.attrs["created"] = created
        f.attrs["config"] = json.dumps({"workflow_config": {"results": str(root)}, "seed": 1})
        f["errors"] = np.asarray(errors, dtype=float)
        f["fit_seconds"] = np.asarray(fit_seconds)
        f.create_group("0").create_dataset("coef", data=np.arange(3.0))
        if extra:
            f[extra] = np.zeros(2)
    return path


def test_equal_runs_in_different_folders_at_different_times_compare_equal(tmp_path):
    write_run(tmp_path / "a", [0.5, np.nan])
    write_run(tmp_path / "b", [0.5, np.nan], fit_seconds=(9.0, 9.0), created="2027-01-01T00:00:00")
    assert compare_result_trees(tmp_path / "a", tmp_path / "b") == (1, [])
    assert main([str(tmp_path / "a"), str(tmp_path / "b")]) == 0


@pytest.mark.parametrize("change, message", [
    ({"errors": [0.5, 0.25]}, "errors: values differ"),
    ({"errors": [np.nextafter(0.5, 1), np.nan]}, "errors: values differ (largest difference 1.11e-16)"),
    ({"errors": [0.5, np.nan, 1.0]}, "errors: values differ"),
    ({"method": "g_ard"}, "attribute method differs"),
    ({"extra": "more"}, "more: only in the second"),
])
def test_any_difference_is_reported(tmp_path, change, message):
    write_run(tmp_path / "a", [0.5, np.nan])
    write_run(tmp_path / "b", **{"errors": [0.5, np.nan], **change})
    n_files, differences = compare_result_trees(tmp_path / "a", tmp_path / "b")
    assert n_files == 1 and any(message in d for d in differences), differences
    assert main([str(tmp_path / "a"), str(tmp_path / "b")]) == 1


def test_a_missing_file_is_reported(tmp_path):
    write_run(tmp_path / "a", [0.5])
    write_run(tmp_path / "b", [0.5])
    (tmp_path / "a/summary").mkdir()
    with h5py.File(tmp_path / "a/summary/E1.h5", "w") as f:
        f["x"] = 1
    _, differences = compare_result_trees(tmp_path / "a", tmp_path / "b")
    assert differences == [f"summary/E1.h5: only in {(tmp_path / 'a').resolve()}"]


def test_empty_folders_are_not_a_pass(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert main([str(tmp_path / "a"), str(tmp_path / "b")]) == 1
