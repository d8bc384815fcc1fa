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
default. The flags and their mapping to the library's settings are
``fedjax_dp.cli``'s (every family's flags come from its declared options);
this module names no scheme class.

Every input is checked before any work starts; a bad one ends the program
with a one-line message and exit code 2, and nothing is written. The steps
are public for scripts built on the sweep: :func:`build_parser`,
:func:`plan`, :func:`load_data`, :func:`execute`, :func:`write`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
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
from fedjax_dp import datasets, distributed, keys, plots, runlock, sharding, simulation
from fedjax_dp.cli import errors as cli_errors
from fedjax_dp.cli import interrupts
from fedjax_dp.cli import results as report
from fedjax_dp.cli import schemes as cli_schemes
from fedjax_dp.cli import settings as cli_settings
from fedjax_dp.cli.parser import (DEFAULT_SCHEMES, PRESET_FLAGS, PROG, UsageError,
                                  build_parser)
from fedjax_dp.cli.schemes import configure
from fedjax_dp.cli.settings import apply_dataset_defaults
from fedjax_dp.data import DataError
from fedjax_dp.errors import ConfigError
from fedjax_dp.models import FlatModel, get_model
from fedjax_dp.paper import presets as paper_presets
from fedjax_dp.paper import results as paper_results
from fedjax_dp.schemes import Scheme, family_of, get_scheme
from fedjax_dp.simulation.loop import checkpoint_key

__all__ = ["DEFAULT_SCHEMES", "PRESET_FLAGS", "PROCESS_FLAGS", "Data", "Interrupted",
           "PlannedRun", "UsageError", "apply_dataset_defaults", "build_parser",
           "check_checkpoints", "check_out", "check_records", "checkpoint_path", "claim_out",
           "configure", "execute", "finished_runs", "interrupted_line", "load_data", "main",
           "model_for", "plan", "run_label", "saved_round", "scheme_setting",
           "setting_source", "settings", "write"]

# Flags that spread a run over processes without changing its numbers.
PROCESS_FLAGS = ("coordinator", "num_processes", "process_id", "process_timeout")
# Flags each process may set for itself: its id, and what process 0 alone uses.
_OWN_FLAGS = ("process_id", "process_timeout", "out", "quiet", "plot")
# Flags that change how the records are shown, where they are written or how
# the runs are spread over processes, not what they hold.
_NOT_RESULTS = ("quiet", "plot", "out", *PROCESS_FLAGS)


def _scheme_presets(scheme: Scheme, dataset: datasets.Dataset) -> tuple[dict, str]:
  """The scheme's preset on a data set and its source: its paper's
  (``fedjax_dp.paper.presets``), else its family's or the data set's own."""
  found = paper_presets.preset(scheme.name, dataset)
  if found is not None:
    return found
  if dataset.scheme_presets is None:  # the families' presets (image data)
    family = family_of(scheme)
    return (dict(family.presets.get(scheme.name, {})),
            family.preset_sources.get(scheme.name, dataset.setting_source))
  return (dict(dataset.scheme_presets.get(scheme.name, {})),
          dataset.preset_sources.get(scheme.name, dataset.setting_source))


def scheme_setting(name: str, dataset: str = "fashion-mnist") -> dict:
  """The data set's base setting (UAI Table 5) updated by the scheme's preset."""
  data = datasets.get_dataset(dataset)
  return {**data.setting, **_scheme_presets(get_scheme(name), data)[0]}


def setting_source(scheme: Scheme, dataset: str, setting: dict | None = None) -> str:
  """Where a scheme's setting on a data set comes from; with the run's
  ``setting``, also which of its values flags changed from that source's."""
  source = _scheme_presets(scheme, datasets.get_dataset(dataset))[1]
  if setting is None:
    return source
  preset = scheme_setting(scheme.name, dataset)
  if preset.get("clients_per_round") == "all":
    preset["clients_per_round"] = preset["num_clients"]
  changed = [f"--{k.replace('_', '-')} {setting[k]}" for k in sorted(preset)
             if k in setting and setting[k] != preset[k]]
  return source if not changed else f"{source}, except {', '.join(changed)}"


def settings(args: argparse.Namespace, scheme: Scheme) -> dict:
  """The preset-able settings of one scheme: flag, else preset, else the data set's."""
  setting = scheme_setting(scheme.name, args.dataset)
  setting.setdefault("local_optimizer", "sgd")
  for flag in (*PRESET_FLAGS, "local_optimizer"):
    value = getattr(args, flag)
    if value is not None:
      setting[flag] = value
  if setting["clients_per_round"] == "all":
    setting["clients_per_round"] = setting["num_clients"]
  return setting


