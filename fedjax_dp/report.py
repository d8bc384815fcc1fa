"""Deprecated: moved to ``fedjax_dp.cli.results``; this name is kept for one minor version."""

import sys

from fedjax_dp import deprecation
import fedjax_dp.cli.results as _moved

deprecation.warn("fedjax_dp.report", "fedjax_dp.cli.results", "0.3.0")
sys.modules[__name__] = _moved
