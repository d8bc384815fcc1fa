"""Deprecation warnings for the public API's old spellings.

A name of the public API (``docs/api.md``, "Public API") that changes keeps
its old spelling for at least one minor version; using the old spelling
issues one :class:`DeprecationWarning` naming the new one and the version
that removes it::

    def old_name(self):
      deprecation.warn("Plan.old_name", "Plan.new_name", "0.4.0")
      return self.new_name()

Python shows a ``DeprecationWarning`` by default only when ``__main__``
triggers it; pytest shows every one, and ``python -W error::DeprecationWarning``
turns them into errors (what a research script that wants to stay current
can run under). 0.3.0 removed the spellings that 0.2.0 deprecated
(CHANGELOG.md, 0.3.0's "Removed").
"""

from __future__ import annotations

import warnings


def message(old: str, new: str, removed_in: str) -> str:
  """The warning's text.

  >>> message("fedjax_dp.old_module", "fedjax_dp.new_module", "0.4.0")
  'fedjax_dp.old_module is deprecated; use fedjax_dp.new_module (removed in 0.4.0)'
  """
  return f"{old} is deprecated; use {new} (removed in {removed_in})"


def warn(old: str, new: str, removed_in: str, *, stacklevel: int = 2) -> None:
  """Warns that ``old`` is deprecated in favour of ``new``.

  Issues ``DeprecationWarning("OLD is deprecated; use NEW (removed in X)")``
  attributed to the code that used the old spelling: the caller of the
  function that calls :func:`warn`, so a user sees their own line.

  Args:
    old: The old spelling (``"Plan.old_name"``, ``"fedjax_dp.old_module"``).
    new: What to use instead.
    removed_in: The version that removes ``old`` (``"0.4.0"``).
    stacklevel: Which frame the warning names, counted from the function
      that calls :func:`warn`: 1 that function itself, 2 (the default) its
      caller, 3 the caller's caller (when the old spelling is reached
      through a helper, e.g. a property that calls a shared ``_moved``).
      A module-level call in a deprecated module names the module that
      imports it (Python skips the import machinery's frames).
  """
  if stacklevel < 1:
    raise ValueError(f"stacklevel must be >= 1, got {stacklevel}")
  warnings.warn(message(old, new, removed_in), DeprecationWarning,
                stacklevel=stacklevel + 1)