class PlannedRun(NamedTuple):
  """One (scheme, ratio) run of a sweep.

  Attributes:
    scheme: The configured scheme.
    ratio: r.
    setting: Its preset-able settings (:func:`settings`).
    config: The run's :class:`~fedjax_dp.simulation.RunConfig` (clip norm
      None: calibrated in the run).
    clip_source: Where S comes from (DP schemes), for the record.
  """

  scheme: Scheme
  ratio: float
  setting: dict
  config: simulation.RunConfig
  clip_source: str | None


@functools.lru_cache(maxsize=None)
def _model(build: Callable[..., FlatModel], name: str, dropout: float) -> FlatModel:
  """A data set's model, built once per process (``reproduce.py`` plans every
  row of every table; ``build`` is in the key so that a stand-in model counts
  anew)."""
  return build(name, dropout=dropout)


def model_for(args: argparse.Namespace) -> FlatModel:
  """The data set's model (with --dropout: the medical MLP, All-CNN-C)."""
  return get_model(datasets.get_dataset(args.dataset).model, dropout=args.dropout)


def _check_setting(args: argparse.Namespace, setting: dict) -> None:
  """The checks of a run's setting that name flags (one line, ValueError)."""
  for flag in ("num_clients", "samples_per_client"):
    if setting[flag] < 1:
      raise ValueError(f"--{flag.replace('_', '-')} must be >= 1, got {setting[flag]}")
  if args.partition == "shards" and setting["samples_per_client"] % args.shards_per_client:
    raise ValueError(f"--samples-per-client ({setting['samples_per_client']}) must be a "
                     f"multiple of --shards-per-client ({args.shards_per_client})")
  if args.clip_ratio is not None and isinstance(args.clip, float):
    raise ValueError(f"--clip-ratio applies to a calibrated S, not to --clip {args.clip:g}")


def plan(args: argparse.Namespace, num_params: int | None = None) -> list[PlannedRun]:
  """The sweep's runs in Table 1 order (FL-STD(-DP) once, at r = 100%), validated.

  Args:
    args: Parsed arguments (:func:`build_parser`); flags left at None take
      the data set's setting (:func:`apply_dataset_defaults`).
    num_params: n of the model (default: the data set's model's); given, the
      settings are checked as for a model of that many weights.

  Raises:
    ValueError: A bad setting, one line naming the flag.
  """
  apply_dataset_defaults(args)
  model = _model(get_model, datasets.get_dataset(args.dataset).model, args.dropout)
  if num_params is not None:  # the model's name and loss, n weights
    model = dataclasses.replace(model, shapes=(("w", (num_params,)),))
  run_key = keys.run_key(args.seed)
  schemes = [configure(get_scheme(s), args) for s in args.schemes]
  pairs = [(s, r) for r in args.ratio for s in schemes if s.uses_ratio]
  pairs += [(s, 1.0) for s in schemes if not s.uses_ratio]
  seen, runs = set(), []
  for scheme, ratio in pairs:
    if (scheme.name, ratio) in seen:
      continue
    seen.add((scheme.name, ratio))
    setting = settings(args, scheme)
    _check_setting(args, setting)
    clip, source = cli_settings.clip_for(args, scheme, ratio)
    try:
      config = cli_settings.run_config(args, scheme, ratio, setting, clip)
      simulation.setup.validate(config, scheme, model, setting["num_clients"],
                                setting["samples_per_client"], run_key)
    except ConfigError as e:  # the library names its field; the user typed a flag
      flags = {**cli_errors.setting_flags(), **cli_schemes.field_flags(family_of(scheme))}
      raise cli_errors.flag_error(e, flags) from None
    runs.append(PlannedRun(scheme, ratio, setting, config,
                           source if scheme.dp else None))
  if args.public_size < 1:
    raise ValueError(f"--public-size must be >= 1, got {args.public_size}")
  if args.dataset == "medical-synth" and args.public_size % 2:
    raise ValueError("--public-size must be even on medical-synth (as many positives "
                     f"as negatives), got {args.public_size}")
  sharding.client_mesh(args.devices)  # no more devices than JAX sees
  return runs


class Data(NamedTuple):
  """The data of a sweep's runs: one federation (``datasets.Federation``) per shape."""

  federations: dict

  def of(self, run: PlannedRun) -> datasets.Federation:
    """The federation of one run."""
    return self.federations[_shape(run)]


