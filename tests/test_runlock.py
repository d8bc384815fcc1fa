"""fedjax_dp.runlock: one process at a time holds a lock; a killed holder frees it."""

import errno
import os
import subprocess
import sys

import pytest

from fedjax_dp import runlock

_HOLD = ("import sys, time\n"
         "from fedjax_dp import runlock\n"
         "with runlock.hold(sys.argv[1]):\n"
         "  print('held', flush=True)\n"
         "  time.sleep(120)\n")


@pytest.fixture
def other_process(tmp_path):
  """A second process holding ``tmp_path / 'x.lock'`` until it is killed."""
  path = tmp_path / "x.lock"
  proc = subprocess.Popen([sys.executable, "-c", _HOLD, str(path)], stdout=subprocess.PIPE,
                          text=True)
  try:
    assert proc.stdout.readline().strip() == "held"
    yield path, proc
  finally:
    proc.kill()
    proc.wait()


def test_a_held_lock_is_refused_to_another_process_until_its_holder_dies(other_process):
  path, proc = other_process
  assert runlock.holder(path) == proc.pid
  with pytest.raises(runlock.Busy) as e:
    with runlock.hold(path):
      pytest.fail("entered a lock another process holds")
  assert e.value.pid == proc.pid and str(proc.pid) in str(e.value)
  proc.kill()  # SIGKILL: no clean-up runs, the kernel releases the lock
  proc.wait()
  assert path.exists() and runlock.holder(path) is None
  with runlock.hold(path):
    assert runlock.holder(path) == os.getpid()
  assert not path.exists()


def test_the_lock_is_exclusive_within_one_process_and_released_after_the_block(tmp_path):
  path = tmp_path / "y.lock"
  assert runlock.holder(path) is None
  with runlock.hold(path):
    assert path.read_text() == f"{os.getpid()}\n"
    with pytest.raises(runlock.Busy):
      with runlock.hold(path):
        pass
  assert not path.exists() and runlock.holder(path) is None
  with pytest.raises(KeyError):  # released on an exception too
    with runlock.hold(path):
      raise KeyError
  with runlock.hold(path):  # free again
    pass


def test_looking_at_a_lock_does_not_take_it_from_a_process_taking_it(tmp_path, monkeypatch):
  """holder() holds a shared lock for an instant; hold() tries again meanwhile."""
  path = tmp_path / "z.lock"
  path.write_text("")
  real_flock, calls = runlock.fcntl.flock, []

  def flock_busy_once(fd, op):
    calls.append(op)
    if len(calls) == 1:  # as if holder() were looking at that instant
      raise BlockingIOError
    return real_flock(fd, op)

  monkeypatch.setattr(runlock.fcntl, "flock", flock_busy_once)
  with runlock.hold(path):
    assert len(calls) == 2


def test_a_file_system_without_flock_runs_unlocked_with_a_warning(tmp_path, monkeypatch):
  path = tmp_path / "n.lock"

  def no_locks(fd, op):
    raise OSError(errno.ENOLCK, "No locks available")

  monkeypatch.setattr(runlock.fcntl, "flock", no_locks)
  ran = []
  with pytest.warns(UserWarning, match=r"cannot lock .*n.lock \(No locks available\)"):
    with runlock.hold(path):
      ran.append(1)
  assert ran == [1] and not path.exists() and runlock.holder(path) is None
