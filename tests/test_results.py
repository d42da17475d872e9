"""HDF5 result files: round trip, atomic writes, tidy tables."""

import json

import h5py
import numpy as np
import pandas as pd
import pytest

from adaptcs import results
from adaptcs.results import (
    JobResult,
    curves_table,
    final_table,
    merge_jobs,
    read_job,
    read_summary,
    write_job,
    write_summary,
)


def make_job(rng, R=3, T=4, d=6, G=3, method="gss_ep", strategy="design", with_probs=True):
    return JobResult(
        experiment="E3", setting_index=0, setting={}, method=method, strategy=strategy,
        replicate=np.arange(R), n_measurements=np.arange(32, 32 + T), errors=rng.random((R, T)),
        fit_seconds=rng.random((R, T)), select_seconds=rng.random((R, T - 1)), coef=rng.normal(size=(R, d)),
        w_true=rng.normal(size=(R, d)), true_groups=np.tile(np.arange(d) % G, (R, 1)),
        fit_groups=np.tile(np.arange(d) % G, (R, 1)), group_prob=rng.random((R, G)) if with_probs else None,
        problem_seed=np.tile([3, 0, 0], (R, 1)) + np.arange(R)[:, None] * [0, 0, 1],
        design_seed=np.tile([3, 0, 0, 1], (R, 1)), config={"n_steps": T - 1, "array": np.arange(2)},
        converged=np.ones((R, T), dtype=np.int8), n_iter=np.full((R, T), 7), residual=rng.random((R, T)) * 1e-4,
        finite=np.ones((R, T), dtype=bool), failure=np.array([""] * R))


def test_round_trip(tmp_path, rng):
    job = make_job(rng)
    path = write_job(tmp_path / "sub" / "job.h5", job)
    back = read_job(path)
    for name in ["replicate", "n_measurements", "errors", "fit_seconds", "select_seconds", "coef", "w_true",
                 "group_prob", "problem_seed", "design_seed", "true_groups", "fit_groups", "converged", "n_iter",
                 "residual", "finite", "failure"]:
        np.testing.assert_array_equal(getattr(back, name), getattr(job, name))
    assert (back.experiment, back.method, back.strategy, back.setting) == ("E3", "gss_ep", "design", {})
    assert back.config == {"n_steps": 3, "array": [0, 1]}
    assert back.versions["numpy"] == np.__version__ and back.blas
    with h5py.File(path, "r") as f:
        assert f["fit_seconds"].attrs["units"] == b"s"
        assert b"relative error" in f["errors"].attrs["description"]


def test_methods_without_group_probabilities(tmp_path, rng):
    back = read_job(write_job(tmp_path / "job.h5", make_job(rng, with_probs=False)))
    assert back.group_prob is None


def test_interrupted_write_leaves_no_file(tmp_path, rng, monkeypatch):
    def explode(*args, **kwargs):
        raise KeyboardInterrupt  # as if the job were killed while writing

    monkeypatch.setattr(results.h5py.Group, "create_dataset", explode)
    with pytest.raises(KeyboardInterrupt):
        write_job(tmp_path / "job.h5", make_job(rng))
    assert list(tmp_path.iterdir()) == []


def test_failed_write_keeps_an_earlier_complete_file(tmp_path, rng):
    path = write_job(tmp_path / "job.h5", make_job(rng))
    before = read_job(path).errors
    bad = make_job(rng)
    bad.config = {"unserialisable": object()}
    with pytest.raises(TypeError):
        write_job(path, bad)
    np.testing.assert_array_equal(read_job(path).errors, before)
    assert [p.name for p in tmp_path.iterdir()] == ["job.h5"]


def test_reader_rejects_foreign_files(tmp_path):
    with h5py.File(tmp_path / "other.h5", "w") as f:
        f["x"] = 1
    with pytest.raises(ValueError, match="not an adaptcs result"):
        read_job(tmp_path / "other.h5")


