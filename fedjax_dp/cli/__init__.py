"""The command line: every flag, and the mapping between flags and settings.

- :mod:`~fedjax_dp.cli.parser`: ``experiments/sweep.py``'s parser
  (:func:`~fedjax_dp.cli.parser.build_parser`): every flag generated from
  the options the library declares (the run config's fields, the
  aggregator's, each registered feature's, the data sets'), its help
  stating the declared default;
- :mod:`~fedjax_dp.cli.schemes`: the scheme families' flags, built from the
  options each family declares as data (``Family.options``), and the
  parsed values handed back to the family;
- :mod:`~fedjax_dp.cli.resolve`: the only reader of the parsed flags:
  the data set looked up once, its defaults, the layering of a run's
  settings (library default < data set < preset < flag) and each run's
  nested ``RunConfig`` (generically, from the declared options), all in
  one ``Request``;
- :mod:`~fedjax_dp.cli.errors`: a library error's field
  (:class:`~fedjax_dp.errors.ConfigError`) looked up as its flag (the map
  generated from the declared options);
- :mod:`~fedjax_dp.cli.sweep`: the sweep itself (planning, loading,
  running, ``main``);
- :mod:`~fedjax_dp.cli.results`: the sweep's results (Markdown, JSON,
  CSV), each figure beside the paper's;
- :mod:`~fedjax_dp.cli.types`: the flags' argparse value types.

The command line is the app layer above the library: it applies the papers'
presets (``fedjax_dp.paper.presets``) and compares with their figures
(``fedjax_dp.paper.results``); the library imports neither.

The library outside ``cli`` (``fedjax_dp.schemes`` included) imports no argparse.
"""
