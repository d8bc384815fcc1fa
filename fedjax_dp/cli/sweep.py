"""The sweep behind ``experiments/sweep.py``: plan, load, run, report.

Defaults are the UAI 2021 Fashion-MNIST setting (Table 5); ``--dataset``
picks MNIST or the medical-synth stand-in, whose base setting, model, clip
norms and selection metric follow it (``fedjax_dp.datasets``). Schemes whose
papers used another setting (FL-SIGN: thesis Table 8.1; FL-SIGN-DP: Table
8.2; signSGD: all clients, one batch; CDP-LQ; Fed-SMP) get it as their
papers' preset (``fedjax_dp.paper.presets``; a family of research code's own
declares its own, ``Family.presets``): for each of --rounds, --num-clients,
--samples-per-client, --clients-per-round, --local-steps, --batch-size and
--lr the value is the flag if given, else the scheme's preset, else the UAI
default. The flags are read once, by :func:`~fedjax_dp.cli.resolve.resolve`,
into a :class:`~fedjax_dp.cli.resolve.Request` that every step below reads;
this module names no scheme class.

Every input is checked before any work starts; a bad one ends the program
with a one-line message and exit code 2, and nothing is written. The steps
are public for scripts built on the sweep: :func:`build_parser`,
:func:`resolve`, :func:`load_data`, :func:`execute`, :func:`write`.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import pathlib
import sys
import tempfile
import threading
import traceback
from typing import Callable, NamedTuple

import jax
import numpy as np
from tqdm import tqdm

from fedjax_dp import checkpoint as checkpoint_lib
from fedjax_dp import datasets, distributed, features, keys, plots, runlock, simulation
from fedjax_dp.cli import errors as cli_errors
from fedjax_dp import interrupts
from fedjax_dp.cli import resolve as resolve_lib
from fedjax_dp.cli import results as report
from fedjax_dp.cli.parser import (DEFAULT_SCHEMES, PRESET_FLAGS, PROG, UsageError,
                                  build_parser)
from fedjax_dp.cli.resolve import (PlannedRun, Request, resolve, scheme_setting,
                                   setting_source)
from fedjax_dp.data import DataError
from fedjax_dp.errors import ConfigError
from fedjax_dp.paper import results as paper_results
from fedjax_dp.simulation.loop import checkpoint_key

__all__ = ["DEFAULT_SCHEMES", "PRESET_FLAGS", "PROCESS_FLAGS", "Data", "Interrupted",
           "PlannedRun", "Request", "UsageError", "build_parser", "check_checkpoints",
           "check_out", "check_records", "claim_out", "execute", "finished_runs",
           "interrupted_line", "load_data", "main", "resolve", "run_label",
           "saved_round", "scheme_setting", "setting_source", "write"]

# Flags that spread a run over processes without changing its numbers.
PROCESS_FLAGS = ("coordinator", "num_processes", "process_id", "process_timeout")
# Flags each process may set for itself: its id, and what process 0 alone uses.
_OWN_FLAGS = ("process_id", "process_timeout", "out", "quiet", "plot")
# Flags that change how the records are shown, where they are written or how
# the runs are spread over processes, not what they hold.
_NOT_RESULTS = ("quiet", "plot", "out", *PROCESS_FLAGS)


class Data(NamedTuple):
  """The data of a sweep's runs: one federation (``datasets.Federation``) per shape."""

  federations: dict

  def of(self, run: PlannedRun) -> datasets.Federation:
    """The federation of one run."""
    return self.federations[_shape(run)]


def _shape(run: PlannedRun) -> tuple[int, int, int]:
  return (run.setting["num_clients"], run.setting["samples_per_client"],
          run.scheme.traits.public_holdout)


def load_data(request: Request, runs: list[PlannedRun]) -> Data:
  """Loads (once per shape) the federations the runs need.

  Raises:
    ValueError: A split the data does not allow (one line).
    DataError: Missing or corrupt data files.
  """
  dataset, values = request.dataset, request.values
  medical = dataset.split_by == "hospital"
  federations, loaded = {}, {}
  for run in runs:
    shape = _shape(run)
    if shape in federations:
      continue
    # Where every scheme's public set is held out (svhn, shakespeare, ...), a
    # top_k hold-out of the public set's size splits the data the same way:
    # one federation in memory, not two.
    held = 0 if medical else shape[2] or (values["public_size"] if dataset.holds_out_public
                                          else 0)
    if (shape[0], shape[1], held) not in loaded:
      try:
        loaded[shape[0], shape[1], held] = datasets.load(
            dataset, shape[0], shape[1], request.seed, partition=request.partition,
            public_size=values["public_size"], holdout=0 if medical else shape[2],
            test_size=values["test_size"])
      except ConfigError as e:  # the library names its field; the user typed a flag
        raise cli_errors.flag_error(e) from None
    federations[shape] = loaded[shape[0], shape[1], held]
    try:  # the data as the run's features leave it (a backdoor's), refused here, in one line
      features.client_data(run.config, federations[shape].data,
                           keys.run_key(run.config.training.seed))
    except ConfigError as e:
      raise cli_errors.flag_error(e) from None
  return Data(federations)