def test_tidy_tables(tmp_path, rng):
    a = write_job(tmp_path / "a.h5", make_job(rng, R=3, T=4))
    b = write_job(tmp_path / "b.h5", make_job(rng, R=2, T=4, method="ss_ep", strategy="random"))
    curves = curves_table([a, b])
    assert len(curves) == 3 * 4 + 2 * 4
    assert set(curves.columns) >= {"experiment", "method", "strategy", "replicate", "step", "n_measurements",
                                   "error", "fit_seconds"}
    finals = final_table([a, b])
    assert len(finals) == 5 and set(finals["n_measurements"]) == {35}
    job = read_job(a)
    np.testing.assert_allclose(finals[finals.method == "gss_ep"]["error"], job.errors[:, -1])
    assert json.loads(curves["setting"].iloc[0]) == {}


def test_merge_and_summary_round_trip(tmp_path, rng):
    first = make_job(rng, R=3)
    second = make_job(rng, R=2)
    second.replicate = np.array([4, 3])
    merged = merge_jobs([second, first])
    np.testing.assert_array_equal(merged.replicate, [0, 1, 2, 3, 4])
    np.testing.assert_array_equal(merged.errors[3], second.errors[1])
    other = make_job(rng, method="ss_ep", strategy="random", with_probs=False)
    path = write_summary(tmp_path / "E3.h5", [merged, other])
    back = read_summary(path)
    assert set(back) == {(0, "gss_ep", "design"), (0, "ss_ep", "random")}
    np.testing.assert_array_equal(back[0, "gss_ep", "design"].coef, merged.coef)
    assert back[0, "ss_ep", "random"].group_prob is None
    # tables and curves read summary files as well as job files; read_job says what a summary file is
    job_path = write_job(tmp_path / "job.h5", other)
    assert [j.method for j in results.read_results(job_path)] == ["ss_ep"]
    pd.testing.assert_frame_equal(results.curves_table([path]), results.jobs_table(back.values()))
    with pytest.raises(results.ResultFileError, match="E3.h5: a summary file"):
        read_job(path)


def test_merge_rejects_mismatched_jobs(rng):
    a, b = make_job(rng), make_job(rng)
    with pytest.raises(ValueError, match="replicates overlap"):
        merge_jobs([a, b])
    b.method = "ss_ep"
    with pytest.raises(ValueError, match="different kinds"):
        merge_jobs([a, b])


def test_merge_refuses_chunks_run_with_different_settings(rng):
    """Chunks of one cell computed with different method_params (a config edited between runs) never mix."""
    a, b = make_job(rng, R=2), make_job(rng, R=2)
    b.replicate = np.array([2, 3])
    a.config = {"n_steps": 3, "method_params": {}, "replicates": [0, 1], "workflow_config": {"results": "x"}}
    b.config = {"n_steps": 3, "method_params": {}, "replicates": [2, 3], "workflow_config": {"results": "y"}}
    assert merge_jobs([a, b]).replicate.tolist() == [0, 1, 2, 3]  # only the surrounding config differs
    b.config["method_params"] = {"tol": 1e-6}
    with pytest.raises(ValueError, match="different settings"):
        merge_jobs([a, b])


def _flip_bit_in(path, dataset):
    """Flip one bit in the stored bytes of a dataset (as a failing disk or a bad copy would)."""
    with h5py.File(path, "r") as f:
        offset = f[dataset].id.get_chunk_info(0).byte_offset
    with open(path, "r+b") as raw:
        raw.seek(offset + 3)
        byte = raw.read(1)
        raw.seek(offset + 3)
        raw.write(bytes([byte[0] ^ 0x10]))


def test_a_flipped_bit_makes_reading_fail_naming_the_file(tmp_path, rng):
    """One flipped bit used to change an E1 table cell silently (0.30 +- 0.09 became 0.26 +- 0.13)."""
    path = write_job(tmp_path / "job.h5", make_job(rng))
    _flip_bit_in(path, "errors")
    with pytest.raises(results.ResultFileError, match=str(path)):
        read_job(path)
    with pytest.raises(ValueError, match="job.h5"):  # aggregation names the file too
        results.aggregate_runs([path], summary_path=tmp_path / "s.h5", curves_path=tmp_path / "c.csv")


