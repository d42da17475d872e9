"""Measurement operators: dense rows, basis images, Walsh-Hadamard patterns and k-space lines as one concept
(:class:`MeasurementOperator`; docs/architecture.md, "How to add a measurement operator")."""

from adaptcs.operators.base import MeasurementOperator, PatternOperator, noise_variance
from adaptcs.operators.hadamard import HadamardPatterns, walsh_matrix
from adaptcs.operators.kspace import CoilKSpaceLines, KSpaceLines
from adaptcs.operators.rows import RowPool
from adaptcs.operators.selection import BasisSelection

__all__ = ["BasisSelection", "CoilKSpaceLines", "HadamardPatterns", "KSpaceLines", "MeasurementOperator",
           "PatternOperator", "RowPool", "noise_variance", "walsh_matrix"]
