"""Runs the papers' tables' rows and keeps their records (the papers' app).

Each (row, seed) of a table (``fedjax_dp.paper.tables``) is one
``experiments/sweep.py`` run whose record is kept as
``<out>/<table>/<row>.seed<k>.json`` (:func:`run_row`): a kept record is not
run again, the same command kept for another table is reused (its twin), an
interrupted run continues from its checkpoint, and each (row, seed) is held
by the process running it (``fedjax_dp.runlock``), so that several processes
may work through the same tables at once. :func:`kept_records` and
:func:`run_states` read back what a records folder holds.
"""

from __future__ import annotations

import datetime
import glob
import hashlib
import json
import os
import pathlib
import re
import shlex
import time
import warnings
from typing import Callable, NamedTuple

from fedjax_dp import checkpoint, runlock
from fedjax_dp.atomic import atomic_file
from fedjax_dp import interrupts
from fedjax_dp.paper.tables import Row, Table

INTERRUPTED = 130  # sweep.py's exit code after Ctrl-C
TERMINATED = 143  # and after SIGTERM
SEEDS_HEADLINE = (0, 1, 2)
COMMAND = "command.json"  # in a (row, seed)'s sweep folder: the command it runs
REDUCED = ".reduced"


def _suffix(extra: tuple[str, ...], row: Row | None = None) -> str:
  """"" for the paper's setting, ".reduced" for the row's documented reduced
  one, ".<hash>" for runs with other extra sweep flags."""
  if not extra:
    return ""
  if row is not None and row.reduced and extra == row.reduced:
    return REDUCED
  return "." + hashlib.sha256(shlex.join(extra).encode()).hexdigest()[:8]


def record_path(out: str | os.PathLike, table: Table, row: Row, seed: int,
                extra: tuple[str, ...] = ()) -> pathlib.Path:
  """Where the record of one (row, seed) is kept (apart when ``extra``)."""
  return pathlib.Path(out) / table.name / f"{row.slug}.seed{seed}{_suffix(extra, row)}.json"


def work_dir(out: str | os.PathLike, table: Table, row: Row, seed: int,
             extra: tuple[str, ...] = ()) -> pathlib.Path:
  """The sweep's folder of one (row, seed): results and checkpoints while it runs."""
  return (pathlib.Path(out) / ".runs" / table.name / row.slug
          / f"seed{seed}{_suffix(extra, row)}")


def _read_record(path: pathlib.Path) -> tuple[dict | None, str]:
  """(record, "") or (None, why it cannot be read; "" when absent)."""
  try:
    record = json.loads(path.read_text())
  except FileNotFoundError:
    return None, ""
  except (OSError, ValueError) as e:
    return None, str(e)
  if not isinstance(record, dict):
    return None, "not a JSON object"
  return record, ""


def load_record(path: pathlib.Path) -> dict | None:
  """A kept (row, seed) record, or None if absent or (with a warning naming
  the file: the report's figures change without it) unreadable."""
  record, why = _read_record(path)
  if why:
    warnings.warn(f"ignoring unreadable record {path}: {why}")
  return record


def unreadable_records(out: str | os.PathLike) -> list[tuple[pathlib.Path, str]]:
  """(path, why) of every record in ``out`` that cannot be read: the report
  refuses them rather than leave their rows out."""
  found = []
  for path in sorted(pathlib.Path(out).glob("*/*.seed*.json")):
    _, why = _read_record(path)
    if why:
      found.append((path, why))
  return found


