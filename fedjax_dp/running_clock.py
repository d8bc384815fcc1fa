"""A clock of the seconds this process ran: wall time less the spans it was stopped.

A run's record keeps the seconds it trained (``Record.seconds``, carried
over a resume by its checkpoint), and ``reproduce.py plan`` paces its
estimates by them. A process stopped by job control (SIGSTOP or Ctrl-Z, as
a reproduction campaign is paused while a benchmark or the test suite
needs the cores) would otherwise count the pause as training.

A daemon thread wakes every ``TICK`` seconds. Every thread of a stopped
process stops, so a wake-up more than ``GAP`` seconds late means the
process did not run for that span, and :func:`now` leaves it out. Shorter
delays (a loaded machine's scheduling) count as running; so would a call
that held Python's GIL for over ``GAP`` seconds count as stopped (JAX's
compiles and computations release it). The thread starts with the first
:func:`now` and reads nothing but ``time.monotonic``.

>>> from fedjax_dp import running_clock
>>> start = running_clock.now()
>>> running_clock.now() - start >= 0.0
True
"""

from __future__ import annotations

import threading
import time

# How often the thread wakes, and how late a wake-up must be to count as a
# stop (a busy 2-core machine delays a sleeping thread by milliseconds).
TICK = 1.0
GAP = 5.0

_lock = threading.Lock()
_stopped = 0.0
_thread: threading.Thread | None = None


def _watch(tick: float, gap: float) -> None:
  global _stopped
  last = time.monotonic()
  while True:
    time.sleep(tick)
    current = time.monotonic()
    late = current - last - tick
    if late > gap:
      with _lock:
        _stopped += late
    last = current


def start(tick: float = TICK, gap: float = GAP) -> None:
  """Starts the watching thread once a process (later calls do nothing)."""
  global _thread
  with _lock:
    if _thread is None:
      _thread = threading.Thread(target=_watch, args=(tick, gap), daemon=True,
                                 name="fedjax_dp.running_clock")
      _thread.start()


def now() -> float:
  """Seconds on a monotonic clock that does not advance while the process is
  stopped (only differences mean anything).

  A stop is left out once the thread has woken after it, at most ``TICK``
  seconds after the process continues; a reading within that second still
  holds the stop, and the next one does not.
  """
  start()
  with _lock:
    return time.monotonic() - _stopped


def stopped_seconds() -> float:
  """The seconds this process was found stopped since the thread started."""
  with _lock:
    return _stopped
