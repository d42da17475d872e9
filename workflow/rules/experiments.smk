# One job per (experiment, setting, method, hyper-parameters, strategy, chunk of replicates); see adaptcs.workflow.run_jobs.


rule run_job:
    output:
        f"{RESULTS}/runs/{{experiment}}/setting{{setting}}/{{method}}-{{hyperparameters}}-{{strategy}}-chunk{{chunk}}.h5",
    log:
        f"{RESULTS}/logs/runs/{{experiment}}/setting{{setting}}/{{method}}-{{hyperparameters}}-{{strategy}}-chunk{{chunk}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/runs/{{experiment}}/setting{{setting}}/{{method}}-{{hyperparameters}}-{{strategy}}-chunk{{chunk}}.tsv"
    params:
        replicates=lambda wc: list(
            wf.find_job(JOBS, wc).replicates
        ),
        n_steps=lambda wc: wf.experiment_options(config, wc.experiment)["n_steps"],
        data_options=lambda wc: wf.experiment_options(config, wc.experiment)["data_options"],
        method_params=lambda wc: config.get("method_params", {}).get(wc.method, {}),
        code_version=CODE_VERSION,
    threads: 1
    resources:
        mem_mb=2000,
        runtime=lambda wc, attempt: wf.job_runtime_minutes(wf.find_job(JOBS, wc), attempt=attempt),
    conda:
        "../envs/adaptcs.yaml"
    script:
        "../../scripts/rule_adapter.py"