def run_row(table: Table, row: Row, seed: int, out: str | os.PathLike,
            sweep: Callable[[list[str]], int], machine: str,
            extra: tuple[str, ...] = (), progress: bool = False) -> dict | None:
  """Runs one (row, seed) through ``sweep`` unless its record is kept.

  The sweep's own resume applies: an interrupted run continues from its last
  checkpoint in :func:`work_dir`. The record is written atomically once the
  run has finished.

  Args:
    table: The table.
    row: One of its rows.
    seed: The seed.
    out: The records folder.
    sweep: ``experiment.main``-like: argv -> exit code.
    machine: One line naming the host (stored with the record).
    extra: Sweep flags appended to the row's (kept under another name, and
      never read by the report).
    progress: Show the sweep's progress bar (the row's command, kept with
      the record, stays the quiet one: the bar changes no result).

  Returns:
    The kept record, or None if the sweep failed (its exit code is not 0).

  Raises:
    fedjax_dp.interrupts.Reported: The sweep was interrupted (exit code
      130, or 143 after SIGTERM), its checkpoint kept and said in its line
      (a KeyboardInterrupt).
    runlock.Busy: Another process runs this (row, seed) now.
  """
  path = record_path(out, table, row, seed, extra)
  work = work_dir(out, table, row, seed, extra)
  kept = _kept_record(path, row, seed, extra)
  if kept is not None:
    return kept
  work.parent.mkdir(parents=True, exist_ok=True)
  with runlock.hold(lock_path(work)):
    # Kept meanwhile by the process that held the lock?
    return (_kept_record(path, row, seed, extra) or _reuse_twin(out, table, row, seed, extra)
            or _run(table, row, seed, path, work, sweep, machine, extra, progress))


def _reuse_twin(out: str | os.PathLike, table: Table, row: Row, seed: int,
                extra: tuple[str, ...]) -> dict | None:
  """Keeps, for this row, the record of the same command kept for another
  table (e.g. FL-STD of UAI Table 1 and of thesis Table 4.2): the run is
  deterministic, so running it again would give the same numbers. The copy
  names its origin (``same_run_as``) and carries this row's paper cell; its
  hours are counted once in the report."""
  found = _twin_of(out, table, row, seed, extra)
  if found is None:
    return None
  path, twin = found
  kept = dict(twin, table=table.name, row=row.name, slug=row.slug,
              paper=None if row.paper is None else row.paper._asdict(),
              paper_source=row.source, same_run_as=f"{path.parent.name}/{path.name}")
  _write_record(record_path(out, table, row, seed, extra), kept)
  return kept


def _twin_of(out: str | os.PathLike, table: Table, row: Row, seed: int,
             extra: tuple[str, ...]) -> tuple[pathlib.Path, dict] | None:
  """The record, and its path, of another table's run of the same command
  as the (row, seed)'s; None if none is kept."""
  argv = row.argv(seed, "OUT", extra)
  for path in sorted(pathlib.Path(out).glob(f"*/*.seed{seed}*.json")):
    if path.parent.name == table.name:
      continue
    twin = load_record(path)
    if twin is not None and twin.get("argv") == argv and "same_run_as" not in twin:
      return path, twin
  return None


def is_kept(out: str | os.PathLike, table: Table, row: Row, seed: int,
            extra: tuple[str, ...] = ()) -> bool:
  """Whether :func:`run_row` would return the (row, seed)'s record without a
  run: it is kept, or another table's run of the same command is."""
  return (_kept_record(record_path(out, table, row, seed, extra), row, seed, extra) is not None
          or _twin_of(out, table, row, seed, extra) is not None)


def _write_record(path: pathlib.Path, kept: dict) -> None:
  """Writes a (row, seed) record atomically."""
  path.parent.mkdir(parents=True, exist_ok=True)
  with atomic_file(path, "w") as f:
    f.write(json.dumps(kept, indent=1, sort_keys=True) + "\n")


def _kept_record(path: pathlib.Path, row: Row, seed: int,
                 extra: tuple[str, ...]) -> dict | None:
  """The record at ``path`` if it is the row's as defined now, else None."""
  kept = load_record(path)
  return kept if kept is not None and kept.get("argv") == row.argv(seed, "OUT", extra) else None


def lock_path(work: pathlib.Path) -> pathlib.Path:
  """The lock held by the process running one (row, seed) (beside its sweep's
  folder, which the sweep locks for itself)."""
  return work.with_name(work.name + ".lock")


