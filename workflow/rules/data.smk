# The problems each experiment uses (signals or images, active groups, seeds), listed without running inference,
# and what the config means: the effective config and the job table.


rule record_config:
    output:
        effective=f"{RESULTS}/effective_config.yaml",
        jobs=f"{RESULTS}/jobs.tsv",
    log:
        f"{RESULTS}/logs/effective_config.log",
    params:
        effective=PLAN.effective,  # a changed config (or default) changes these, so the files are rewritten
        jobs=PLAN.job_records(),
    threads: 1
    resources:
        mem_mb=500,
        runtime=10,
    conda:
        "../envs/adaptcs.yaml"
    script:
        "../../scripts/rule_adapter.py"


rule problem_manifest:
    output:
        f"{RESULTS}/problems/{{experiment}}.csv",
    log:
        f"{RESULTS}/logs/problems/{{experiment}}.log",
    params:
        replicates=lambda wc: PLAN.runs[wc.experiment].replicates,
        settings=lambda wc: list(PLAN.runs[wc.experiment].settings),
        data_options=lambda wc: dict(PLAN.runs[wc.experiment].experiment.options),
        code_version=CODE_VERSION,
    threads: 1
    resources:
        mem_mb=500,
        runtime=10,
    conda:
        "../envs/adaptcs.yaml"
    script:
        "../../scripts/rule_adapter.py"