def _shape(run: PlannedRun) -> tuple[int, int, int]:
  return (run.setting["num_clients"], run.setting["samples_per_client"],
          run.scheme.traits.public_holdout)


def load_data(args: argparse.Namespace, runs: list[PlannedRun]) -> Data:
  """Loads (once per shape) the federations the runs need.

  Raises:
    ValueError: A split the data does not allow (one line).
    DataError: Missing or corrupt data files.
  """
  partition = datasets.PartitionConfig(args.partition, args.dirichlet_alpha,
                                       args.shards_per_client)
  dataset = datasets.get_dataset(args.dataset)
  medical = dataset.split_by == "hospital"
  federations, loaded = {}, {}
  for run in runs:
    shape = _shape(run)
    if shape in federations:
      continue
    # Where every scheme's public set is held out (svhn, shakespeare, ...), a
    # top_k hold-out of the public set's size splits the data the same way:
    # one federation in memory, not two.
    held = 0 if medical else shape[2] or (args.public_size if dataset.holds_out_public else 0)
    if (shape[0], shape[1], held) not in loaded:
      try:
        loaded[shape[0], shape[1], held] = datasets.load(
            args.dataset, shape[0], shape[1], args.seed, partition=partition,
            public_size=args.public_size, holdout=0 if medical else shape[2],
            test_size=args.test_size)
      except ConfigError as e:  # the library names its field; the user typed a flag
        raise cli_errors.flag_error(e) from None
    federations[shape] = loaded[shape[0], shape[1], held]
  return Data(federations)


def checkpoint_path(args: argparse.Namespace, run: PlannedRun) -> pathlib.Path:
  """Where a run of the sweep saves its progress (deleted when it finishes)."""
  return pathlib.Path(args.out) / ".checkpoints" / f"{run.scheme.name}-r{run.ratio:g}.npz"


def run_label(run: PlannedRun) -> str:
  """A run as the sweep's lines name it: ``FL-TOP-DP r=0.005``."""
  return f"{run.scheme.name} r={run.ratio:g}"


