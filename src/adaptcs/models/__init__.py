"""Inference methods: scikit-learn style estimators (docs/architecture.md, "The estimator contract")."""

from adaptcs.models._ep import EPSites
from adaptcs.models._hyperprior import Hyperprior
from adaptcs.models.enumeration import ExactPosterior, exact_group_spike_slab
from adaptcs.models.flas import FLAS, UngroupedFLAS
from adaptcs.models.gibbs import BayesianGroupLasso, GroupHorseshoe, GroupSpikeSlabGibbs
from adaptcs.models.group_ard import GroupARD
from adaptcs.models.group_lasso import GroupLasso
from adaptcs.models.spike_slab_ep import GroupSpikeSlabEP, SpikeSlabEP
from adaptcs.models.variational_garrote import UngroupedVariationalGarrote, VariationalGarrote
from adaptcs.models.wavelet_tree import WaveletTreeSpikeSlab

__all__ = ["BayesianGroupLasso", "EPSites", "ExactPosterior", "FLAS", "GroupARD", "GroupHorseshoe", "GroupLasso",
           "GroupSpikeSlabEP", "GroupSpikeSlabGibbs", "Hyperprior", "SpikeSlabEP", "UngroupedFLAS",
           "UngroupedVariationalGarrote", "VariationalGarrote", "WaveletTreeSpikeSlab", "exact_group_spike_slab"]
