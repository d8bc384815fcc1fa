"""Deprecated: moved to ``fedjax_dp.paper``; kept for one minor version.

The tables are ``fedjax_dp.paper.tables``, the runner ``fedjax_dp.paper.runner``,
the statistics and verdicts ``fedjax_dp.paper.stats``, the report
``fedjax_dp.paper.report`` and its prose ``fedjax_dp/paper/text.toml``.
"""

from fedjax_dp import deprecation

deprecation.warn("fedjax_dp.reproduction", "fedjax_dp.paper (tables, runner, stats, report)",
                 "0.3.0")

from fedjax_dp.paper import report as _report  # noqa: E402
from fedjax_dp.paper import runner as _runner  # noqa: E402
from fedjax_dp.paper import stats as _stats  # noqa: E402
from fedjax_dp.paper import tables as _tables  # noqa: E402

# Every name the module held, from its new homes.
for _module in (_tables, _runner, _stats, _report):
  globals().update({k: v for k, v in vars(_module).items() if not k.startswith("__")})
