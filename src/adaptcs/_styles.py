"""How figures draw a method, without importing it: its colour, its display name and the note under its label.

A figure job reads these instead of :data:`adaptcs.models.registry.METHODS` (whose import brings scikit-learn
and every estimator: about 2 CPU s per process). Methods a plugin registers exist only once the registry is
loaded (the plugin imports it), so a registry that is loaded is read instead. The registry takes its colours from
here; ``tests/test_plotting.py`` checks that figures see the registry's colours and notes either way.
"""

from __future__ import annotations

import sys

# the colour of every shipped method (adaptcs.models.registry.METHODS reads it from here)
COLORS = {"gss_ep": "C0", "gss_ep_scales": "#08306b", "gss_ep_profile": "#4a1486", "wavelet_tree": "#7f2704",
          "wavelet_tree_prediction": "#d94801", "lines_gaussian": "#00441b", "lines_spike_slab": "#41ab5d",
          "lines_phase": "#ce1256", "lines_coils": "#67001f", "ss_ep": "C1", "g_ard": "C3", "g_lasso": "C4",
          "gss_mcmc": "C2", "g_hs": "C5", "bg_lasso": "C6", "vg": "C7", "vg_ungrouped": "C8", "flas": "C9",
          "flas_ungrouped": "#e7ba52"}
# how figures name every shipped method (a plugin's method goes by its registry name)
DISPLAY_NAMES = {"gss_ep": "GSS-EP", "gss_ep_scales": "GSS-EP per scale", "gss_ep_profile": "GSS-EP, scale profile",
                 "wavelet_tree": "wavelet tree", "wavelet_tree_prediction": "wavelet tree + prediction",
                 "lines_gaussian": "line model, phase-blind", "lines_spike_slab": "line spike-and-slab",
                 "lines_phase": "line model, phase", "lines_coils": "coil line model", "ss_ep": "SS-EP",
                 "g_ard": "group ARD", "g_lasso": "group lasso", "gss_mcmc": "GSS Gibbs sampler",
                 "g_hs": "group horseshoe", "bg_lasso": "Bayesian group lasso",
                 "vg": "VG", "vg_ungrouped": "VG, ungrouped", "flas": "FLAS", "flas_ungrouped": "FLAS, ungrouped"}
PAPER_N_SAMPLES, PAPER_BURN_IN = 10000, 1000  # the samplers' paper protocol: 11,000 sweeps, the first 1,000 discarded
SAMPLERS = ("gss_mcmc", "g_hs", "bg_lasso")  # the methods whose label notes a run of other length


def sampler_sweeps(method_params: dict) -> str:
    """The sweeps of a sampler run other than the paper's 11,000 (figures label such runs); "" for the paper's."""
    if "n_samples" not in method_params and "burn_in" not in method_params:
        return ""
    sweeps = method_params.get("n_samples", PAPER_N_SAMPLES) + method_params.get("burn_in", PAPER_BURN_IN)
    return f"{sweeps:,} sweeps" if sweeps != PAPER_N_SAMPLES + PAPER_BURN_IN else ""


def _registered(method: str):
    """The registry entry of ``method`` if the registry is loaded and has it, else None."""
    registry = sys.modules.get("adaptcs.models.registry")
    return None if registry is None else registry.METHODS.get(method)


def method_color(method: str) -> str:
    """The Matplotlib colour of ``method`` (a base method name); "C7" for one nobody knows."""
    entry = _registered(method)
    return entry.color if entry is not None else COLORS.get(method, "C7")


def label_note(method: str, method_params: dict) -> str:
    """The extra line under ``method``'s label in figures for these ``method_params`` ("" for none)."""
    entry = _registered(method)
    if entry is not None:
        return entry.label_note(method_params)
    return sampler_sweeps(method_params) if method in SAMPLERS else ""


def display_name(label: str) -> str:
    """How a figure names a method's variant (``gss_ep`` -> "GSS-EP, oracle", ``gss_ep+learned`` -> "GSS-EP,
    learned"): its display name and whose hyper-parameters it was given."""
    method, _, variant = label.partition("+")
    return f"{DISPLAY_NAMES.get(method, method)}, {variant or 'oracle'}"
