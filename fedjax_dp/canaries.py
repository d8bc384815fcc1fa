"""Deprecated: moved to ``fedjax_dp.features.audit.canaries``; this name is kept for one minor version."""

import sys

from fedjax_dp import deprecation
import fedjax_dp.features.audit.canaries as _moved

deprecation.warn("fedjax_dp.canaries", "fedjax_dp.features.audit.canaries", "0.3.0")
sys.modules[__name__] = _moved
