"""Cluster plumbing without a cluster: the cluster-generic status command and the SLURM pre-flight check,
against fake scheduler commands (shell scripts on PATH that answer as the real ones do). The real SLURM run is
in .ci/slurm-e2e (CI).
"""

import os
import shlex
import subprocess
import sys
import types
from pathlib import Path

import pytest
import yaml

from adaptcs import cluster

REPO = Path(__file__).resolve().parents[1]
STATUS = REPO / "workflow/profiles/cluster-generic/status.py"


def fake_commands(tmp_path, **scripts):
    """A bin/ folder with one executable per keyword (name -> shell body); returns a PATH of only that folder, so
    that a real scheduler installed on the machine is not found (the fakes use only shell built-ins)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in scripts.items():
        path = bin_dir / name
        path.write_text("#!/bin/sh\n" + body + "\n")
        path.chmod(0o755)
    return str(bin_dir)


def status(tmp_path, job_id, **scripts):
    env = {**os.environ, "PATH": fake_commands(tmp_path, **scripts)}
    env.pop("ADAPTCS_SCHEDULER", None)
    proc = subprocess.run([sys.executable, str(STATUS), job_id], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip(), proc.stderr


NO_ACCOUNTING = 'echo "Slurm accounting storage is disabled" >&2; exit 1'


@pytest.mark.parametrize("state, expected", [
    ("PENDING", "running"), ("RUNNING", "running"), ("COMPLETING", "running"), ("COMPLETED", "success"),
    ("FAILED", "failed"), ("TIMEOUT", "failed"), ("OUT_OF_MEMORY", "failed"), ("NODE_FAIL", "failed"),
    ("CANCELLED by 0", "failed"), ("BOOT_FAIL", "failed"),
])
def test_slurm_states_from_sacct(tmp_path, state, expected):
    assert status(tmp_path, "17", sacct=f'echo "{state}"', scontrol="exit 9")[0] == expected


def test_slurm_without_accounting_asks_scontrol(tmp_path):
    scontrol = 'echo "JobId=17 JobName=smk.run_job JobState={} Reason=None ExitCode=0:0"'
    for state, expected in [("RUNNING", "running"), ("COMPLETED", "success"), ("FAILED", "failed")]:
        assert status(tmp_path, "17", sacct=NO_ACCOUNTING, scontrol=scontrol.format(state))[0] == expected


def test_a_slurm_job_nobody_knows_any_more_is_failed_not_running(tmp_path):
    out, err = status(tmp_path, "17", sacct=NO_ACCOUNTING,
                      scontrol='echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1')
    assert out == "failed" and "no longer knows job 17" in err


def test_an_unreachable_slurm_controller_is_asked_again(tmp_path):
    out, _ = status(tmp_path, "17", sacct=NO_ACCOUNTING,
                    scontrol='echo "Unable to contact slurm controller" >&2; exit 1')
    assert out == "running"


def test_sbatch_parsable_ids_with_a_cluster_name(tmp_path):
    assert status(tmp_path, "17;cicluster", sacct='[ "$5" = 17 ] && echo COMPLETED', scontrol="exit 9")[0] == "success"


@pytest.mark.parametrize("listing, expected", [
    ("job_state = R", "running"), ("job_state = Q", "running"), ("job_state = E", "running"),
    ("job_state = F\n    Exit_status = 0", "success"), ("job_state = F\n    Exit_status = 271", "failed"),
    ("job_state = F\n    Exit_status = -11", "failed"),
])
def test_pbs_states(tmp_path, listing, expected):
    assert status(tmp_path, "42.pbs", qstat=f'printf "Job Id: 42.pbs\\n    {listing}\\n"')[0] == expected


def test_pbs_job_unknown_to_qstat_is_failed(tmp_path):
    out, err = status(tmp_path, "42.pbs", qstat='echo "qstat: Unknown Job Id 42.pbs" >&2; exit 153')
    assert out == "failed" and "Unknown Job Id" in err


def test_torque_without_x_flag_reads_completed_jobs(tmp_path):
    qstat = ('if [ "$1" = "-fx" ]; then echo "qstat: invalid option -- x" >&2; exit 2; fi\n'
             'printf "Job Id: 42\\n    job_state = C\\n    exit_status = 0\\n"')
    assert status(tmp_path, "42", qstat=qstat)[0] == "success"


@pytest.mark.parametrize("qacct, expected", [
    ('printf "failed       0\\nexit_status  0\\n"', "success"),
    ('printf "failed       0\\nexit_status  1\\n"', "failed"),
    ('printf "failed       26 : opening input/output file\\nexit_status  0\\n"', "failed"),
])
def test_sge_finished_jobs_from_qacct(tmp_path, qacct, expected):
    qstat = 'echo "Following jobs do not exist: 7" >&2; exit 1'
    assert status(tmp_path, "7", qstat=qstat, qacct=qacct)[0] == expected


def test_sge_queued_job_is_running(tmp_path):
    assert status(tmp_path, "7", qstat='echo "job_number: 7"', qacct="exit 1")[0] == "running"


def test_the_generic_profile_uses_file_logs_and_the_status_command():
    profile = yaml.safe_load((REPO / "workflow/profiles/cluster-generic/config.yaml").read_text())
    assert profile["cluster-generic-status-cmd"] == "status.py" and os.access(STATUS, os.X_OK)
    submit = profile["cluster-generic-submit-cmd"]
    assert "-o {RESULTS:q}/logs/cluster/{rule}-{jobid}.log" in submit
    assert "walltime=$(({resources.runtime}*60))" in submit


@pytest.mark.parametrize("results", ["my results", "r; touch x", "it's $(here)"])
def test_the_results_folder_reaches_the_submit_command_quoted(results):
    """Issue 46, point 9: a results path with a space broke submission and one with a ';' ran a command. Formatted
    by Snakemake's own formatter (as the cluster-generic executor does), the path stays one word of the shell."""
    from snakemake.utils import format as snakemake_format

    profile = yaml.safe_load((REPO / "workflow/profiles/cluster-generic/config.yaml").read_text())
    submit = snakemake_format(profile["cluster-generic-submit-cmd"], RESULTS=results, rule="run_job", jobid=7,
                              threads=1, resources=types.SimpleNamespace(mem_mb=2000, runtime=60))
    words = shlex.split(submit)
    assert words[:3] == ["mkdir", "-p", f"{results}/logs/cluster"] and words[3] == "&&"
    assert words[words.index("-o") + 1] == f"{results}/logs/cluster/run_job-7.log"


