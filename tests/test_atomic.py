"""fedjax_dp.atomic: files replaced whole, with the mode the user's umask gives."""

import os
import stat
import subprocess
import sys

import pytest

from fedjax_dp import atomic

# A fresh interpreter started under the umask: atomic reads it once, at import.
_WRITE = """
import sys
from fedjax_dp.atomic import atomic_file
with atomic_file(sys.argv[1], "w") as f:
  f.write("{}")
"""


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_a_written_file_gets_the_mode_of_the_umask(tmp_path, umask, mode):
  """Not tempfile.mkstemp's 0o600: under the usual umask 0o022 results are
  readable by others, as a file opened with open(path, "w") would be; a
  private umask keeps them private. Replacing a file gives the same mode."""
  path = tmp_path / "results.json"
  for _ in range(2):  # written, then replaced
    subprocess.run([sys.executable, "-c", _WRITE, str(path)], check=True, umask=umask,
                   cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert stat.S_IMODE(path.stat().st_mode) == mode
    assert path.read_text() == "{}"
  assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]


def test_the_umask_is_read_without_changing_it():
  before = os.umask(0o027)
  try:
    assert atomic._umask() == 0o027  # pylint: disable=protected-access
    assert os.umask(0o027) == 0o027  # still the process's umask
  finally:
    os.umask(before)


def test_a_failed_write_leaves_the_old_file(tmp_path):
  path = tmp_path / "results.json"
  path.write_text("old")
  with pytest.raises(RuntimeError):
    with atomic.atomic_file(path, "w") as f:
      f.write("half")
      raise RuntimeError("stopped")
  assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == [
      "results.json"]
