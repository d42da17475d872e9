"""The names the command line offers, without importing what they name (``--help`` starts in a few hundredths of
a second). ``tests/test_cli.py`` checks that every tuple here equals its registry."""

EXPERIMENTS = ("E1", "E2", "E3", "E4", "E5", "E6", "E7")  # adaptcs.experiments.EXPERIMENTS
# adaptcs.models.registry.METHODS
METHODS = ("gss_ep", "gss_ep_scales", "gss_ep_profile", "wavelet_tree", "wavelet_tree_prediction", "lines_gaussian",
           "lines_spike_slab", "lines_phase", "lines_coils", "ss_ep", "g_ard", "g_lasso", "gss_mcmc", "g_hs",
           "bg_lasso", "vg", "vg_ungrouped", "flas", "flas_ungrouped")
STRATEGIES = ("design", "random", "topdown", "pca", "predict", "low_to_high", "partial_fourier_5_8",
              "partial_fourier_6_8", "partial_fourier_7_8", "pf_variable_density", "pf_equispaced", "equispaced",
              "variable_density", "jittered_density", "fastmri_random", "fastmri_equispaced", "offline_greedy",
              "oracle_greedy")  # adaptcs.experiments.STRATEGIES
HYPERPARAMETERS = ("oracle", "learned")  # adaptcs.models.registry.HYPERPARAMETERS
MNIST_SOURCES = ("auto", "download", "embedded", "path")  # adaptcs.data.mnist.SOURCES
BASES = ("haar", "db2", "db4", "bior2.2", "bior4.4", "dct")  # adaptcs.bases.images.BASES
# python -m adaptcs mri (strategy names; adaptcs.mri.design.FIXED_MASKS and "design")
MRI_ORDERS = ("design", "low_to_high", "partial_fourier_5_8", "partial_fourier_6_8", "partial_fourier_7_8",
              "pf_variable_density", "pf_equispaced", "equispaced", "variable_density", "jittered_density",
              "fastmri_random", "fastmri_equispaced")
MRI_PRIORS = ("gaussian", "sparse", "phase", "phase_sparse")  # adaptcs.mri.replay.PRIORS
REPLAY_ORDERS = ("design", "topdown", "predict", "random")  # adaptcs.design.basis_scan.REPLAY_ORDERS
REPLAY_PRIORS = ("tree", "prediction", "scales")  # adaptcs.replay.PRIORS
ROW_LAB_FORMAT = "adaptcs-design-state"  # the state file of the lab of rows and basis images (adaptcs.lab.state)
LINE_LAB_FORMAT = "adaptcs-mri-lines-state"  # the state file of the lab of k-space lines (adaptcs.lab.lines)


def variant_label(method: str, hyperparameters: str) -> str:
    """How results name a method run with ``hyperparameters``: ``gss_ep`` (oracle), ``gss_ep+learned``."""
    return method if hyperparameters == "oracle" else f"{method}+{hyperparameters}"


def base_method(label: str) -> str:
    """The method of a :func:`variant_label`."""
    return label.split("+", 1)[0]


def method_order() -> list[str]:
    """Methods in the registry's order (tables and figures list them so). Methods beyond the shipped ones exist
    only once a plugin has registered them, which imports the registry: it is read when it is loaded."""
    import sys

    registry = sys.modules.get("adaptcs.models.registry")
    return list(METHODS) if registry is None else list(registry.METHODS)
