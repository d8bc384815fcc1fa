"""Checkpoints of a run at its evaluations, to resume with the same numbers.

A round's randomness derives from the run key and the round number
(``fedjax_dp.keys``), so a run continued from the server state, history and
counters saved after round t computes exactly what the uninterrupted run
computes. :func:`save` writes them atomically (a temporary file renamed
into place) after every evaluation; :func:`load` returns them only if the
file was written by this version for the same run (its fingerprint) and
holds a state of the same structure, shapes and dtypes, and refuses
(:class:`Mismatch`) a file of another run or version rather than let the
run overwrite it. :func:`verify` checks a file's run without its arrays.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pathlib
import warnings
import zipfile
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp.atomic import atomic_file
from fedjax_dp.compression import universal_coding

#: Bump when the saved content changes meaning (2: the state holds the round
#: features' states, the counters lost the dropouts').
VERSION = 2


class Saved(NamedTuple):
  """What a checkpoint holds.

  Attributes:
    round: The last round trained (the run continues at ``round + 1``).
    state: The server state after it (weights and scheme state).
    history: The evaluations so far.
    counters: The train loop's counters (a tuple of ints).
    coded_sizes: Measured coded stream sizes so far
      (``universal_coding.CodedSize``, CDP-LQ's).
    seconds: Wall seconds spent training up to ``round``, over every process
      that trained this run, less the spans a process was stopped
      (``fedjax_dp.running_clock``; 0 in checkpoints written before it was
      kept).
    noise_multiplier: The sigma the rounds ran at (a run of a target
      epsilon calibrates it at every start: a resume at another sigma is
      another run); None: not kept.
    devices: The devices the rounds' sums were split over (a resume on
      another count sums in another order); None: not kept.
  """

  round: int
  state: Any
  history: list
  counters: tuple
  coded_sizes: list
  seconds: float = 0.0
  noise_multiplier: float | None = None
  devices: int | None = None


class Mismatch(ValueError):
  """A checkpoint file that is not the run's: another run's, or another
  version's.

  Attributes:
    path: The file.
    reason: What it is, to follow "a checkpoint": e.g. "of another run
      (other settings, data or model)".
  """

  def __init__(self, path: str | os.PathLike, reason: str):
    super().__init__(f"{path} holds a checkpoint {reason}")
    self.path = pathlib.Path(path)
    self.reason = reason


# What np.load raises for a file that is not a checkpoint: garbage (ValueError),
# a truncated zip (BadZipFile), an empty file (EOFError), a missing member.
_UNREADABLE = (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile)


def fingerprint(*parts: Any) -> str:
  """A short hash of JSON-able parts (the run's settings) identifying a run."""
  text = json.dumps([VERSION, *parts], sort_keys=True, default=str)
  return hashlib.sha256(text.encode()).hexdigest()[:32]


def save(path: str | os.PathLike, key: str, saved: Saved) -> None:
  """Writes ``saved`` to ``path`` atomically, tagged with the run's ``key``."""
  path = pathlib.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  leaves = jax.tree_util.tree_leaves(saved.state)
  meta = json.dumps({"version": VERSION, "key": key, "round": saved.round,
                     "history": saved.history, "counters": list(saved.counters),
                     "coded_sizes": saved.coded_sizes, "seconds": saved.seconds,
                     "noise_multiplier": saved.noise_multiplier,
                     "devices": saved.devices})
  arrays = {f"leaf{i}": np.asarray(leaf) for i, leaf in enumerate(leaves)}
  with atomic_file(path) as f:
    np.savez(f, meta=np.array(meta), **arrays)


def peek(path: str | os.PathLike) -> dict | None:
  """A checkpoint's metadata (round, seconds, history, ...) without its
  arrays, or None if the file is unreadable; its run is not checked."""
  try:
    with np.load(path) as f:
      return json.loads(str(f["meta"]))
  except _UNREADABLE:
    return None


def _read(path: pathlib.Path, content: bytes | None, arrays: bool,
          then: str = "") -> tuple[dict, list] | None:
  """A checkpoint's metadata and (with ``arrays``) its leaves; None, with a
  warning (``then``: what follows), if the file is unreadable."""
  try:
    with np.load(path if content is None else io.BytesIO(content)) as f:
      meta = json.loads(str(f["meta"]))
      leaves = [f[f"leaf{i}"] for i in range(len(f.files) - 1)] if arrays else []
  except _UNREADABLE as e:
    warnings.warn(f"ignoring unreadable checkpoint {path}: {e}{then}")
    return None
  if not isinstance(meta, dict):
    warnings.warn(f"ignoring unreadable checkpoint {path}: its metadata is not an "
                  f"object{then}")
    return None
  return meta, leaves


def _check_run(path: pathlib.Path, meta: dict, key: str) -> None:
  """Raises :class:`Mismatch` unless ``meta`` is of this version and run."""
  if meta.get("version") != VERSION:
    raise Mismatch(path, f"of another version of fedjax_dp (format {meta.get('version')}; "
                         f"this version reads format {VERSION})")
  if meta.get("key") != key:
    raise Mismatch(path, "of another run (other settings, data or model)")


def verify(path: str | os.PathLike, key: str) -> dict | None:
  """The metadata of the checkpoint at ``path`` if it is the run's.

  Args:
    path: The checkpoint file.
    key: The run's :func:`fingerprint`.

  Returns:
    Its metadata (``round``, ``seconds``, ``history``, ...); None when there
    is no file, or (with a warning) an unreadable one, which the run
    replaces.

  Raises:
    Mismatch: The file holds another run's checkpoint, or another version's.
  """
  path = pathlib.Path(path)
  if not path.is_file():
    return None
  found = _read(path, None, arrays=False)
  if found is None:
    return None
  _check_run(path, found[0], key)
  return found[0]


def load(path: str | os.PathLike, key: str, like_state: Any, *,
         content: bytes | None = None) -> Saved | None:
  """The checkpoint at ``path``, if there is one (None otherwise).

  Args:
    path: The checkpoint file (missing: None).
    key: The run's :func:`fingerprint`.
    like_state: A state of the run (its initial one): the saved leaves must
      match its tree's number of leaves, shapes and dtypes.
    content: The file's bytes, read elsewhere (process 0 of a multi-process
      run reads them for every process); None: read ``path``.

  Returns:
    What the checkpoint holds; None when there is no file, or (with a
    warning) an unreadable one.

  Raises:
    Mismatch: The file holds another run's checkpoint, or one of another
      version (another format, or a state of another structure).
  """
  path = pathlib.Path(path)
  if content is None and not path.is_file():
    return None
  # It holds nothing to resume (checkpoints are written whole: atomic_file).
  found = _read(path, content, arrays=True, then="; the run starts at round 1 and replaces it")
  if found is None:
    return None
  meta, leaves = found
  _check_run(path, meta, key)
  like, treedef = jax.tree_util.tree_flatten(like_state)
  if len(like) != len(leaves) or any(
      np.shape(a) != np.shape(b) or np.asarray(a).dtype != b.dtype
      for a, b in zip(like, leaves)):
    raise Mismatch(path, "of another run or version of fedjax_dp (its state's structure differs)")
  state = jax.tree_util.tree_unflatten(treedef, [jnp.asarray(leaf) for leaf in leaves])
  # JSON kept each CodedSize as a list: the tuples again, as the record reads them.
  coded = [universal_coding.CodedSize(*size) for size in meta["coded_sizes"]]
  return Saved(meta["round"], state, meta["history"], tuple(meta["counters"]), coded,
               float(meta.get("seconds", 0.0)), meta.get("noise_multiplier"),
               meta.get("devices"))
