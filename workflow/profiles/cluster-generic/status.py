#!/usr/bin/env python3
"""Job status for Snakemake's cluster-generic executor: prints ``running``, ``success`` or ``failed``.

Usage: ``status.py <job id>`` (Snakemake calls it with the id the submit command printed). Standard library
only, so that it runs with any ``python3`` on the login node.

The scheduler is recognised from the commands on ``PATH`` (or forced with ``ADAPTCS_SCHEDULER=slurm|pbs|sge``):

- SLURM: ``sacct`` when job accounting answers, else ``scontrol show job`` (finished jobs stay visible for
  the cluster's MinJobAge, 300 s by default);
- PBS Pro / OpenPBS / Torque: ``qstat -fx`` (``qstat -f`` on Torque), state and exit status;
- SGE / Univa: ``qstat -j`` while the job is queued or running, then ``qacct -j``.

A job the scheduler no longer knows, or one that died before its script ran (a log path it could not open, a
node failure, a walltime or memory kill), is ``failed``, never ``running``, so that the run stops with an error
instead of waiting forever. Why is written to standard error, which Snakemake shows.
"""

import os
import re
import shutil
import subprocess
import sys

SLURM_RUNNING = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD",
                 "RESIZING", "SUSPENDED", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD"}
PBS_RUNNING = set("QRHWTESBMU")  # every state but F (finished) and X (finished subjob); E is "exiting"


def run(cmd):
    """(return code, stdout, stderr) of a command; 127 when it is not installed; never raises."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        return 127, "", f"{cmd[0]}: not found"
    except subprocess.TimeoutExpired:
        return 124, "", f"{' '.join(cmd)}: no answer within 60 s"
    return proc.returncode, proc.stdout, proc.stderr


def slurm_state_status(state):
    """Map a SLURM job state (``CANCELLED by 0``, ``COMPLETED``, ...) to running / success / failed."""
    state = state.split()[0].rstrip("+") if state.strip() else ""
    if state == "COMPLETED":
        return "success"
    if state in SLURM_RUNNING:
        return "running"
    return "failed"


def slurm_status(job_id):
    code, out, err = run(["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "State"])
    states = [line for line in out.splitlines() if line.strip()]
    if code == 0 and states:
        return slurm_state_status(states[-1]), f"sacct: {states[-1]}"
    # No accounting ("accounting storage is disabled"), or the record has not reached the database yet.
    code, out, err2 = run(["scontrol", "-o", "show", "job", job_id])
    match = re.search(r"\bJobState=(\S+)", out)
    if code == 0 and match:
        reason = re.search(r"\bReason=(\S+)", out)
        why = f"scontrol: {match.group(1)}" + (f" ({reason.group(1)})" if reason else "")
        return slurm_state_status(match.group(1)), why
    if code == 0 or "Invalid job id" in err2:
        return "failed", (f"SLURM no longer knows job {job_id} (sacct: {err.strip() or 'no record'}; scontrol: "
                          f"{err2.strip() or 'no record'}); it ended more than MinJobAge ago without accounting")
    # The controller did not answer: say running, the next poll asks again.
    return "running", f"scontrol did not answer ({err2.strip()}); asking again at the next poll"


def pbs_status(job_id):
    code, out, err = run(["qstat", "-fx", job_id])
    if code != 0:  # Torque has no -x (finished jobs stay as state C for keep_completed): ask without it
        code, out, err2 = run(["qstat", "-f", job_id])
        err = err2 or err
    state = re.search(r"job_state\s*=\s*(\w)", out)
    if code != 0 or not state:
        return "failed", f"qstat does not know job {job_id}: {err.strip() or 'no record'}"
    exit_status = re.search(r"exit_status\s*=\s*(-?\d+)", out, re.IGNORECASE)
    if state.group(1) in ("F", "C", "X"):
        if exit_status and int(exit_status.group(1)) == 0:
            return "success", "qstat: finished, exit status 0"
        return "failed", f"qstat: finished, exit status {exit_status.group(1) if exit_status else 'unknown'}"
    if state.group(1) in PBS_RUNNING:
        return "running", f"qstat: state {state.group(1)}"
    return "failed", f"qstat: state {state.group(1)}"


def sge_status(job_id):
    code, out, err = run(["qstat", "-j", job_id])
    if code == 0 and "error reason" not in out:
        return "running", "qstat -j: queued or running"
    if code == 0:
        return "failed", "qstat -j: " + next(line for line in out.splitlines() if "error reason" in line).strip()
    code, out, err = run(["qacct", "-j", job_id])
    failed = re.search(r"^failed\s+(\d+)", out, re.MULTILINE)
    exit_status = re.search(r"^exit_status\s+(\d+)", out, re.MULTILINE)
    if code != 0 or not exit_status:
        # qacct's record can lag the job's end by a few seconds
        return "running", f"qacct has no record of job {job_id} yet: {err.strip()}"
    if exit_status.group(1) == "0" and (not failed or failed.group(1) == "0"):
        return "success", "qacct: exit status 0"
    return "failed", f"qacct: failed {failed.group(1) if failed else '?'}, exit status {exit_status.group(1)}"


def scheduler():
    forced = os.environ.get("ADAPTCS_SCHEDULER")
    if forced:
        return forced
    if shutil.which("scontrol"):
        return "slurm"
    if shutil.which("qacct"):
        return "sge"
    if shutil.which("qstat"):
        return "pbs"
    sys.exit("status.py: none of scontrol (SLURM), qacct (SGE), qstat (PBS) is on PATH")


def main(argv):
    if len(argv) != 2:
        sys.exit("usage: status.py <job id>")
    job_id = argv[1].strip().split(";")[0]  # sbatch --parsable may print "id;cluster"
    if not job_id:
        # the submit command printed nothing: there is no job to wait for
        print("failed")
        print("status.py: empty job id (the submit command printed no id)", file=sys.stderr)
        return
    kind = scheduler()
    checks = {"slurm": slurm_status, "pbs": pbs_status, "sge": sge_status}
    if kind not in checks:
        sys.exit(f"status.py: ADAPTCS_SCHEDULER={kind!r} is not one of slurm, pbs, sge")
    status, why = checks[kind](job_id)
    if status == "failed":
        print(f"status.py: job {job_id} failed: {why}", file=sys.stderr)
    print(status)


if __name__ == "__main__":
    main(sys.argv)
