"""adaptcs: adaptive compressed sensing with group spike-and-slab priors fitted by expectation propagation."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("adaptcs")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"