def run_label(run: PlannedRun) -> str:
  """A run as the sweep's lines name it: ``FL-TOP-DP r=0.005``."""
  return f"{run.scheme.name} r={run.ratio:g}"


def saved_round(request: Request, run: PlannedRun, fed: datasets.Federation,
                prog: str = PROG) -> int | None:
  """The round that the run's checkpoint in ``--out`` holds, which the run
  continues after; None when there is none. Process 0 alone reads it (the
  others: None).

  A checkpoint of another run (a command with other settings, data or
  model for this (scheme, ratio) in the same ``--out``) or of another
  version of fedjax_dp is never continued, nor silently overwritten: it is
  refused, unless ``--overwrite``, which deletes it (saying so).

  Raises:
    ValueError: Another run's or version's checkpoint (one line naming the
      file and the ways out).
  """
  path = request.checkpoint_path(run)
  if not distributed.is_main() or not path.is_file():
    return None
  key = checkpoint_key(request.model, run.scheme, fed.data, fed.test, fed.public, run.config)
  try:
    meta = checkpoint_lib.verify(path, key)
  except checkpoint_lib.Mismatch as e:
    _drop_checkpoint(request, run, e, prog)
    return None
  return None if meta is None else int(meta["round"])


class CheckpointRefused(ValueError):
  """A checkpoint in ``--out`` of another run or version, kept (one line)."""


def _drop_checkpoint(request: Request, run: PlannedRun, mismatch: checkpoint_lib.Mismatch,
                     prog: str) -> None:
  """Deletes the run's checkpoint of another run or version (``--overwrite``,
  saying so); without ``--overwrite`` refuses it in one line
  (:class:`CheckpointRefused`)."""
  path = request.checkpoint_path(run)
  if request.values["overwrite"]:
    path.unlink(missing_ok=True)
    print(f"{prog}: deleted {path}, a checkpoint {mismatch.reason} (--overwrite)",
          file=sys.stderr, flush=True)
    return
  raise CheckpointRefused(f"{path} holds a checkpoint {mismatch.reason}, not of "
                          f"{run_label(run)} as this command runs it: delete it to start that "
                          "run afresh, choose another --out, or add --overwrite") from None


def check_checkpoints(request: Request, runs: list[PlannedRun], data: Data) -> None:
  """Checks the runs' checkpoints in ``--out`` before any run
  (:func:`saved_round`): another run's or version's stops the sweep before
  any work.

  Raises:
    ValueError: One line, as :func:`saved_round`.
  """
  for run in runs:
    saved_round(request, run, data.of(run))


class Interrupted(KeyboardInterrupt):
  """Ctrl-C or SIGTERM during a run of the sweep (:func:`execute`).

  Attributes:
    run: The run in progress.
    checkpoint: Its checkpoint file (:func:`checkpoint_path`), kept.
    reached: The last round it trained (0: none yet).
    code: The exit code (``fedjax_dp.interrupts``: 130, or 143 after
      SIGTERM).
  """

  def __init__(self, run: PlannedRun, checkpoint: pathlib.Path, reached: int, code: int):
    super().__init__(run_label(run))
    self.run, self.checkpoint, self.reached, self.code = run, checkpoint, reached, code


