"""Stopping a command: SIGTERM raised like Ctrl-C, and the exit codes.

Ctrl-C (SIGINT) raises ``KeyboardInterrupt`` in Python's main thread; within
:func:`sigterm_as_interrupt` SIGTERM (``kill PID``, a scheduler's time limit)
raises :class:`Terminated`, a ``KeyboardInterrupt``, so that both stop a
command through the same ``except KeyboardInterrupt`` (which prints one line
saying what is kept) instead of SIGTERM ending the process without a word.
The exit code is the shell's for the signal (:func:`exit_code`): 130 after
SIGINT, 143 after SIGTERM, with which a script ends through :func:`end`.
Imports no JAX.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import Iterator, NoReturn

#: Exit codes: 128 + the signal's number, as a shell reports a process that
#: the signal ended.
SIGINT_EXIT = 128 + signal.SIGINT
SIGTERM_EXIT = 128 + signal.SIGTERM


class Terminated(KeyboardInterrupt):
  """SIGTERM, raised where Ctrl-C raises ``KeyboardInterrupt``."""


class Reported(KeyboardInterrupt):
  """An interruption whose one line is already printed (by the sweep that
  was interrupted), raised on by the command that ran it.

  Attributes:
    code: The exit code to end with (:data:`SIGINT_EXIT` or
      :data:`SIGTERM_EXIT`).
  """

  def __init__(self, code: int = SIGINT_EXIT):
    super().__init__(code)
    self.code = code


def exit_code(error: BaseException) -> int:
  """The exit code of a command ended by ``error``: 143 for SIGTERM (also
  when ``error`` was raised from it, or reports it), else 130.

  >>> exit_code(KeyboardInterrupt()), exit_code(Terminated())
  (130, 143)
  """
  code = getattr(error, "code", None)
  if isinstance(code, int):
    return code
  if isinstance(error, Terminated) or isinstance(error.__cause__, Terminated):
    return SIGTERM_EXIT
  return SIGINT_EXIT


def _raise_terminated(signum, frame):  # pylint: disable=unused-argument
  raise Terminated


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
  """Within the block SIGTERM raises :class:`Terminated`; the handler before
  it is restored after.

  A SIGTERM that the process ignores (``signal.SIG_IGN``) stays ignored,
  and outside the main thread (where Python cannot set a handler) nothing
  changes. Ctrl-C is left to Python's own handler (or ignored, as a shell
  ignores it for a background job).
  """
  if threading.current_thread() is not threading.main_thread():
    yield
    return
  before = signal.getsignal(signal.SIGTERM)
  if before == signal.SIG_IGN:
    yield
    return
  signal.signal(signal.SIGTERM, _raise_terminated)
  try:
    yield
  finally:
    # None: a handler not set from Python; the default is what it did.
    signal.signal(signal.SIGTERM, signal.SIG_DFL if before is None else before)


def end(code: int) -> NoReturn:
  """Ends a script with ``code``: ``sys.exit``, except after an interruption
  (130, 143), which ends the process at once (streams flushed) instead of
  in the interpreter's teardown.

  An interruption can leave a JAX compilation running in its thread, which
  the teardown's destruction of the JAX client turns into a segmentation
  fault (exit code -11 instead of 130); every file the commands write is
  complete by then (written atomically), and the locks are the kernel's.
  """
  if code in (SIGINT_EXIT, SIGTERM_EXIT):
    for stream in (sys.stdout, sys.stderr):
      with contextlib.suppress(Exception):
        stream.flush()
    os._exit(code)  # pylint: disable=protected-access
  sys.exit(code)
