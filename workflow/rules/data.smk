# The problems each experiment uses (signals or images, active groups, seeds), listed without running inference,
# and the config the results folder was made with.


rule record_config:
    output:
        f"{RESULTS}/effective_config.yaml",
    log:
        f"{RESULTS}/logs/effective_config.log",
    params:
        effective=EFFECTIVE_CONFIG,  # a changed config (or default) changes this, so the file is rewritten
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
        replicates=lambda wc: config["experiments"][wc.experiment]["replicates"],
        settings=lambda wc: wf.experiment_options(config, wc.experiment)["settings"],
        data_options=lambda wc: wf.experiment_options(config, wc.experiment)["data_options"],
        code_version=CODE_VERSION,
    threads: 1
    resources:
        mem_mb=500,
        runtime=10,
    conda:
        "../envs/adaptcs.yaml"
    script:
        "../../scripts/rule_adapter.py"
