"""The data sets, one module each.

A data set's module declares one :class:`~fedjax_dp.data.sets.base.Dataset`
as ``DATASET``: its model, its setting (a ``settings.DataSetting``), its
loader, its own federation builder and the files it reads.
:mod:`fedjax_dp.data.sets.base` holds what they share; the registry, one
line per data set, is ``fedjax_dp.datasets.DATASETS`` (research code adds
one with ``fedjax_dp.datasets.register``).
"""
