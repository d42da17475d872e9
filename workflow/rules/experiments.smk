# One job per (experiment, setting, method, hyper-parameters, strategy, chunk of replicates), looked up by its
# name in the job table (adaptcs.jobs) and passed whole to the script.


rule run_job:
    output:
        job_file(RESULTS, "runs", "{job}"),
    log:
        job_file(RESULTS, "logs", "{job}"),
    benchmark:
        job_file(RESULTS, "benchmarks", "{job}")
    params:
        job=lambda wc: JOBS[wc.job].as_record(),
        # not an output: Snakemake would delete it with a killed job's files (see adaptcs.jobs.JOB_FILES)
        checkpoints=lambda wc: job_file(RESULTS, "checkpoints", wc.job),
        code_version=CODE_VERSION,
    threads: 1
    resources:
        mem_mb=2000,
        runtime=lambda wc, attempt: JOBS[wc.job].runtime * attempt,
    conda:
        "../envs/adaptcs.yaml"
    script:
        "../../scripts/rule_adapter.py"