def test_data_that_pass_their_chunk_checksums_but_are_not_what_was_written_fail_the_digest(tmp_path, rng):
    """A damaged pointer can lead to another valid chunk (its Fletcher-32 passes): a dataset replaced by other
    numbers with a valid checksum, attributes untouched, must fail the data digest (one flipped bit in a summary
    file once reported random rows at 0.00 +- 0.00); a version-4 file (no digest) still reads."""
    from adaptcs._io import attrs_digest

    job = make_job(rng)
    path = write_job(tmp_path / "job.h5", job)
    with h5py.File(path, "r+") as f:
        errors = f["errors"][()]
        del f["errors"]
        f.create_dataset("errors", data=np.zeros_like(errors), fletcher32=True)
    with pytest.raises(results.ResultFileError, match="data of / do not match their SHA-256"):
        read_job(path)
    older = write_job(tmp_path / "v4.h5", job)
    with h5py.File(older, "r+") as f:
        del f.attrs["data_sha256"]
        f.attrs["format_version"] = 4
        f.attrs["attrs_sha256"] = attrs_digest(f.attrs)
    np.testing.assert_array_equal(read_job(older).errors, job.errors)


def test_result_files_keep_no_text_in_the_unchecksummed_heap_and_version_5_still_reads(tmp_path, rng):
    """A variable-length string lives in HDF5's global heap, which has no checksum: one flipped bit there made a
    summary file's read spin forever (issue 46). Every text attribute is fixed-length, object headers are
    checksummed (libver v110); a version-5 file (variable-length text) still reads the same."""
    from adaptcs._io import attrs_digest

    job, other = make_job(rng), make_job(rng, strategy="random")
    paths = [write_job(tmp_path / "job.h5", job), write_summary(tmp_path / "summary.h5", [job, other])]

    def variable_length(name, attrs):
        for key in attrs:
            kind = attrs.get_id(key).get_type()
            assert not (isinstance(kind, h5py.h5t.TypeStringID) and kind.is_variable_str()), (name, key)

    for path in paths:
        with h5py.File(path) as f:
            variable_length("/", f.attrs)
            f.visititems(lambda name, obj: variable_length(name, obj.attrs))
            assert h5py.h5o.get_info(f.id).hdr.version == 2  # object headers with checksums
    with h5py.File(paths[0], "r+") as f:  # as version 5 wrote it
        for key in list(f.attrs):
            if isinstance(f.attrs[key], bytes):
                f.attrs[key] = f.attrs[key].decode()
        f.attrs["format_version"] = 5
        f.attrs["attrs_sha256"] = attrs_digest(f.attrs)
    back = read_job(paths[0])
    assert (back.experiment, back.method, back.strategy) == (job.experiment, job.method, job.strategy)
    np.testing.assert_array_equal(back.errors, job.errors)


def test_a_changed_attribute_makes_reading_fail(tmp_path, rng):
    path = write_job(tmp_path / "job.h5", make_job(rng))
    with h5py.File(path, "r+") as f:
        f.attrs["method"] = "ss_ep"  # a different label on the same numbers
    with pytest.raises(results.ResultFileError, match="SHA-256"):
        read_job(path)


def test_unreadable_files_are_named(tmp_path):
    path = tmp_path / "broken.h5"
    path.write_bytes(b"not hdf5 at all")
    with pytest.raises(results.ResultFileError, match="broken.h5"):
        read_job(path)


def test_failures_are_stored_per_replicate(tmp_path, rng):
    job = make_job(rng)
    job.failure = np.array(["", "step 2 (n=34): LinAlgError: singular", ""])
    job.errors[1, 2:] = np.nan
    back = read_job(write_job(tmp_path / "job.h5", job))
    assert list(back.failure) == list(job.failure)


