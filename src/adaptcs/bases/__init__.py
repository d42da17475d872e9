"""Bases the models work in, below the operators and the models: :mod:`~adaptcs.bases.images` (orthonormal and
biorthogonal 2-D wavelets and the DCT of square images, their groups and scales) and
:mod:`~adaptcs.bases.separable` (the FFT conventions of Cartesian k-space and the fully separable wavelet that
makes the posterior of k-space lines block diagonal)."""
