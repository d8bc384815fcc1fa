"""fedjax_dp.deprecation: the warning's text, category and the line it names."""

import importlib
import pathlib
import sys
import warnings

import pytest

from fedjax_dp import deprecation

_HERE = pathlib.Path(__file__).resolve()


def _old_api():
  deprecation.warn("old_api()", "new_api()", "0.4.0")


def _old_through_helper():
  def moved():
    deprecation.warn("old_through_helper()", "new()", "0.4.0", stacklevel=3)
  moved()


def _line_of(marker: str) -> int:
  lines = _HERE.read_text().splitlines()
  return next(i for i, line in enumerate(lines, 1) if line.rstrip().endswith(marker))


def test_warns_deprecation_with_old_new_and_version():
  with pytest.warns(DeprecationWarning) as caught:
    _old_api()
  assert len(caught) == 1
  assert str(caught[0].message) == "old_api() is deprecated; use new_api() (removed in 0.4.0)"


def test_names_the_callers_line():
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    _old_api()  # the caller's line
  assert len(caught) == 1
  assert pathlib.Path(caught[0].filename).resolve() == _HERE
  assert caught[0].lineno == _line_of("# the caller's line")


def test_stacklevel_counts_from_the_function_that_warns():
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    _old_through_helper()  # reached through a helper
  assert caught[0].lineno == _line_of("# reached through a helper")
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    deprecation.warn("x", "y", "0.4.0", stacklevel=1)  # the warning function itself
  assert caught[0].lineno == _line_of("# the warning function itself")
  with pytest.raises(ValueError, match="stacklevel"):
    deprecation.warn("x", "y", "0.4.0", stacklevel=0)


def test_an_error_under_the_error_filter():
  with warnings.catch_warnings():
    warnings.simplefilter("error", DeprecationWarning)
    with pytest.raises(DeprecationWarning, match=r"removed in 0\.4\.0"):
      _old_api()


def test_a_deprecated_module_names_its_importer(tmp_path, monkeypatch):
  (tmp_path / "deprecated_mod_for_testing.py").write_text(
      "from fedjax_dp import deprecation\n"
      "deprecation.warn('deprecated_mod_for_testing', 'new_mod', '0.4.0')\n")
  importer = tmp_path / "importer_of_deprecated_mod.py"
  importer.write_text("import deprecated_mod_for_testing\n")
  monkeypatch.syspath_prepend(str(tmp_path))
  try:
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter("always")
      importlib.import_module("importer_of_deprecated_mod")
  finally:
    sys.modules.pop("deprecated_mod_for_testing", None)
    sys.modules.pop("importer_of_deprecated_mod", None)
  assert [str(w.message) for w in caught] == [
      "deprecated_mod_for_testing is deprecated; use new_mod (removed in 0.4.0)"]
  assert pathlib.Path(caught[0].filename).resolve() == importer.resolve()
  assert caught[0].lineno == 1