def test_failures_and_convergence_reach_the_tables(rng):
    """The path from result files to tables: a failed replicate (NaN from its failed step on) is marked failed
    and left out of the mean, not dropped silently by pandas; fits that did not converge are counted."""
    from adaptcs.tables import summary_table, to_markdown

    job = make_job(rng, R=3, T=4)
    job.errors[1, 2:] = np.nan
    job.finite[1, 2:] = False
    job.converged[1, 2:] = -1
    job.failure = np.array(["", "step 2 (n=34): LinAlgError: not positive definite", ""])
    job.converged[0, [0, 3]] = 0
    curves = results.jobs_table([job])
    assert list(curves.columns[-5:]) == ["converged", "n_iter", "residual", "finite", "failed"]
    finals = results.final_rows(curves)
    assert finals["failed"].tolist() == [False, True, False]
    # the final fit (the one a table reports) apart from the earlier refits of the curve
    assert finals["fits"].tolist() == [1, 0, 1] and finals["not_converged"].tolist() == [1, 0, 0]
    assert finals["refits"].tolist() == [3, 2, 3] and finals["refits_stopped"].tolist() == [1, 0, 0]
    row = summary_table(finals).iloc[0]
    assert row["mean"] == pytest.approx(np.mean(job.errors[[0, 2], -1]))
    assert (row["failed"], row["n"], row["not_converged"], row["fits"]) == (1, 3, 1, 2)
    assert (row["refits_stopped"], row["refits"]) == (1, 8)
    text = to_markdown(summary_table(finals))
    assert "(1 of 3 failed; 1 of 2 final fits not converged)" in text
    assert "that stopped before meeting it: 1 of 8." in text


def test_tables_say_how_far_unconverged_fits_stopped_from_a_fixed_point(tmp_path, rng):
    """The residuals of the fits that did not converge (and only theirs, where reported) reach the table's notes
    as a median and a maximum, apart for oracle and learned values; files without residuals (older adaptcs) still
    make a table, without that sentence."""
    from adaptcs.tables import not_converged_residuals, write_tables

    job = make_job(rng, R=3, T=4)
    job.converged[0, [0, 3]] = 0
    job.converged[2, 1] = 0
    job.residual[0, [0, 3]] = [0.02, 0.17]
    job.residual[2, 1] = np.nan  # a method that reports no residual
    job.residual[1, 1] = 0.9  # converged fits' residuals do not count
    learned = make_job(rng, R=2, T=4)
    learned.hyperparameters = "learned"
    learned.converged[1, 2] = 0
    learned.residual[1, 2] = 4e-4
    curves = results.jobs_table([job, learned])
    found = not_converged_residuals(curves)
    assert set(found) == {"oracle", "learned"}
    np.testing.assert_array_equal(np.sort(found["oracle"]), [0.02, 0.17])
    np.testing.assert_array_equal(found["learned"], [4e-4])
    curves.to_csv(tmp_path / "curves.csv", index=False)
    write_tables(tmp_path / "curves.csv", markdown_path=tmp_path / "t.md", csv_path=tmp_path / "t.csv",
                 html_path=tmp_path / "t.html")
    text = (tmp_path / "t.md").read_text()
    assert "with the paper's (oracle) values, 2 fits: median 0.095, at most 0.17; with learned values, 1 fit: " \
           "median 0.0004, at most 0.0004." in text
    assert "median 0.095" in (tmp_path / "t.html").read_text()
    old = make_job(rng, R=3, T=4)
    old.residual = None
    old.converged[0, 0] = 0
    back = read_job(write_job(tmp_path / "old.h5", old))
    assert back.residual is None
    curves = results.jobs_table([back])
    assert curves["residual"].isna().all() and not_converged_residuals(curves) == {}
    curves.to_csv(tmp_path / "old.csv", index=False)
    write_tables(tmp_path / "old.csv", markdown_path=tmp_path / "o.md", csv_path=tmp_path / "o.csv")
    assert "1 of 9." in (tmp_path / "o.md").read_text() and "fitted by EP" not in (tmp_path / "o.md").read_text()


def test_final_rows_need_the_failure_columns(rng):
    curves = results.jobs_table([make_job(rng)]).drop(columns=["converged", "failed"])
    with pytest.raises(ValueError, match="aggregate the runs again"):
        results.final_rows(curves)
