# The problems each experiment uses (signals, active groups, seeds), listed without running inference.


rule problem_manifest:
    output:
        f"{RESULTS}/problems/{{experiment}}.csv",
    log:
        f"{RESULTS}/logs/problems/{{experiment}}.log",
    params:
        replicates=lambda wc: config["experiments"][wc.experiment]["replicates"],
        code_version=CODE_VERSION,
    threads: 1
    resources:
        mem_mb=500,
        runtime=10,
    conda:
        "../envs/adaptcs.yaml"
    script:
        "../../scripts/rule_adapter.py"
