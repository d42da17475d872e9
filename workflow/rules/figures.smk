# Figures and tables, made from the summaries only (never from inference).


rule plot_figure:
    input:
        f"{RESULTS}/summary/{{experiment}}.h5",
    output:
        pdf=f"{RESULTS}/figures/{{experiment}}_{{kind}}.pdf",
        png=report(
            f"{RESULTS}/figures/{{experiment}}_{{kind}}.png",
            caption="../report/figure.rst",
            category="{experiment}",
            labels={"experiment": "{experiment}", "figure": "{kind}"},
        ),
    log:
        f"{RESULTS}/logs/figures/{{experiment}}_{{kind}}.log",
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../envs/adaptcs.yaml"
    script:
        "../../scripts/rule_adapter.py"


rule make_table:
    input:
        f"{RESULTS}/summary/{{experiment}}_curves.csv",
    output:
        markdown=report(
            f"{RESULTS}/tables/{{experiment}}.md",
            caption="../report/table.rst",
            category="{experiment}",
            labels={"experiment": "{experiment}", "figure": "table"},
        ),
        csv=f"{RESULTS}/tables/{{experiment}}.csv",
    log:
        f"{RESULTS}/logs/tables/{{experiment}}.log",
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../envs/adaptcs.yaml"
    script:
        "../../scripts/rule_adapter.py"


rule figures:
    input:
        FIGURES_AND_TABLES,
