"""Deprecated: split into ``fedjax_dp.paper`` and the library; kept for one minor version.

The papers' settings are ``fedjax_dp.paper.settings``, their per-scheme
presets ``fedjax_dp.paper.presets``, their figures ``fedjax_dp.paper.results``;
the data sets' settings (``FASHION_MNIST`` and the others, ``DataSetting``)
are the library's, ``fedjax_dp.data.settings``.
"""

import collections.abc
from typing import Mapping

from fedjax_dp import deprecation

deprecation.warn("fedjax_dp.presets", "fedjax_dp.paper (settings, presets, results) and "
                 "fedjax_dp.data.settings", "0.3.0")

from fedjax_dp.data import settings as _data  # noqa: E402
from fedjax_dp.data.settings import DataSetting  # noqa: E402
from fedjax_dp.paper import presets as _presets  # noqa: E402
from fedjax_dp.paper import results as _results  # noqa: E402
from fedjax_dp.paper import settings as _settings  # noqa: E402

# Every name the module held, from its new homes.
for _module in (_data, _settings, _results):
  globals().update({k: v for k, v in vars(_module).items() if not k.startswith("__")})
MEDICAL_SCHEME_PRESETS = _presets.MEDICAL
MEDICAL_PRESET_SOURCES = _presets.MEDICAL_SOURCES


class _DataSettings(collections.abc.Mapping):
  """Each registered data set's :class:`DataSetting`, by name, read from the
  registry when asked (``fedjax_dp.datasets.DATASETS``)."""

  def _registry(self):
    from fedjax_dp import datasets  # pylint: disable=import-outside-toplevel
    return datasets.DATASETS

  def __getitem__(self, name: str) -> DataSetting:
    return self._registry()[name].settings

  def __iter__(self):
    return iter(self._registry())

  def __len__(self) -> int:
    return len(self._registry())


# Each data set's setting, as its module declares it.
DATA_SETTINGS: Mapping[str, DataSetting] = _DataSettings()