def _run(table: Table, row: Row, seed: int, path: pathlib.Path, work: pathlib.Path,
         sweep: Callable[[list[str]], int], machine: str, extra: tuple[str, ...],
         progress: bool) -> dict | None:
  """:func:`run_row` once the (row, seed) is held: runs it and keeps its record."""
  started = time.time()
  argv = row.argv(seed, work, extra)
  # The command its checkpoints belong to, for list (an older row definition's
  # checkpoint is not continued: the sweep's fingerprint differs).
  work.mkdir(parents=True, exist_ok=True)
  with atomic_file(work / COMMAND, "w") as f:
    json.dump({"argv": row.argv(seed, "OUT", extra)}, f)
  # The work folder is this (row, seed)'s own: a sweep of an older definition
  # of the row left there (its records, its checkpoint) is replaced (its kept
  # record is the run's record).
  argv = [*argv, "--overwrite"]
  code = sweep([a for a in argv if a != "--quiet"] if progress else argv)
  if code in (INTERRUPTED, TERMINATED):
    raise interrupts.Reported(code)
  if code != 0:
    return None
  results = json.loads((work / "results.json").read_text())
  kept = {
      "table": table.name, "row": row.name, "slug": row.slug, "seed": seed,
      "argv": row.argv(seed, "OUT", extra),
      "command": "python experiments/sweep.py " + shlex.join(row.argv(seed, "OUT", extra)),
      "paper": None if row.paper is None else row.paper._asdict(),
      "paper_source": row.source,
      "machine": machine,
      "finished": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
      "seconds_this_session": round(time.time() - started, 1),
      "sweep_config": results["config"],
      "record": results["runs"][0],
  }
  _write_record(path, kept)
  return kept


def _kept(out: str | os.PathLike, table: Table, row: Row, suffix: str,
          extra: tuple[str, ...]) -> list[dict]:
  """The row's kept records of one setting ("" or REDUCED), by seed, each
  marked ``reduced``; records of an older definition of the row are left out."""
  records = []
  for path in pathlib.Path(out, table.name).glob(f"{glob.escape(row.slug)}.seed*.json"):
    match = re.fullmatch(re.escape(row.slug) + r"\.seed(\d+)" + re.escape(suffix) + r"\.json",
                         path.name)
    record = _kept_record(path, row, int(match[1]), extra) if match else None
    if record is not None:
      records.append(dict(record, reduced=bool(suffix)))
  return sorted(records, key=lambda r: r["seed"])


def _settings(row: Row) -> list[tuple[str, tuple[str, ...]]]:
  """(record suffix, extra flags) of the row's reported settings: the paper's,
  then the documented reduced one."""
  return [("", ())] + ([(REDUCED, row.reduced)] if row.reduced else [])


def record_index(out: str | os.PathLike) -> dict[tuple[str, ...], tuple[pathlib.Path, dict]]:
  """Every record kept in ``out`` from a run of its own (not a twin's copy),
  by its command (``argv``), with its path: what :func:`kept_records` looks
  up a row's twins in."""
  index = {}
  for path in sorted(pathlib.Path(out).glob("*/*.seed*.json")):
    record = load_record(path)
    if record is not None and "argv" in record and "same_run_as" not in record:
      index.setdefault(tuple(record["argv"]), (path, record))
  return index


def _twin_records(index: dict[tuple[str, ...], tuple[pathlib.Path, dict]], table: Table,
                  row: Row, suffix: str, extra: tuple[str, ...]) -> list[dict]:
  """The row's records of one setting kept for other tables' rows of the same
  command (``index``: :func:`record_index`), as :func:`_reuse_twin` would keep
  them for this row, by seed; nothing is written."""
  seeds = {record.get("seed") for _, record in index.values()}
  records = []
  for seed in sorted(s for s in seeds if isinstance(s, int)):
    found = index.get(tuple(row.argv(seed, "OUT", extra)))
    if found is None or found[0].parent.name == table.name:
      continue
    path, twin = found
    records.append(dict(twin, table=table.name, row=row.name, slug=row.slug,
                        paper=None if row.paper is None else row.paper._asdict(),
                        paper_source=row.source,
                        same_run_as=f"{path.parent.name}/{path.name}",
                        reduced=bool(suffix)))
  return records


