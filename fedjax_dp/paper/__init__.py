"""The papers' app: their settings, presets, figures, tables and report.

The layer above the library (``fedjax_dp.simulation``, ``schemes``,
``models``, ``data``, ``privacy`` and the rest), which never imports it
(``tests/test_layering.py``): the library's defaults are its own, and the
papers' presets are applied from above, by the command line
(``fedjax_dp.cli``).

- :mod:`~fedjax_dp.paper.settings`: the papers' stated settings (thesis
  Tables 8.1-8.4, Fed-SMP Table I, the CDP-LQ poster);
- :mod:`~fedjax_dp.paper.presets`: the per-scheme presets the sweep applies
  (``--schemes FL-SIGN`` runs thesis Table 8.1's setting);
- :mod:`~fedjax_dp.paper.results`: the published figures (UAI Tables 1, 6-8,
  the thesis' tables) and the lookups that compare a run with them;
- :mod:`~fedjax_dp.paper.tables`: the papers' tables as runnable rows, one
  registered entry each (:func:`~fedjax_dp.paper.tables.table`), and their
  prose, ``text.toml``;
- :mod:`~fedjax_dp.paper.studies`: the studies beyond the papers
  (correlated and amplified noise), registered as tables too;
- :mod:`~fedjax_dp.paper.runner`: runs a table's rows and keeps their
  records (locks, twins, resume);
- :mod:`~fedjax_dp.paper.stats`: a row's result over its seeds and its
  verdict against the paper;
- :mod:`~fedjax_dp.paper.report`: ``docs/REPRODUCTION.md`` and its plots.

``experiments/reproduce.py`` is its command line.
"""

# The studies register their tables beside the papers' (``tables.tables()``
# lists both); imported here, so that ``tables`` need not import them back.
from fedjax_dp.paper import studies as _studies  # noqa: E402,F401  pylint: disable=unused-import
