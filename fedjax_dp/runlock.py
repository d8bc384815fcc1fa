"""One writer per results folder: an exclusive lock held while a run writes.

Two processes continuing the same checkpoint would each train from it and
overwrite each other's saves: the record that ends up kept would then be
neither run's, silently. A sweep therefore holds ``OUT/.lock`` while it
runs, and ``reproduce.py`` holds one lock per (row, seed), so that two
campaigns started on the same tables share the rows instead of running one
twice.

The lock is ``flock(2)`` on a file that names the holder's pid: the kernel
releases it when the process ends, however it ends, so a killed run leaves
no stale lock behind. It holds between processes of one machine, and
between machines only where the file system's ``flock`` spans them (NFS
depends on its configuration); where ``flock`` is not supported at all the
run goes on unlocked, with a warning.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pathlib
import time
import warnings
from typing import Iterator

# A lock found taken is tried again _TRIES times, _PAUSE seconds apart: a
# run holds it for minutes, holder()'s probe for microseconds.
_TRIES, _PAUSE = 5, 0.05
NAME = ".lock"  # a sweep's lock in its --out folder


class Busy(Exception):
  """Another process holds the lock.

  Attributes:
    pid: The holder's process id (0 when it could not be read).
  """

  def __init__(self, path: pathlib.Path, pid: int):
    super().__init__(f"{path} is held by process {pid or '(unknown)'}")
    self.pid = pid


def _read_pid(fd: int) -> int:
  """The pid written in an open lock file (0 if none yet)."""
  try:
    return int(os.pread(fd, 32, 0).decode().strip() or 0)
  except (OSError, ValueError):
    return 0


@contextlib.contextmanager
def hold(path: str | os.PathLike) -> Iterator[None]:
  """Holds the exclusive lock ``path`` for the block; the file is removed after.

  On a file system without ``flock`` the block runs unlocked, with a
  warning.

  Raises:
    Busy: Another process holds it (nothing is waited for).
  """
  path = pathlib.Path(path)
  fd = _acquire(path)
  if fd is None:
    yield
    return
  try:
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    yield
  finally:
    path.unlink(missing_ok=True)  # before the release: no one locks a removed file
    os.close(fd)


def _acquire(path: pathlib.Path) -> int | None:
  """An open descriptor of ``path`` holding its lock, or None if the file
  system cannot lock.

  Raises:
    Busy: Another process holds it.
  """
  pid = 0
  for _ in range(_TRIES):
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      pid = _read_pid(fd)
      os.close(fd)
      time.sleep(_PAUSE)  # perhaps only holder() looking: it lets go at once
      continue
    except OSError as e:  # e.g. ENOLCK on some network file systems
      os.close(fd)
      path.unlink(missing_ok=True)
      warnings.warn(f"cannot lock {path} ({e.strerror or e}): nothing stops a second "
                    "process from writing the same run", stacklevel=3)
      return None
    # The holder before us may have removed the file between our open and
    # our flock: then we hold a lock on a name no one else will open.
    try:
      same = os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
      same = False
    if same:
      return fd
    os.close(fd)
  raise Busy(path, pid)


def holder(path: str | os.PathLike) -> int | None:
  """The pid of the process holding the lock ``path``, or None if it is free."""
  try:
    fd = os.open(path, os.O_RDONLY)
  except FileNotFoundError:
    return None
  try:
    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
  except BlockingIOError:
    return _read_pid(fd)
  except OSError:  # cannot lock here: no one holds it
    return None
  finally:
    os.close(fd)
  return None