def interrupted_line(prog: str, out: str, error: BaseException, finished: int | None) -> str:
  """The one line a sweep prints when Ctrl-C or SIGTERM stops it.

  It names the run in progress and the last round it trained, the
  checkpoint kept and the round it holds (read back from the file: the
  round the same command continues after) and the finished runs, or says
  that nothing was written.

  Args:
    prog: The command's name.
    out: The folder of the finished runs.
    error: The interruption; an :class:`Interrupted` names the run.
    finished: The finished runs written to ``out`` (None: an unknown number,
      maybe none).
  """
  where, kept = "", []
  if isinstance(error, Interrupted):
    meta = checkpoint_lib.peek(error.checkpoint) if error.checkpoint.is_file() else None
    reached = max(error.reached, 0 if meta is None else meta["round"])
    where = f" in {run_label(error.run)} before its first round ended"
    if reached:
      where = f" in {run_label(error.run)} after round {reached} of " \
              f"{error.run.setting['rounds']}"
      if meta is None:
        where += ", before its first checkpoint (one is saved at each evaluation)"
    if meta is not None:
      kept.append(f"checkpoint {error.checkpoint} (round {meta['round']}) kept")
  if finished is None:
    kept.append(f"the finished runs are in {out}")
  elif finished:
    kept.append(f"the {finished} finished runs are in {out}")
  if not kept:
    return f"{prog}: interrupted{where}; nothing written"
  return f"{prog}: interrupted{where}; {' and '.join(kept)}: run the same command to resume"


class _Reached:
  """The last round a run trained, as ``on_round`` tells it (a runtime
  thread's call), passed on to the caller's ``on_round``."""

  def __init__(self, on_round: Callable[[int], None] | None):
    self.round, self.on_round = 0, on_round

  def __call__(self, t: int) -> None:
    self.round = max(self.round, t)
    if self.on_round is not None:
      self.on_round(t)


def execute(request: Request, runs: list[PlannedRun], data: Data,
            progress: Callable[[int], None] | None = None, *,
            on_round: Callable[[int], None] | None = None, prog: str = PROG) -> list[dict]:
  """Runs every planned run; returns their records (with the sweep's fields).

  Each run saves its progress after every evaluation
  (:func:`checkpoint_path`) and, started again with the same settings,
  continues from there with the same numbers, saying so in one line on
  stderr (process 0, ``prog: resuming ...``); another run's checkpoint is
  refused (:func:`saved_round`). ``progress`` and ``on_round`` are
  ``simulation.run``'s: after each evaluation, and as each round ends.

  Raises:
    Interrupted: Ctrl-C or SIGTERM during a run (its checkpoint kept).
    ValueError: Another run's or version's checkpoint in ``--out``.
  """
  dataset = request.dataset
  records = []
  for run in runs:
    fed, saved, reached = data.of(run), request.checkpoint_path(run), _Reached(on_round)
    try:
      start = saved_round(request, run, fed, prog)
      if start is not None:
        reached(start)
        rounds = run.setting["rounds"]
        # tqdm.write: on a line of its own above the sweep's progress bar.
        tqdm.write(f"{prog}: resuming {run_label(run)} at round {start + 1} of {rounds} "
                   f"from its checkpoint {saved} (round {start})" if start < rounds else
                   f"{prog}: finishing the record of {run_label(run)} from its checkpoint "
                   f"{saved} (all {rounds} rounds)", file=sys.stderr)
        sys.stderr.flush()
      train = functools.partial(simulation.run, request.model, run.scheme, fed.data, fed.test,
                                fed.public, run.config if run.plan is None else run.plan,
                                progress=progress, checkpoint=saved, on_round=reached)
      try:
        record = train()
      except checkpoint_lib.Mismatch as e:  # its state's structure: known once set up
        _drop_checkpoint(request, run, e, prog)
        reached.round = 0  # afresh: nothing of the dropped checkpoint is kept
        record = train()
    except KeyboardInterrupt as e:
      raise Interrupted(run, saved, reached.round, interrupts.exit_code(e)) from e
    if distributed.is_main():
      with contextlib.suppress(OSError):  # the folder, once no run has a checkpoint
        saved.parent.rmdir()
    record["processes"] = jax.process_count()
    record["dataset"] = dataset.label
    record["data_summary"] = fed.summary
    if record["clip_source"] == "given":  # the run's S: named by the command line
      record["clip_source"] = run.clip_source
    record["paper_source"] = paper_results.paper_source(run.scheme.name, run.ratio,
                                                        dataset.name, run.setting)
    record["paper_upstream_bits"] = paper_results.paper_upstream_bits(
        run.scheme.name, record["epsilon_final"])
    record["setting_source"] = setting_source(run.scheme, dataset, run.setting)
    record.update({k: run.setting[k] for k in ("samples_per_client", "local_steps",
                                                "batch_size", "lr", "local_optimizer")})
    records.append(record)
  return records


def _differences(theirs: dict, mine: dict) -> list[str]:
  """The flags whose values differ between two stored configs, results aside."""
  keys = sorted((set(theirs) | set(mine)) - set(_NOT_RESULTS))
  return ["--" + k.replace("_", "-") for k in keys if theirs.get(k) != mine.get(k)]


