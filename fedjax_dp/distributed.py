"""One simulation over several processes: JAX's multi-process runtime (issue 17).

Every process runs the same program with the same settings, data and seed
(``jax.distributed``: one controller per process; gloo collectives on CPU,
NCCL on GPU). The cohort's client mesh (``fedjax_dp.sharding.client_mesh``)
then spans every process's devices: each device trains its share of the
cohort, and the round's sums are all-reduced across processes. Everything a
process derives on its own (data, keys, the server's setup) is computed
identically everywhere; only process 0 writes files and shows progress.

:func:`initialize` connects the processes (before any JAX computation);
:func:`check_same` stops a launch whose processes disagree on settings or
data; :func:`broadcast_bytes` shares what only process 0 can read (resumed
results and checkpoints); :func:`abort` stops every process when one fails
(a watchdog thread in each process polls the coordination service, so a
process blocked in a collective stops too). A process that dies without a
word (killed, out of memory) is noticed by JAX's heartbeat: the others end
with JAX's own message after ``--process-timeout`` seconds.
"""

from __future__ import annotations

import atexit
import dataclasses
import hashlib
import os
import socket
import sys
import threading
import time

import jax
import numpy as np
from jax.experimental import multihost_utils

# The flags' defaults come from these environment variables.
ENV = {"coordinator": "FEDJAX_DP_COORDINATOR", "num_processes": "FEDJAX_DP_NUM_PROCESSES",
       "process_id": "FEDJAX_DP_PROCESS_ID", "timeout": "FEDJAX_DP_PROCESS_TIMEOUT"}
# --coordinator auto: JAX's cluster detection (SLURM, Open MPI, Kubernetes, Cloud TPU).
AUTO = "auto"
DEFAULT_TIMEOUT = 120
# How often each process's watchdog asks whether another process failed.
POLL_SECONDS = 0.5
# How long process 0, stopping, waits for the others to stop first (it hosts
# the coordination service, whose loss would make JAX abort them), and for
# them to end once they said they stop.
STOP_WAIT_SECONDS = 10
STOP_GRACE_SECONDS = 1.0
_FAILED = "fedjax_dp/failed"
_STOPPED = "fedjax_dp/stopped/"


@dataclasses.dataclass(frozen=True)
class Processes:
  """How this process joins a multi-process run.

  Attributes:
    coordinator: "HOST:PORT" of process 0's coordination service, "auto"
      (JAX's cluster detection, e.g. under SLURM's ``srun``), or None: one
      process, nothing to join.
    num_processes: Processes in the run (with HOST:PORT).
    process_id: This process's index in [0, num_processes) (with HOST:PORT).
    timeout: Seconds the processes wait for each other at start, and for a
      silent process before the others stop.
  """

  coordinator: str | None = None
  num_processes: int | None = None
  process_id: int | None = None
  timeout: int = DEFAULT_TIMEOUT

  @property
  def enabled(self) -> bool:
    """Whether this process joins others."""
    return self.coordinator is not None

  def validate(self) -> None:
    """Raises ValueError with one line naming the flag."""
    if self.timeout < 1:
      raise ValueError(f"--process-timeout must be >= 1, got {self.timeout}")
    explicit = self.num_processes is not None or self.process_id is not None
    if not self.enabled:
      if explicit:
        raise ValueError("--num-processes and --process-id need --coordinator")
      return
    if self.coordinator == AUTO:
      if explicit:
        raise ValueError("--coordinator auto detects --num-processes and --process-id; "
                         "give HOST:PORT to set them")
      return
    address(self.coordinator)
    if self.num_processes is None or self.process_id is None:
      raise ValueError(f"--coordinator {self.coordinator} needs --num-processes and "
                       "--process-id")
    if self.num_processes < 1:
      raise ValueError(f"--num-processes must be >= 1, got {self.num_processes}")
    if not 0 <= self.process_id < self.num_processes:
      raise ValueError(f"--process-id must be in [0, {self.num_processes - 1}] for "
                       f"--num-processes {self.num_processes}, got {self.process_id}")