# --- the SLURM plugin's status command, checked before the first job -------------------------------------------

def slurm_path(tmp_path, monkeypatch, *, sacct=None, squeue="exit 0", min_job_age=300):
    scripts = {"squeue": squeue, "scontrol": f'echo "MinJobAge               = {min_job_age} sec"'}
    if sacct is not None:
        scripts["sacct"] = sacct
    monkeypatch.setenv("PATH", fake_commands(tmp_path, **scripts))


def test_sacct_without_accounting_stops_the_run_with_the_fix(tmp_path, monkeypatch):
    slurm_path(tmp_path, monkeypatch, sacct=NO_ACCOUNTING)
    fix = "accounting storage is disabled.*--slurm-status-command squeue"
    with pytest.raises(cluster.ClusterSetupError, match=fix):
        cluster.check_slurm_status_command(None)


def test_squeue_with_a_long_min_job_age_passes_without_accounting(tmp_path, monkeypatch):
    slurm_path(tmp_path, monkeypatch, sacct=NO_ACCOUNTING, min_job_age=300)
    assert cluster.check_slurm_status_command("squeue") == "squeue"


def test_squeue_with_a_short_min_job_age_falls_back_to_sacct_as_the_plugin_does(tmp_path, monkeypatch):
    slurm_path(tmp_path, monkeypatch, sacct=NO_ACCOUNTING, min_job_age=60)
    assert cluster.effective_status_command("squeue") == "sacct"
    with pytest.raises(cluster.ClusterSetupError, match="MinJobAge >= 120 s"):
        cluster.check_slurm_status_command("squeue")


def test_working_accounting_passes(tmp_path, monkeypatch):
    slurm_path(tmp_path, monkeypatch, sacct="exit 0")
    assert cluster.check_slurm_status_command(None) == "sacct"


def test_squeue_only_cluster_with_short_min_job_age_is_refused(tmp_path, monkeypatch):
    slurm_path(tmp_path, monkeypatch, sacct=None, min_job_age=30)
    with pytest.raises(cluster.ClusterSetupError, match="MinJobAge = 30 s"):
        cluster.check_slurm_status_command(None)


def test_ci_runs_the_readme_cluster_commands():
    """.ci/slurm-e2e runs what the cluster page tells users to run (the sbatch line verbatim, the status command),
    and the workflow guide's cluster command is the same profile."""
    assert "--workflow-profile workflow/profiles/slurm" in (REPO / "docs" / "guide" / "workflow.md").read_text()
    readme = (REPO / "docs" / "cluster.md").read_text()
    ci = (REPO / ".ci/slurm-e2e").read_text()
    sbatch_line = ci.split("SBATCH_LINE='")[1].split("'\n")[0]
    assert f"'{sbatch_line}'" in readme
    assert "--slurm-status-command squeue" in readme and "--slurm-status-command squeue" in ci
    assert "--workflow-profile workflow/profiles/slurm" in readme and "--workflow-profile workflow/profiles/slurm" in ci
    assert "bash .ci/slurm-e2e" in (REPO / ".ci/run").read_text()
