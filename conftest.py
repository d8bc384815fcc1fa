"""Pytest's root: the package's doctests run with the tests (``--doctest-modules``
over ``fedjax_dp``, pyproject.toml), as flax runs its own.

A deprecated module alias (one that warns at import, as 0.2.0's moved modules
did until 0.3.0 removed them) is not collected: importing it warns, and the
suite makes the library's deprecation warnings errors. Its replacement's
doctests run.
"""

import pathlib
import re

_PACKAGE = pathlib.Path(__file__).resolve().parent / "fedjax_dp"
# A deprecated alias warns at import: a module-level ``deprecation.warn(``.
collect_ignore = sorted(str(path.relative_to(_PACKAGE.parent))
                        for path in _PACKAGE.rglob("*.py")
                        if re.search(r"^deprecation\.warn\(", path.read_text(), re.MULTILINE))
