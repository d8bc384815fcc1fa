"""Atomic file writes: a temporary file beside the target, renamed into place.

Results, checkpoints, plots, caches and downloads are all written this way, so
an interrupted or failed write never leaves a half-written file behind. A
written file gets the mode a plain ``open(path, "w")`` would give it: 0o666
less the process's umask (0o644 under the usual 0o022), not the 0o600 of
``tempfile.mkstemp``.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import tempfile
from typing import IO, Iterator


def _umask() -> int:
  """The process's umask: from ``/proc/self/status`` where Linux shows it
  (reading it there changes nothing), else by setting and restoring it
  (once, at import, before any thread of this package writes)."""
  try:
    with open("/proc/self/status", encoding="ascii") as f:
      for line in f:
        if line.startswith("Umask:"):
          return int(line.split()[1], 8)
  except (OSError, ValueError, IndexError):
    pass
  mask = os.umask(0o022)
  os.umask(mask)
  return mask


# The mode of every file written here: that of ``open(path, "w")``.
_FILE_MODE = 0o666 & ~_umask()


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, mode: str = "wb") -> Iterator[IO]:
  """Opens a temporary file beside ``path``; on success it replaces ``path``.

  The folder must exist. On an exception inside the block the temporary file
  is deleted and the exception propagates; ``path`` is untouched.

  Example::

    with atomic_file(out / "results.json", "w") as f:
      f.write(text)
  """
  path = pathlib.Path(path)
  fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
  try:
    with os.fdopen(fd, mode) as f:
      os.fchmod(f.fileno(), _FILE_MODE)  # not mkstemp's 0o600
      yield f
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    pathlib.Path(tmp).unlink(missing_ok=True)
    raise
