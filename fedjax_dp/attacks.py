"""Deprecated: moved to ``fedjax_dp.features.attack.adversary``; this name is kept for one minor version."""

import sys

from fedjax_dp import deprecation
import fedjax_dp.features.attack.adversary as _moved

deprecation.warn("fedjax_dp.attacks", "fedjax_dp.features.attack.adversary", "0.3.0")
sys.modules[__name__] = _moved
