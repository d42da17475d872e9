"""MRI: Bayesian design of Cartesian k-space lines (docs/mri.md).

:mod:`~adaptcs.mri.lines` (conventions, the separable wavelet, the line operator), :mod:`~adaptcs.mri.model`
(GSS-EP on lines, exact line gains, slab-variance profiles), :mod:`~adaptcs.mri.design` (the design loop and fixed
masks), :mod:`~adaptcs.mri.data` (simulated k-space of Colin27 slices).
"""