def address(coordinator: str) -> tuple[str, int]:
  """(host, port) of a HOST:PORT coordinator address.

  Raises:
    ValueError: Not HOST:PORT with a port in [1, 65535].
  """
  host, _, port = coordinator.rpartition(":")
  if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
    raise ValueError(f"--coordinator takes HOST:PORT or '{AUTO}', got {coordinator!r}")
  return host.strip("[]"), int(port)


def _probe(cfg: Processes) -> None:
  """Checks, before JAX tries, that process 0 can listen on the port and
  that the others reach it within the timeout (JAX aborts the process
  instead of raising).

  Raises:
    ValueError: One line naming --coordinator.
  """
  host, port = address(cfg.coordinator)
  if cfg.process_id == 0:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
      s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
      try:
        s.bind(("", port))
      except OSError as e:
        raise ValueError(f"--coordinator {cfg.coordinator}: process 0 cannot listen on "
                         f"port {port}: {e.strerror}") from None
    return
  deadline, reason = time.monotonic() + cfg.timeout, "no answer"
  while time.monotonic() < deadline:
    try:
      socket.create_connection((host, port), timeout=1.0).close()
      return
    except socket.gaierror as e:
      raise ValueError(f"--coordinator {cfg.coordinator}: unknown host {host!r} "
                       f"({e.strerror})") from None
    except OSError as e:
      reason = e.strerror or str(e)
      time.sleep(0.2)
  raise ValueError(f"--coordinator {cfg.coordinator} unreachable from process "
                   f"{cfg.process_id} within --process-timeout {cfg.timeout} s ({reason})")


def initialize(cfg: Processes, prog: str) -> bool:
  """Joins the run's other processes (``jax.distributed.initialize``).

  Call it before any JAX computation. Nothing happens for one process.

  Args:
    cfg: The processes (``fedjax_dp.cli.resolve.processes``).
    prog: The program's name, which starts every error line.

  Returns:
    Whether this process joined others.

  Raises:
    ValueError: Bad settings or an unreachable coordinator (one line).
  """
  cfg.validate()
  if not cfg.enabled:
    return False
  if cfg.coordinator != AUTO:
    _probe(cfg)
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  try:
    jax.distributed.initialize(
        None if cfg.coordinator == AUTO else cfg.coordinator, cfg.num_processes,
        cfg.process_id, initialization_timeout=cfg.timeout,
        heartbeat_timeout_seconds=cfg.timeout, shutdown_timeout_seconds=cfg.timeout)
  except (RuntimeError, ValueError) as e:  # JaxRuntimeError is a RuntimeError
    why = str(e).splitlines()[0] if str(e) else type(e).__name__
    if cfg.coordinator == AUTO:
      why = f"no SLURM, Open MPI or Kubernetes job detected ({why})"
    raise ValueError(f"--coordinator {cfg.coordinator}: {why}") from None
  if jax.process_count() > 1:
    _Watchdog.start_for(prog)
    _handshake()
  return True


def _handshake() -> None:
  """One collective over every device, with the C++ runtime's stdout sent
  to stderr: gloo announces its connections on stdout, which holds results."""
  sys.stdout.flush()
  saved = os.dup(1)
  try:
    os.dup2(2, 1)
    multihost_utils.sync_global_devices("fedjax_dp: processes joined")
  finally:
    os.dup2(saved, 1)
    os.close(saved)


def is_main() -> bool:
  """Whether this is process 0, the one that writes files and shows progress."""
  return jax.process_index() == 0


def joined() -> bool:
  """Whether this process runs with others (false before :func:`initialize`)."""
  return _Watchdog.current is not None


def _client():
  """The coordination service's client (set by ``jax.distributed.initialize``).

  JAX exposes its key-value store only there (JAX 0.10), which is where a
  failing process leaves word for the others.
  """
  from fedjax_dp import jax_internals  # pylint: disable=import-outside-toplevel
  return jax_internals.distributed_client()


class _Watchdog:
  """Polls the coordination service for another process's failure, then
  stops this one (from a thread: the main one may wait in a collective)."""

  current: "_Watchdog | None" = None

  def __init__(self, prog: str):
    self.prog = prog
    self.halt = threading.Event()
    self.thread = threading.Thread(target=self._run, name="fedjax_dp-watchdog", daemon=True)

  @classmethod
  def start_for(cls, prog: str) -> None:
    cls.current = cls(prog)
    cls.current.thread.start()
    atexit.register(cls.current.halt.set)  # runs before JAX's own shutdown

  def _run(self) -> None:
    while not self.halt.wait(POLL_SECONDS):
      failure = _failure()  # None: none yet (or the service is gone)
      if failure is not None and not self.halt.is_set():
        _stop_for(failure, self.prog)


