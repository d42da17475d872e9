# Snakemake finds this file first; the workflow itself lives in workflow/ (see workflow/Snakefile).
include: "workflow/Snakefile"


# An included file cannot set the default target, so it is named here: plain `snakemake` runs rule all.
rule default:
    default_target: True
    input:
        rules.all.input,