def kept_records(out: str | os.PathLike, table: Table,
                 index: dict[tuple[str, ...], tuple[pathlib.Path, dict]] | None = None
                 ) -> dict[str, list[dict]]:
  """The kept records of a table in the paper's setting, by row slug, by seed.

  A record whose command differs from the row's (an older definition of the
  row, or one run with extra flags) is left out. A row with records in the
  paper's setting shows those; else its reduced ones. A row without a record
  of its own shows those of the same command kept for another table (its
  twins, marked ``same_run_as``, as :func:`run_row` would keep them: thesis
  Table 4.4's rows that are UAI Table 1's commands), read from ``index``
  (:func:`record_index`; built here when needed and not given).
  """
  found: dict[str, list[dict]] = {}
  for row in table.rows:
    for suffix, extra in _settings(row):
      records = _kept(out, table, row, suffix, extra)
      if not records:
        if index is None:
          index = record_index(out)
        records = _twin_records(index, table, row, suffix, extra)
      if records:
        found[row.slug] = records
        break
  return found


class RunState(NamedTuple):
  """One (row, seed) run found in a records folder, finished or not.

  Attributes:
    seed: The seed.
    reduced: Run in the row's reduced setting (else the paper's).
    finished: Its record is kept; else the checkpoint of a run in progress
      or interrupted, which the same command continues (if the row's
      setting has not changed since).
    round: Rounds trained: the record's, or the checkpoint's last (0 for
      a run started that has not saved one yet).
    seconds: Wall seconds of training so far.
    running: The pid of the process running it now (0 if unreadable), or
      None when no process holds it: finished, or interrupted.
    same_run_as: For a record kept from another table's run of the same
      command, that record (``table/file``); else "".
    older: A checkpoint of the row's command as it was defined before (it
      is replaced, not continued, when the row runs).
    machine: A record's machine line (``host_devices.machine``); "" for a
      checkpoint, whose machine is not known.
    finished_at: When a record was kept (its ``finished`` time, ISO 8601);
      "" for a checkpoint.
  """

  seed: int
  reduced: bool
  finished: bool
  round: int
  seconds: float
  running: int | None = None
  same_run_as: str = ""
  older: bool = False
  machine: str = ""
  finished_at: str = ""


def run_states(out: str | os.PathLike, table: Table, row: Row,
               index: dict[tuple[str, ...], tuple[pathlib.Path, dict]] | None = None
               ) -> list[RunState]:
  """The row's kept records and checkpoints in ``out`` (``reproduce.py list``).

  A setting without a record of the row's own shows those of the same command
  kept for another table (its twins, ``same_run_as``; as :func:`kept_records`,
  from ``index``, built here when needed and not given).
  """
  states = []
  for suffix, extra in _settings(row):
    kept = _kept(out, table, row, suffix, extra)
    if not kept:
      if index is None:
        index = record_index(out)
      kept = _twin_records(index, table, row, suffix, extra)
    done = {r["seed"] for r in kept}
    states += [RunState(r["seed"], bool(suffix), True, r["record"]["rounds"],
                        r["record"]["seconds"], same_run_as=r.get("same_run_as", ""),
                        machine=r.get("machine", ""), finished_at=r.get("finished", ""))
               for r in kept]
    runs = pathlib.Path(out, ".runs", table.name, row.slug)
    # A run holds its lock from the start, its folder exists once it trains.
    for name in sorted({p.name.removesuffix(".lock") for p in runs.glob("seed*")}):
      match = re.fullmatch(r"seed(\d+)" + re.escape(suffix), name)
      if not match or int(match[1]) in done:
        continue
      folder = runs / name
      pid = runlock.holder(lock_path(folder))
      metas = [m for m in map(checkpoint.peek, sorted(folder.glob(".checkpoints/*.npz")))
               if m is not None]
      if pid is not None and not metas:  # started; no evaluation saved yet
        metas = [{"round": 0}]
      command = load_record(folder / COMMAND)
      older = command is not None and command.get("argv") != row.argv(int(match[1]), "OUT",
                                                                       extra)
      states += [RunState(int(match[1]), bool(suffix), False, meta["round"],
                          float(meta.get("seconds", 0.0)), pid, older=older)
                 for meta in metas]
  return sorted(states, key=lambda s: (s.reduced, s.seed))
