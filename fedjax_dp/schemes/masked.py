"""Deprecated: moved to ``fedjax_dp.schemes.coordinate_subset``; this name is kept for one minor version."""

import sys

from fedjax_dp import deprecation
import fedjax_dp.schemes.coordinate_subset as _moved

deprecation.warn("fedjax_dp.schemes.masked", "fedjax_dp.schemes.coordinate_subset", "0.3.0")
sys.modules[__name__] = _moved