def write(request: Request, records: list[dict], out: str | None = None) -> None:
  """results.json, results.csv and results.md in ``out`` (default ``--out``);
  with ``--plot`` the plots too (``fedjax_dp.plots``)."""
  report.write_results(out or request.out, records, request.config())
  if request.values["plot"]:
    plots.plot_records(records, out or request.out)


def finished_runs(request: Request) -> dict[tuple[str, float], dict]:
  """The records already in ``--out`` from a sweep with the same settings.

  Keyed by (scheme, ratio); empty when ``--out`` holds no results.json or
  one written with other settings (how results are shown, the folder's
  spelling and how the run is spread over processes aside).
  """
  path = pathlib.Path(request.out) / "results.json"
  try:
    saved = json.loads(path.read_text())
    if _differences(saved.get("config", {}), request.config()):
      return {}
    return {(r["scheme"], r["ratio"]): r for r in saved.get("runs", [])}
  except (OSError, ValueError, AttributeError, KeyError, TypeError):
    return {}


def check_records(request: Request) -> None:
  """Refuses an ``--out`` that holds another sweep's records, unless
  ``--overwrite``.

  A folder holds one sweep's records: the same command run again keeps its
  finished runs (:func:`finished_runs`), while a sweep with other settings
  would replace them as its first run finishes. Such a sweep stops here,
  before any work, naming the settings that differ; with ``--overwrite`` it
  goes on and replaces them. So does a sweep that does not run the
  interrupted run whose checkpoint ``--out`` holds (that run could not be
  resumed once this sweep's records are there). A checkpoint of one of this
  sweep's runs but of other settings is never continued
  (:func:`check_checkpoints`).

  Raises:
    ValueError: One line naming --out, the differing flags or the checkpoint,
      and the ways out.
  """
  if request.values["overwrite"]:
    return
  out = request.out
  mine = {request.checkpoint_path(run).name for run in request.runs}
  theirs = sorted(p.name for p in (pathlib.Path(out) / resolve_lib.CHECKPOINTS).glob("*.npz")
                  if p.name not in mine)
  if theirs:
    raise ValueError(f"--out {out} holds the checkpoint of an interrupted run this sweep "
                     f"does not run (.checkpoints/{theirs[0]}): run its command again to "
                     "finish it, choose another --out, or add --overwrite")
  path = pathlib.Path(out) / "results.json"
  if not path.exists():
    return
  ways = "choose another --out, or add --overwrite to replace them"
  try:
    saved = json.loads(path.read_text())
    theirs = saved["config"]
    if not isinstance(theirs, dict):
      raise TypeError("its config is not an object")
  except OSError as e:
    raise ValueError(f"--out {out}: results.json cannot be read ({e.strerror or e}): "
                     f"{ways}") from None
  except (ValueError, KeyError, TypeError):
    raise ValueError(f"--out {out} holds a results.json that is not a sweep's "
                     f"records: {ways}") from None
  differ = _differences(theirs, request.config())
  if differ:
    shown = ", ".join(differ[:6]) + (f" and {len(differ) - 6} more" if len(differ) > 6 else "")
    raise ValueError(f"--out {out} holds the records of another sweep (other {shown}): "
                     f"{ways}")


def check_out(out: str) -> None:
  """Checks that results can be written to ``out``, leaving nothing behind.

  Creates the folder (and missing parents), writes and deletes a probe file,
  then removes the folders it created: an unwritable ``--out`` stops the
  sweep before any training instead of after it.

  Raises:
    ValueError: One line naming --out and the reason.
  """
  path = pathlib.Path(out).expanduser().absolute()
  missing = [p for p in (path, *path.parents) if not p.exists()]
  try:
    path.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile(dir=path):
      pass
  except OSError as e:
    raise ValueError(f"--out {out} cannot be written: {e.strerror or e}") from None
  finally:
    _remove_if_empty(missing)
  # What the sweep writes there, found of the other kind: it failed after training.
  folders = [name for name in (*report.FILES, runlock.NAME) if (path / name).is_dir()]
  folders += sorted(p.name for p in path.glob("*.png") if p.is_dir())
  if folders:
    raise ValueError(f"--out {out} holds a folder {folders[0]} where the sweep writes a file")
  checkpoints = path / resolve_lib.CHECKPOINTS
  if checkpoints.exists() and not checkpoints.is_dir():
    raise ValueError(f"--out {out} holds a file {checkpoints.name} where the sweep keeps its "
                     "checkpoints")


