"""Deprecated: moved to ``fedjax_dp.local_training``; this name is kept for one minor version."""

import sys

from fedjax_dp import deprecation
import fedjax_dp.local_training as _moved

deprecation.warn("fedjax_dp.client", "fedjax_dp.local_training", "0.3.0")
sys.modules[__name__] = _moved
