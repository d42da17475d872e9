"""A workflow config resolved once: every experiment entry with its defaults filled in, checked beyond the schema.

The schema (``workflow/schemas/config.schema.yaml``) checks types; this module checks what only the registries
know: experiment and method names, the keys each experiment takes, settings, replicates, design steps,
strategies, hyper-parameters and ``method_params`` (without data). Every message names the config key. The
Snakemake workflow, the command line and the benchmarks all read a config through here, so they agree on what
a config means. ``plugins`` (modules of your own that register experiments, kinds or methods) are imported first.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from adaptcs.bases.images import WaveletBasis
from adaptcs.experiments.base import COMMON_KEYS, Experiment
from adaptcs.experiments.registry import experiment_from_config
from adaptcs.experiments.strategies import STRATEGIES, allowed_strategies
from adaptcs.models.registry import HYPERPARAMETERS, METHODS
from adaptcs.plugins import load_plugins

# The schema the workflow validates configs against (the package's copy is a link to workflow/schemas/).
SCHEMA = Path(__file__).with_name("config.schema.yaml")


@dataclass(frozen=True)
class ExperimentRun:
    """What a config asks of one experiment, defaults filled in.

    Attributes
    ----------
    experiment : Experiment
        Its definition, with the entry's data options.
    replicates : int
        Replicates 0 .. replicates - 1 of every setting.
    methods, hyperparameters, strategies : tuple of str
    settings : tuple of int
        Indices into ``experiment.settings``.
    n_steps : int
        Design steps.
    """

    experiment: Experiment
    replicates: int
    methods: tuple[str, ...]
    settings: tuple[int, ...]
    hyperparameters: tuple[str, ...]
    strategies: tuple[str, ...]
    n_steps: int

    def strategies_of(self, method: str) -> list[str]:
        """The strategies ``method`` runs: all, but those that need a posterior covariance only if it has one."""
        designs = METHODS[method].designs_rows
        return [s for s in self.strategies if designs or not STRATEGIES[s].needs_covariance]

    def as_dict(self) -> dict:
        """The resolved entry as ``effective_config.yaml`` records it."""
        return {"replicates": self.replicates, "methods": list(self.methods), "settings": list(self.settings),
                "hyperparameters": list(self.hyperparameters), "strategies": list(self.strategies),
                "n_steps": self.n_steps, "data_options": dict(self.experiment.options)}


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, but a key repeated in one mapping is an error (PyYAML keeps the last one silently)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"the key {key!r} appears twice in one mapping",
                                                        key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_yaml(path):
    """A YAML file (a config) with every key of a mapping given once; ValueError naming the file and line if not."""
    path = Path(path)
    try:
        return yaml.load(path.read_text(), Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: {exc}") from None


def check_config_files(paths) -> None:
    """ValueError if a config file repeats a key (Snakemake reads configs itself and would keep the last value)."""
    for path in paths:
        read_yaml(path)


def check_schema(config, schema_path=SCHEMA) -> None:
    """ValueError of one line if ``config`` breaks the schema: where (the dotted key) and what, for the error
    jsonschema ranks most relevant (Snakemake's own message dumps the schema's part and the instance)."""
    import jsonschema

    schema = yaml.safe_load(Path(schema_path).read_text())
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(config))
    if error is None:
        return
    where = ""
    for part in error.absolute_path:
        where += f"[{part}]" if isinstance(part, int) else (f".{part}" if where else str(part))
    hint = ""
    if error.validator == "pattern" and isinstance(error.instance, str) and "-" in error.instance:
        hint = f"; names use underscores: {error.instance.replace('-', '_')!r}?"
    raise ValueError(f"{where or 'the config'}: {error.message}{hint}")


def check_known_keys(config, schema: dict | None = None) -> None:
    """ValueError naming the first key the schema does not know, where it is and the nearest known key (the
    schema's own error lists the whole schema); the schema then checks everything else.

    Follows ``properties``, ``patternProperties``, ``$ref`` and the data block of the shipped kinds (``user``,
    ``replay``)."""
    import difflib
    import re

    schema = yaml.safe_load(SCHEMA.read_text()) if schema is None else schema
    defs = schema.get("$defs", {})

    def resolved(node: dict) -> dict:
        while "$ref" in node:
            node = defs[node["$ref"].rsplit("/", 1)[-1]]
        return node

    def walk(value, node: dict, where: str) -> None:
        node = resolved(node)
        if not isinstance(value, dict) or ("properties" not in node and "patternProperties" not in node):
            return
        known = node.get("properties", {})
        patterns = node.get("patternProperties", {})
        for key, item in value.items():
            if key in known:
                child = known[key]
                if key == "data" and isinstance(value.get("kind"), str) and f"{value['kind']}_data" in defs:
                    child = defs[f"{value['kind']}_data"]
                walk(item, child, f"{where}{key}.")
                continue
            matched = next((p for p in patterns if isinstance(key, str) and re.fullmatch(p, key)), None)
            if matched is not None:
                walk(item, patterns[matched], f"{where}{key}.")
            elif node.get("additionalProperties", True) is False:
                nearest = difflib.get_close_matches(str(key), list(known), n=1)
                hint = f"; did you mean {nearest[0]!r}?" if nearest else f"; known keys here: {', '.join(known)}"
                raise ValueError(f"config: unknown key {where}{key}{hint} (config/README.md lists every key)")

    walk(config, schema, "")


def load_config(path) -> dict:
    """A config file as the workflow reads it: YAML, validated against the schema with its defaults filled in."""
    from snakemake.utils import validate

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such config file")
    config = read_yaml(path)
    check_known_keys(config)
    validate(config, str(SCHEMA))
    return config


def _checked(where: str, check, *args):
    """``check(*args)``; a ValueError gets ``where`` in front of its message."""
    try:
        return check(*args)
    except ValueError as exc:
        raise ValueError(f"{where}{exc}") from None


def resolve_experiment(config: dict, name: str) -> ExperimentRun:
    """The config's entry ``experiments.<name>`` with defaults filled in from the experiment's definition."""
    entry = config["experiments"][name]
    key = f"config: experiments.{name}"
    experiment = _checked("config: ", experiment_from_config, name, entry, config)
    unknown = sorted(set(entry) - set(COMMON_KEYS) - set(experiment.config_keys))
    if unknown:
        raise ValueError(f"{key}: {name} does not take {unknown}; it takes "
                         f"{sorted(set(COMMON_KEYS) | set(experiment.config_keys))}")
    settings = experiment.setting_indices(entry)
    bad = [s for s in settings if not 0 <= s < len(experiment.settings)]
    if bad:
        raise ValueError(f"{key}.settings has {bad}; {name} has settings 0..{len(experiment.settings) - 1} "
                         f"({list(experiment.settings)})")
    _checked(f"{key}.", experiment.check_replicates, entry["replicates"], settings)
    unknown = [m for m in entry["methods"] if m not in METHODS]
    if unknown:
        raise ValueError(f"{key}.methods has unknown {unknown}; known: {list(METHODS)}")
    refused = [m for m in entry["methods"] if METHODS[m].lines_only != experiment.kspace_lines]
    if refused:
        lines = [m for m, spec in METHODS.items() if spec.lines_only]
        raise ValueError(f"{key}.methods: {refused} cannot run on {name}: " + (
            f"k-space lines take only the line models {lines}" if experiment.kspace_lines else
            "they fit only Cartesian k-space lines (kind: mri)"))
    coils = getattr(experiment, "coils", 0) if experiment.kspace_lines else 0
    refused = [m for m in entry["methods"] if experiment.kspace_lines and METHODS[m].coils != bool(coils)]
    if refused:
        takes = [m for m, spec in METHODS.items() if spec.lines_only and spec.coils == bool(coils)]
        raise ValueError(f"{key}.methods: {refused} cannot run on {name}: " + (
            f"the k-space of {coils} coils takes the coil line models {takes}" if coils else
            f"they fit the lines of a receive array (data.coils); one coil takes {takes}"))
    no_basis = [s for s in settings if experiment.basis(s) is None]
    refused = [m for m in entry["methods"] if METHODS[m].needs_basis]
    if no_basis and refused:
        raise ValueError(f"{key}.methods: {refused} need coefficients of a basis (a prior per scale); {name}'s "
                         f"settings {no_basis} have none")
    refused = [m for m in entry["methods"] if METHODS[m].scans_only]
    if refused and not experiment.basis_scans:
        raise ValueError(f"{key}.methods: {refused} fit only basis scans (rows that are basis images); {name}'s rows "
                         "are not (kind: replay has such rows)")
    refused = [m for m in entry["methods"] if METHODS[m].needs_training]
    if refused and not experiment.has_training_images:
        raise ValueError(f"{key}.methods: {refused} need a profile of the scales from training images; {name} has "
                         "none (E7 has)")
    hyperparameters = list(entry.get("hyperparameters", experiment.default_hyperparameters))
    bad = [h for h in hyperparameters if h not in HYPERPARAMETERS] or \
        [h for h in set(hyperparameters) if hyperparameters.count(h) > 1]
    if bad or not hyperparameters:
        raise ValueError(f"{key}.hyperparameters must be a non-empty list of distinct values from "
                         f"{list(HYPERPARAMETERS)}; got {hyperparameters}")
    if "oracle" in hyperparameters:
        _checked(f"{key}.hyperparameters: ", experiment.check_oracle)
    strategies = list(entry.get("strategies", experiment.strategies))
    refused = [s for s in strategies if s not in allowed_strategies(experiment)]
    if refused:
        raise ValueError(f"{key}.strategies: {name} cannot run {refused}; it takes {allowed_strategies(experiment)}")
    needs_wavelet = [s for s in strategies if STRATEGIES[s].needs_wavelet_basis]
    not_wavelet = [s for s in settings if not isinstance(experiment.basis(s), WaveletBasis)]
    if needs_wavelet and not_wavelet and "strategies" not in entry:  # the default list, without what cannot run
        strategies = [s for s in strategies if s not in needs_wavelet]
    elif needs_wavelet and not_wavelet:
        raise ValueError(f"{key}.strategies: {needs_wavelet} scan the images of a wavelet basis; {name}'s settings "
                         f"{not_wavelet} have none (basis: haar, db2 or db4)")
    n_steps = _checked(f"{key}.", experiment.check_n_steps, entry.get("n_steps"))
    return ExperimentRun(experiment, entry["replicates"], tuple(entry["methods"]), tuple(settings),
                         tuple(hyperparameters), tuple(strategies), n_steps)


def check_method_params(config: dict) -> None:
    """Refuse unknown or invalid ``method_params`` before any job runs (ValueError naming method and key)."""
    for method, params in config.get("method_params", {}).items():
        users = [e for e, entry in config["experiments"].items() if method in entry["methods"]]
        where = f"config: method_params.{method} (used by {', '.join(users) or 'no experiment'})"
        if method not in METHODS:
            raise ValueError(f"{where}: unknown method; known: {list(METHODS)}")
        if not isinstance(params, dict):
            raise ValueError(f"{where}: must be a mapping of parameter names to values; got {params!r}")
        _checked(f"{where}: ", METHODS[method].check_params, params)


def resolve(config: dict) -> dict[str, ExperimentRun]:
    """Every experiment of the config, resolved (plugins loaded and ``method_params`` checked first)."""
    load_plugins(config)
    check_method_params(config)
    return {name: resolve_experiment(config, name) for name in config["experiments"]}


def effective_config(config: dict, runs: dict[str, ExperimentRun] | None = None) -> dict:
    """What a run of ``config`` does, defaults resolved: each experiment's grid and design steps, and every
    parameter of each method used (the user's, the method's fixed choices, or the estimator's defaults)."""
    runs = resolve(config) if runs is None else runs
    methods = [m for m in METHODS if any(m in run.methods for run in runs.values())]
    overrides = config.get("method_params", {})
    params = {m: METHODS[m].effective_params(overrides.get(m, {})) for m in sorted(methods)}
    for method in methods:
        calibrated = [name for name, run in runs.items() if method in run.methods and "oracle" in run.hyperparameters
                      and run.experiment.calibration is not None]
        entry = METHODS[method]
        if entry.calibrate is None or not calibrated or set(entry.calibrates) & set(overrides.get(method, {})):
            continue
        for name in entry.calibrates:
            params[method][name] = (f"{params[method][name]} where not calibrated; on {', '.join(calibrated)} "
                                    f"{entry.calibration_note}")
    return {"config": config, "experiments": {name: run.as_dict() for name, run in runs.items()},
            "method_params": params}