def _error(e: Exception) -> int:
  """Prints the one-line error; with several processes, stops them all."""
  print(f"{PROG}: error: {e}", file=sys.stderr, flush=True)
  distributed.abort(str(e), 2)  # returns only when this process runs alone
  return 2


def _setup(request: Request) -> Data:
  """The sweep's data; with several processes, the sweep and its data
  checked to be the same everywhere (process 0 alone checks ``--out``: it
  alone writes).

  Raises:
    ValueError, DataError: One line.
  """
  if distributed.is_main():
    check_out(request.out)
    check_records(request)
  data = load_data(request, list(request.runs))
  if distributed.joined():
    mine = {k: v for k, v in request.config().items() if k not in _OWN_FLAGS}
    distributed.check_same("settings", json.dumps(mine, sort_keys=True).encode())
    distributed.check_same("data", distributed.digest(*[
        np.asarray(a) for _, fed in sorted(data.federations.items())
        for a in (fed.data.x, fed.data.y, *fed.test, *fed.public)]))
  return data


def _finished(request: Request) -> dict[tuple[str, float], dict | None]:
  """:func:`finished_runs` as process 0 reads them (the others learn which
  runs to skip; process 0 alone keeps their records, to write them)."""
  done = finished_runs(request) if distributed.is_main() else {}
  shared = distributed.broadcast_bytes(json.dumps(sorted(done)).encode()
                                       if distributed.is_main() else None)
  return {(name, ratio): done.get((name, ratio)) for name, ratio in json.loads(shared)}


def main(argv: list[str] | None = None) -> int:
  """Runs the sweep; returns the exit code.

  Each finished run is written at once (``results.*`` hold every run
  finished so far) and each run in progress saves its state after every
  evaluation, so the same command run again after an interruption keeps the
  finished runs and continues the interrupted one where it stopped. Ctrl-C
  and SIGTERM stop it alike, with one line naming the checkpoint kept and
  the round it holds, and exit code 130 (SIGINT) or 143 (SIGTERM).

  With ``--coordinator`` the sweep is one of ``--num-processes`` processes
  (``fedjax_dp.distributed``): every process computes every run, the cohort
  sharded over all their devices; process 0 alone writes and shows
  progress; a process that fails stops the others.
  """
  with interrupts.sigterm_as_interrupt():
    try:
      args = build_parser().parse_args(argv)
      distributed.initialize(resolve_lib.processes(args), PROG)
    except (UsageError, ValueError) as e:
      return _error(e)
    except KeyboardInterrupt as e:
      print(f"{PROG}: interrupted; nothing written", file=sys.stderr, flush=True)
      return interrupts.exit_code(e)
    # Set again: jax.distributed's preemption notifier takes SIGTERM over.
    with interrupts.sigterm_as_interrupt():
      try:
        return _sweep(args)
      except (Exception, KeyboardInterrupt) as e:  # several processes: one failing stops all
        if not distributed.joined():
          raise
        distributed.stop_if_another_failed()  # then this error is its echo
        traceback.print_exc()
        distributed.abort(f"{type(e).__name__}: {e}",
                          interrupts.exit_code(e) if isinstance(e, KeyboardInterrupt) else 1)
        raise


def claim_out(out: str) -> contextlib.ExitStack:
  """Holds ``out``'s lock until the returned stack closes (process 0 alone:
  it alone writes), so that two sweeps never continue one checkpoint.

  Raises:
    ValueError: Another sweep holds it (one line).
  """
  stack = contextlib.ExitStack()
  if distributed.is_main():
    path = pathlib.Path(out)
    made = [p for p in (path, *path.parents) if not p.exists()]
    stack.callback(_remove_if_empty, made)  # made here: removed if left empty
    path.mkdir(parents=True, exist_ok=True)
    try:
      stack.enter_context(runlock.hold(path / runlock.NAME))
    except runlock.Busy as e:
      raise ValueError(f"--out {out} is in use by another sweep (process {e.pid}): "
                       "wait for it to end, or choose another --out") from None
  return stack


def _remove_if_empty(made: list[pathlib.Path]) -> None:
  """Removes the folders a sweep made for ``--out`` (innermost first) that
  end empty: a run refused before its first record or checkpoint."""
  for folder in made:
    try:
      folder.rmdir()
    except OSError:  # not empty (or gone): neither are its parents
      return