def _failure() -> str | None:
  """The failure another process posted, if any."""
  try:
    return _client().key_value_try_get(_FAILED)
  except jax.errors.JaxRuntimeError:
    return None


def _stop_for(failure: str, prog: str) -> None:
  """Ends this process after another one's failure (``"CODE MESSAGE"``)."""
  code, message = failure.split(" ", 1)
  print(f"{prog}: error: stopped: {message}", file=sys.stderr, flush=True)
  _exit(int(code))


def _exit(code: int) -> None:
  """Tells the others this process stops and ends it, without JAX's
  shutdown barrier. Process 0 first waits (bounded) until the others said
  they stop, and a moment more: its coordination service must outlive them."""
  client = _client()
  me = jax.process_index()
  try:
    client.key_value_set(_STOPPED + str(me), str(code))
  except jax.errors.JaxRuntimeError:
    pass
  if me == 0:
    deadline = time.monotonic() + STOP_WAIT_SECONDS
    for other in range(1, jax.process_count()):
      try:
        client.blocking_key_value_get(
            _STOPPED + str(other), max(1, int(1000 * (deadline - time.monotonic()))))
      except jax.errors.JaxRuntimeError:  # not in time: stop all the same
        pass
    time.sleep(STOP_GRACE_SECONDS)
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(code)  # pylint: disable=protected-access


def abort(message: str, code: int) -> None:
  """Stops every process of the run when this one fails; returns at once
  when it runs alone.

  The others print ``PROG: error: stopped: process I: MESSAGE`` and exit
  with ``code`` too; print this process's own error before calling.
  """
  watchdog = _Watchdog.current
  if watchdog is None:
    return
  watchdog.halt.set()
  try:
    _client().key_value_set(_FAILED, f"{code} process {jax.process_index()}: {message}")
  except jax.errors.JaxRuntimeError:  # another process failed first
    pass
  _exit(code)


def stop_if_another_failed() -> None:
  """Ends this process as the others do if another one failed first (an
  error here, e.g. a collective whose peer is gone, is then its echo);
  returns otherwise."""
  watchdog = _Watchdog.current
  failure = None if watchdog is None else _failure()
  if failure is not None:
    watchdog.halt.set()
    _stop_for(failure, watchdog.prog)


def broadcast_bytes(content: bytes | None) -> bytes:
  """Process 0's ``content`` on every process (the others pass None)."""
  if jax.process_count() == 1:
    return content or b""
  size = multihost_utils.broadcast_one_to_all(np.int32(len(content or b"")))
  if int(size) == 0:
    return b""
  buffer = (np.frombuffer(content, np.uint8) if is_main()
            else np.zeros(int(size), np.uint8))
  return multihost_utils.broadcast_one_to_all(buffer).tobytes()


def digest(*parts: bytes | np.ndarray) -> bytes:
  """SHA-256 of byte strings and arrays (their dtype, shape and bytes)."""
  h = hashlib.sha256()
  for part in parts:
    if isinstance(part, np.ndarray):
      h.update(f"{part.dtype}{part.shape}".encode())
      part = np.ascontiguousarray(part).tobytes()
    h.update(part)
  return h.digest()


def check_same(what: str, value: bytes) -> None:
  """Checks that every process holds the same ``value`` (e.g. a :func:`digest`).

  Raises:
    ValueError: One line naming the processes that differ from process 0.
  """
  if jax.process_count() == 1:
    return
  mine = np.frombuffer(hashlib.sha256(value).digest(), np.uint8)
  every = np.asarray(multihost_utils.process_allgather(mine))
  differ = [i for i in range(every.shape[0]) if not np.array_equal(every[i], every[0])]
  if differ:
    raise ValueError(f"process(es) {', '.join(map(str, differ))} hold other {what} than "
                     "process 0: launch every process with the same command and data")
