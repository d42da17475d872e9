# Figures and tables, made from the summaries only (never from inference). Captions come from the config
# (adaptcs.captions) of the resolved run: what is plotted, over how many replicates, with which settings.
from adaptcs.captions import figure_caption, table_caption


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
    params:
        caption=lambda wc: figure_caption(PLAN.runs[wc.experiment], wc.kind),
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
        markdown=f"{RESULTS}/tables/{{experiment}}.md",
        csv=f"{RESULTS}/tables/{{experiment}}.csv",
        html=report(
            f"{RESULTS}/tables/{{experiment}}.html",
            caption="../report/table.rst",
            category="{experiment}",
            labels={"experiment": "{experiment}", "figure": "table"},
        ),
    params:
        caption=lambda wc: table_caption(PLAN.runs[wc.experiment]),
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
