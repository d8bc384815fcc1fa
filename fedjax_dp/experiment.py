"""Deprecated: moved to ``fedjax_dp.cli.sweep``; this name is kept for one minor version."""

import sys

from fedjax_dp import deprecation
import fedjax_dp.cli.sweep as _moved

deprecation.warn("fedjax_dp.experiment", "fedjax_dp.cli.sweep", "0.3.0")
sys.modules[__name__] = _moved