def _sweep(args: argparse.Namespace) -> int:
  """:func:`main` once the processes are joined."""
  try:
    request = resolve(args)
    data = _setup(request)
    claim = claim_out(request.out)
  except (UsageError, ValueError, DataError) as e:
    return _error(cli_errors.flag_error(e))  # a data setting's field named by its flag
  except MemoryError as e:  # a federation too large for this machine's memory
    return _error(f"out of memory loading the data: {e}")
  except KeyboardInterrupt as e:
    return _interrupted(args.out, e, 0)
  with claim:
    return _run_all(request, data)


def _interrupted(out: str, error: KeyboardInterrupt, finished: int) -> int:
  """Prints the interruption's one line (:func:`interrupted_line`; process 0,
  the others just the word); with several processes, stops them all.
  Returns the exit code."""
  line = (interrupted_line(PROG, out, error, finished) if distributed.is_main()
          else f"{PROG}: interrupted")
  print(line, file=sys.stderr, flush=True)
  code = interrupts.exit_code(error)
  distributed.abort("interrupted", code)  # returns only when this process runs alone
  return code


class _Bar:
  """The sweep's progress bar: rounds over all runs, moved as each round
  ends (``on_round``, called from a runtime thread) and by the runs kept."""

  def __init__(self, request: Request):
    self.bar = tqdm(total=sum(r.setting["rounds"] for r in request.runs), unit="round",
                    disable=request.values["quiet"] or not distributed.is_main(), file=sys.stderr,
                    dynamic_ncols=True)
    self.lock, self.at = threading.Lock(), 0

  def start(self, run: PlannedRun) -> None:
    """A run starts: the bar names it; its rounds count from 0."""
    with self.lock:
      self.at = 0
      self.bar.set_description(run_label(run))

  def on_round(self, t: int) -> None:
    """Round t of the run ended (at a resume: the checkpoint's round)."""
    with self.lock:
      if t > self.at:
        self.bar.update(t - self.at)
        self.at = t

  def skip(self, run: PlannedRun) -> None:
    """The run is kept from results.json: its rounds count as done."""
    with self.lock:
      self.bar.update(run.setting["rounds"])

  def close(self) -> None:
    """The sweep ends (or stops): the bar's last state stays on the terminal."""
    self.bar.close()


def _run_all(request: Request, data: Data) -> int:
  """:func:`main` once the runs are planned, their data loaded and ``--out``
  held: runs (or keeps) each run, writing the results after each."""
  writer = distributed.is_main()
  done, runs = _finished(request), request.runs
  try:
    check_checkpoints(request, [r for r in runs if (r.scheme.name, r.ratio) not in done], data)
  except ValueError as e:
    return _error(e)
  except KeyboardInterrupt as e:
    return _interrupted(request.out, e, 0)
  if done and writer:
    print(f"{PROG}: resuming: {len(done)} finished run{'s' if len(done) != 1 else ''} kept "
          f"from {request.out}", file=sys.stderr)
  bar, records, written, running, wrote = _Bar(request), [], 0, None, False
  try:
    for run in runs:
      bar.start(run)
      if (run.scheme.name, run.ratio) in done:  # in results.json already
        records.append(done[(run.scheme.name, run.ratio)])
        bar.skip(run)
        written = len(records)
        continue
      running = run
      records += execute(request, [run], data, on_round=bar.on_round)
      running = None
      if writer:
        write(request, records)
        written, wrote = len(records), True
  except simulation.record.TargetUnreachable as e:  # found once the run's data is there
    bar.close()
    return _error(f"--target-epsilon: {e} for {run_label(running)}")
  except CheckpointRefused as e:  # its state's structure, found once the run is set up
    bar.close()
    return _error(e)
  except ConfigError as e:  # a check of sigma, at the sigma --target-epsilon calibrated
    bar.close()
    return _error(f"{cli_errors.flag_error(e)} (at the sigma --target-epsilon calibrates for "
                  f"{run_label(running)})")
  except KeyboardInterrupt as e:
    bar.close()
    if running is not None and not isinstance(e, Interrupted):  # between execute's steps
      e = Interrupted(running, request.checkpoint_path(running), 0, interrupts.exit_code(e))
    return _interrupted(request.out, e, written if writer else 0)
  bar.close()
  if writer:
    print(report.markdown_table(records), end="")
    print(f"\nwrote {request.out}/results.json, results.csv, results.md" if wrote else
          f"\nevery run had finished: {request.out}/results.json, results.csv and results.md "
          "kept as they were", file=sys.stderr)
  return 0