def saved_round(args: argparse.Namespace, run: PlannedRun, fed: datasets.Federation,
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
  path = checkpoint_path(args, run)
  if not distributed.is_main() or not path.is_file():
    return None
  key = checkpoint_key(model_for(args), run.scheme, fed.data, run.config)
  try:
    meta = checkpoint_lib.verify(path, key)
  except checkpoint_lib.Mismatch as e:
    if getattr(args, "overwrite", False):
      path.unlink()
      print(f"{prog}: deleted {path}, a checkpoint {e.reason} (--overwrite)",
            file=sys.stderr, flush=True)
      return None
    raise ValueError(f"{path} holds a checkpoint {e.reason}, not of {run_label(run)} as "
                     "this command runs it: delete it to start that run afresh, choose "
                     "another --out, or add --overwrite") from None
  return None if meta is None else int(meta["round"])


def check_checkpoints(args: argparse.Namespace, runs: list[PlannedRun], data: Data) -> None:
  """Checks the runs' checkpoints in ``--out`` before any run
  (:func:`saved_round`): another run's or version's stops the sweep before
  any work.

  Raises:
    ValueError: One line, as :func:`saved_round`.
  """
  for run in runs:
    saved_round(args, run, data.of(run))


class Interrupted(KeyboardInterrupt):
  """Ctrl-C or SIGTERM during a run of the sweep (:func:`execute`).

  Attributes:
    run: The run in progress.
    checkpoint: Its checkpoint file (:func:`checkpoint_path`), kept.
    reached: The last round it trained (0: none yet).
    code: The exit code (``fedjax_dp.cli.interrupts``: 130, or 143 after
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


def execute(args: argparse.Namespace, runs: list[PlannedRun], data: Data,
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
  model = model_for(args)
  dataset = datasets.get_dataset(args.dataset)
  records = []
  for run in runs:
    fed, saved, reached = data.of(run), checkpoint_path(args, run), _Reached(on_round)
    try:
      start = saved_round(args, run, fed, prog)
      if start is not None:
        reached(start)
        print(f"{prog}: resuming {run_label(run)} at round {start + 1} of "
              f"{run.setting['rounds']} from its checkpoint {saved} (round {start})",
              file=sys.stderr, flush=True)
      record = simulation.run(model, run.scheme, fed.data, fed.test, fed.public, run.config,
                              progress=progress, checkpoint=saved, on_round=reached)
    except KeyboardInterrupt as e:
      raise Interrupted(run, saved, reached.round, interrupts.exit_code(e)) from e
    if distributed.is_main():
      with contextlib.suppress(OSError):  # the folder, once no run has a checkpoint
        saved.parent.rmdir()
    record["processes"] = jax.process_count()
    record["dataset"] = dataset.label
    record["data_summary"] = fed.summary
    record["clip_source"] = run.clip_source
    record["paper_source"] = paper_results.paper_source(run.scheme.name, run.ratio,
                                                        dataset.name, run.setting)
    record["paper_upstream_bits"] = paper_results.PAPER_UPSTREAM_BITS.get(run.scheme.name)
    record["setting_source"] = setting_source(run.scheme, dataset.name, run.setting)
    record.update({k: run.setting[k] for k in ("samples_per_client", "local_steps",
                                                "batch_size", "lr", "local_optimizer")})
    records.append(record)
  return records


def _config(args: argparse.Namespace) -> dict:
  """The sweep's settings as results.json stores them (``--overwrite`` aside:
  what the sweep did to the folder, not what its records are)."""
  settings_ = {k: v for k, v in vars(args).items() if k != "overwrite"}
  return json.loads(json.dumps(dict(settings_,
                                    dataset=datasets.get_dataset(args.dataset).label)))


def _differences(theirs: dict, mine: dict) -> list[str]:
  """The flags whose values differ between two stored configs, results aside."""
  keys = sorted((set(theirs) | set(mine)) - set(_NOT_RESULTS))
  return ["--" + k.replace("_", "-") for k in keys if theirs.get(k) != mine.get(k)]


def write(args: argparse.Namespace, records: list[dict], out: str | None = None) -> None:
  """results.json, results.csv and results.md in ``out`` (default ``args.out``);
  with ``--plot`` the plots too (``fedjax_dp.plots``)."""
  report.write_results(out or args.out, records, _config(args))
  if args.plot:
    plots.plot_records(records, out or args.out)


def finished_runs(args: argparse.Namespace) -> dict[tuple[str, float], dict]:
  """The records already in ``--out`` from a sweep with the same settings.

  Keyed by (scheme, ratio); empty when ``--out`` holds no results.json or
  one written with other settings (how results are shown, the folder's
  spelling and how the run is spread over processes aside).
  """
  path = pathlib.Path(args.out) / "results.json"
  try:
    saved = json.loads(path.read_text())
    if _differences(saved.get("config", {}), _config(args)):
      return {}
    return {(r["scheme"], r["ratio"]): r for r in saved.get("runs", [])}
  except (OSError, ValueError, AttributeError, KeyError, TypeError):
    return {}


def check_records(args: argparse.Namespace) -> None:
  """Refuses an ``--out`` that holds another sweep's records, unless
  ``--overwrite``.

  A folder holds one sweep's records: the same command run again keeps its
  finished runs (:func:`finished_runs`), while a sweep with other settings
  would replace them as its first run finishes. Such a sweep stops here,
  before any work, naming the settings that differ; with ``--overwrite`` it
  goes on and replaces them. Checkpoints are not records: one of other
  settings is never continued (``fedjax_dp.checkpoint``).

  Raises:
    ValueError: One line naming --out, the differing flags and the ways out.
  """
  if getattr(args, "overwrite", False):
    return
  path = pathlib.Path(args.out) / "results.json"
  if not path.exists():
    return
  ways = "choose another --out, or add --overwrite to replace them"
  try:
    saved = json.loads(path.read_text())
    theirs = saved["config"]
    if not isinstance(theirs, dict):
      raise TypeError("its config is not an object")
  except OSError as e:
    raise ValueError(f"--out {args.out}: results.json cannot be read ({e.strerror or e}): "
                     f"{ways}") from None
  except (ValueError, KeyError, TypeError):
    raise ValueError(f"--out {args.out} holds a results.json that is not a sweep's "
                     f"records: {ways}") from None
  differ = _differences(theirs, _config(args))
  if differ:
    shown = ", ".join(differ[:6]) + (f" and {len(differ) - 6} more" if len(differ) > 6 else "")
    raise ValueError(f"--out {args.out} holds the records of another sweep (other {shown}): "
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
    for folder in missing:  # deepest first
      if folder.is_dir():
        folder.rmdir()


def _error(e: Exception) -> int:
  """Prints the one-line error; with several processes, stops them all."""
  print(f"{PROG}: error: {e}", file=sys.stderr, flush=True)
  distributed.abort(str(e), 2)  # returns only when this process runs alone
  return 2


def _setup(args: argparse.Namespace) -> tuple[list[PlannedRun], Data]:
  """The planned runs and their data; with several processes, checked to be
  the same everywhere (process 0 alone checks ``--out``: it alone writes).

  Raises:
    ValueError, DataError: One line.
  """
  runs = plan(args)
  if distributed.is_main():
    check_out(args.out)
    check_records(args)
  data = load_data(args, runs)
  if distributed.joined():
    mine = {k: v for k, v in _config(args).items() if k not in _OWN_FLAGS}
    distributed.check_same("settings", json.dumps(mine, sort_keys=True).encode())
    distributed.check_same("data", distributed.digest(*[
        np.asarray(a) for _, fed in sorted(data.federations.items())
        for a in (fed.data.x, fed.data.y, *fed.test, *fed.public)]))
  return runs, data


def _finished(args: argparse.Namespace) -> dict[tuple[str, float], dict | None]:
  """:func:`finished_runs` as process 0 reads them (the others learn which
  runs to skip; process 0 alone keeps their records, to write them)."""
  done = finished_runs(args) if distributed.is_main() else {}
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
      distributed.initialize(cli_settings.processes(args), PROG)
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
    path.mkdir(parents=True, exist_ok=True)
    try:
      stack.enter_context(runlock.hold(path / runlock.NAME))
    except runlock.Busy as e:
      raise ValueError(f"--out {out} is in use by another sweep (process {e.pid}): "
                       "wait for it to end, or choose another --out") from None
  return stack


def _sweep(args: argparse.Namespace) -> int:
  """:func:`main` once the processes are joined."""
  try:
    runs, data = _setup(args)
    claim = claim_out(args.out)
  except (UsageError, ValueError, DataError) as e:
    return _error(e)
  except KeyboardInterrupt as e:
    return _interrupted(args, e, 0)
  with claim:
    return _run_all(args, runs, data)


def _interrupted(args: argparse.Namespace, error: KeyboardInterrupt, finished: int) -> int:
  """Prints the interruption's one line (:func:`interrupted_line`; process 0,
  the others just the word); with several processes, stops them all.
  Returns the exit code."""
  line = (interrupted_line(PROG, args.out, error, finished) if distributed.is_main()
          else f"{PROG}: interrupted")
  print(line, file=sys.stderr, flush=True)
  code = interrupts.exit_code(error)
  distributed.abort("interrupted", code)  # returns only when this process runs alone
  return code


class _Bar:
  """The sweep's progress bar: rounds over all runs, moved as each round
  ends (``on_round``, called from a runtime thread) and by the runs kept."""

  def __init__(self, args: argparse.Namespace, runs: list[PlannedRun]):
    self.bar = tqdm(total=sum(r.setting["rounds"] for r in runs), unit="round",
                    disable=args.quiet or not distributed.is_main(), file=sys.stderr,
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


def _run_all(args: argparse.Namespace, runs: list[PlannedRun], data: Data) -> int:
  """:func:`main` once the runs are planned, their data loaded and ``--out``
  held: runs (or keeps) each run, writing the results after each."""
  writer = distributed.is_main()
  done = _finished(args)
  try:
    check_checkpoints(args, [r for r in runs if (r.scheme.name, r.ratio) not in done], data)
  except ValueError as e:
    return _error(e)
  except KeyboardInterrupt as e:
    return _interrupted(args, e, 0)
  if done and writer:
    print(f"{PROG}: resuming: {len(done)} finished runs kept from {args.out}",
          file=sys.stderr)
  bar, records, written, running = _Bar(args, runs), [], 0, None
  try:
    for run in runs:
      bar.start(run)
      if (run.scheme.name, run.ratio) in done:  # in results.json already
        records.append(done[(run.scheme.name, run.ratio)])
        bar.skip(run)
        written = len(records)
        continue
      running = run
      records += execute(args, [run], data, on_round=bar.on_round)
      running = None
      if writer:
        write(args, records)
        written = len(records)
  except KeyboardInterrupt as e:
    bar.close()
    if running is not None and not isinstance(e, Interrupted):  # between execute's steps
      e = Interrupted(running, checkpoint_path(args, running), 0, interrupts.exit_code(e))
    return _interrupted(args, e, written if writer else 0)
  bar.close()
  if writer:
    print(report.markdown_table(records), end="")
    print(f"\nwrote {args.out}/results.json, results.csv, results.md", file=sys.stderr)
  return 0
