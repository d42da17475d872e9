# All runs of an experiment -> one tidy CSV (a row per replicate x step) and one summary HDF5.


rule aggregate:
    input:
        lambda wc: JOBS.paths(wc.experiment),
    output:
        curves=f"{RESULTS}/summary/{{experiment}}_curves.csv",
        summary=f"{RESULTS}/summary/{{experiment}}.h5",
    log:
        f"{RESULTS}/logs/aggregate/{{experiment}}.log",
    threads: 1
    resources:
        mem_mb=2000,
        runtime=20,
    conda:
        "../envs/adaptcs.yaml"
    script:
        "../../scripts/rule_adapter.py"
