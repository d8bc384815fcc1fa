"""Atomic file writes: a temporary file beside the target, renamed into place.

Results, checkpoints, plots, caches and downloads are all written this way, so
an interrupted or failed write never leaves a half-written file behind.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import tempfile
from typing import IO, Iterator


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
      yield f
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    pathlib.Path(tmp).unlink(missing_ok=True)
    raise
