"""MRI: Bayesian design of Cartesian k-space lines (docs/mri.md), the instrument's part.

The conventions and the separable wavelet are in :mod:`adaptcs.bases.separable`, the line models in
:mod:`adaptcs.models.line_phase` and :mod:`adaptcs.models.line_spike_slab`, the operator in
:mod:`adaptcs.operators.kspace`. Here: :mod:`~adaptcs.mri.design` (the design loop and fixed masks),
:mod:`~adaptcs.mri.masks`, :mod:`~adaptcs.mri.data` (simulated k-space of Colin27 slices), the reconstructors
(:mod:`~adaptcs.mri.recon`, :mod:`~adaptcs.mri.l1`), the replay, the lab and the command line.
"""
