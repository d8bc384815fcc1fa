"""Reproduce a table of the seed papers, and write the reproduction report.

  python experiments/reproduce.py TABLE [--rows PATTERN ...] [--seeds 0 1 2] [--out DIR]
  python experiments/reproduce.py report [--out DIR] [--report docs/REPRODUCTION.md]
  python experiments/reproduce.py list [TABLE] [--out DIR]
  python experiments/reproduce.py queue FILE [--out DIR] [--hours H]
  python experiments/reproduce.py plan FILE [--out DIR]

TABLE is one of uai-table1, thesis-4.1, thesis-4.2, thesis-4.4, thesis-5.3,
thesis-5.3.5, thesis-5.1, thesis-5.2, fedsmp, fedsmp-table1, fedsmp-svhn,
fedsmp-shakespeare, thesis-6.1, thesis-6.2, thesis-6.3, thesis-6.4,
thesis-6.5, thesis-6.6, thesis-6.7, thesis-6.8, thesis-6.9, thesis-6.10,
thesis-6.11, thesis-6.12, poster-cdp-lq, correlated-noise (issue 49:
DP-FTRL noise on UAI Table 1's setting, docs/correlated-noise.md) and
amplified-noise (issue 59: the same with amplified participation and each
row at its tightest epsilon)
(``fedjax_dp.paper.tables.tables()``; ``list`` shows their rows, with the
records kept and the runs in progress). A row whose data set this
machine cannot read (SVHN, CIFAR-10, IMDB, EMNIST by writer: not shipped here)
is never run here ("data not reachable on this machine"); the report, which
says the same on every machine, lists the rows not run on each data set other
than Fashion-MNIST with the command that runs them where the data is.
Each (row, seed) runs ``experiments/sweep.py`` with the paper's setting and
is kept as ``DIR/<table>/<row>.seed<k>.json``; a kept record is not run
again, and an interrupted run continues from its last checkpoint
(``DIR/.runs``). Without ``--seeds``, headline rows run seeds 0 1 2 and the
others seed 0. ``--reduced`` runs a row's documented reduced setting (the
attack tables, whose paper setting costs hours a cell), reported as such.
``report`` rebuilds REPRODUCTION.md and its plots from the kept records.
``queue`` runs a file of table command lines in order (one a line, ``#``
comments; ``experiments/campaign.txt`` is this project's campaign), every
line checked before the first run. Several processes may work through the
same tables or queue at once: each (row, seed) is held by the process running
it (``fedjax_dp.runlock``), and the others skip it. ``plan`` lists what
``queue FILE`` would still run, each run with its hours estimated from the
paces of the kept records, and their sum. ``--hours H`` (a table or a queue)
starts only the runs that ``plan`` expects to end within H hours of the
command's start, a batch job's wall-clock limit or a session's: the others
are passed over, each said in one line, and left for a later command.
Example (UAI Table 1's FL-TOP rows at r = 0.5%):

  python experiments/reproduce.py uai-table1 --rows 'FL-TOP*_r0.005'
"""

import argparse
import math
import os
import pathlib
import shlex
import statistics
import sys
import time
from typing import NamedTuple

from fedjax_dp import host_devices  # imports no JAX

host_devices.configure([])  # one XLA CPU device per core, before JAX starts

from fedjax_dp import datasets, keys, runlock  # noqa: E402
from fedjax_dp.paper import report as paper_report  # noqa: E402
from fedjax_dp.paper import runner as paper_runner  # noqa: E402
from fedjax_dp.paper import stats as paper_stats  # noqa: E402
from fedjax_dp.paper import tables as paper_tables  # noqa: E402
from fedjax_dp import interrupts  # noqa: E402
from fedjax_dp.cli import sweep as experiment  # noqa: E402

DEFAULT_OUT = "experiments/reference/reproduction"
# argparse's help words, which print help and exit 0 wherever they are parsed.
_HELP = {"-h", "--help"}
DEFAULT_REPORT = "docs/REPRODUCTION.md"


class _Parser(argparse.ArgumentParser):
  def error(self, message):
    raise experiment.UsageError(message)


def build_parser() -> argparse.ArgumentParser:
  """The command line."""
  p = _Parser(prog="reproduce.py", description=__doc__.split("\n\n")[0],
              allow_abbrev=False)
  p.add_argument("target", help="a table name, 'report', 'list', 'queue' or 'plan'")
  p.add_argument("table", nargs="?", help="list: the table whose rows to show; queue: "
                 "the file of table command lines to run in order; plan: the queue "
                 "file whose runs left to estimate")
  p.add_argument("--rows", nargs="+", help="row names or slugs, shell patterns allowed "
                 "(default: every row)")
  p.add_argument("--seeds", type=int, nargs="+",
                 help="seeds (default: 0 1 2 for headline rows, 0 for the others)")
  p.add_argument("--out", default=DEFAULT_OUT,
                 help=f"records folder (default {DEFAULT_OUT})")
  p.add_argument("--sweep-flags", default="",
                 help="extra experiments/sweep.py flags for every row, e.g. '--rounds 2' "
                      "for a quick check of the pipeline (such runs are kept apart and "
                      "never reported)")
  p.add_argument("--reduced", action="store_true",
                 help="run the rows' documented reduced setting (attack tables: the "
                      "paper's costs hours a cell on a CPU); reported, labelled as reduced")
  p.add_argument("--report", default=DEFAULT_REPORT,
                 help=f"report: the Markdown file to write (default {DEFAULT_REPORT})")
  p.add_argument("--hours", type=float,
                 help="a table or queue: start only the runs that plan expects to end "
                      "within this many hours of the command's start (e.g. a batch job's "
                      "wall-clock limit); the others are passed over and left for later")
  return p


def _state(state: paper_runner.RunState, rounds: int) -> str:
  """One run's state for ``list``: ``seed 0 kept (0.8 h)``, ``seed 1 at round 17/200 ...``."""
  where = "reduced " if state.reduced else ""
  if state.finished:
    origin = f"; the run of {state.same_run_as}" if state.same_run_as else ""
    return f"{where}seed {state.seed} kept ({state.seconds / 3600:.1f} h{origin})"
  if state.older or state.round > rounds:  # the row's definition changed since
    return (f"{where}seed {state.seed}: a checkpoint at round {state.round} of an older "
            f"setting, replaced when the row runs")
  done = f"{where}seed {state.seed} at round {state.round}/{rounds} ({state.seconds / 3600:.1f} h"
  if state.running is None:
    return done + "; interrupted: the same command continues it)"
  left = ""
  if state.round and state.seconds:  # at its pace so far
    left = f", about {(rounds - state.round) * state.seconds / state.round / 3600:.1f} h to go"
  return done + f"; running now, process {state.running or '(unknown)'}{left})"


def _list(name: str | None, out: str) -> int:
  """Prints the tables, with the runs running now, or one table's rows with
  what ``out`` holds of them."""
  index = paper_runner.record_index(out)
  for table in ([paper_tables.get_table(name)] if name else paper_tables.tables().values()):
    states = {row.slug: paper_runner.run_states(out, table, row, index) for row in table.rows}
    kept = sum(any(s.finished for s in v) for v in states.values())
    going = sum(any(not s.finished for s in v) for v in states.values())
    running = sum(any(s.running is not None for s in v) for v in states.values())
    print(f"{table.name}: {table.title} ({len(table.rows)} rows; {kept} with a kept "
          f"record, {going} with a run in progress, {running} running now)")
    for row in table.rows:
      mark = " (headline: seeds 0 1 2)" if row.headline else ""
      if name and datasets.reachable(row.dataset):
        mark += " (data not reachable on this machine)"
      shown = [s for s in states[row.slug] if name or s.running is not None]
      if name or shown:
        found = [_state(s, _rounds(row, s, out)) for s in shown]
        print(f"  {row.slug:28s} {row.name}{mark}" + (": " + "; ".join(found) if found else ""))
  return 0


def _rounds(row: paper_tables.Row, state: paper_runner.RunState, out: str) -> int:
  """The rounds of the row's run in the setting of ``state`` (paper's or reduced)."""
  flags = row.reduced if state.reduced else ()
  args = experiment.build_parser().parse_args(row.argv(state.seed, out, flags))
  return experiment.resolve(args).runs[0].setting["rounds"]


class Job(NamedTuple):
  """One table's runs, as one command line asks for them."""

  table: paper_tables.Table
  rows: tuple[paper_tables.Row, ...]
  seeds: tuple[int, ...] | None
  extra: tuple[str, ...]
  reduced: bool

  def row_seeds(self, row: paper_tables.Row) -> tuple[int, ...]:
    """The seeds to run for a row: the job's, else 0 1 2 (headline) or 0."""
    return self.seeds or (paper_runner.SEEDS_HEADLINE if row.headline else (0,))


def _no_second_argument(args: argparse.Namespace) -> None:
  """Raises ValueError if a command other than list, queue or plan got a second argument."""
  if args.table is not None:
    raise ValueError(f"unexpected argument {args.table!r} (only 'list', 'queue' and 'plan' "
                     "take one)")


def _no_row_flags(args: argparse.Namespace) -> None:
  """Raises ValueError if queue, plan or report got a flag that only a table's command
  line takes (each queue line carries its own; it was silently ignored)."""
  given = [flag for flag, value in (("--rows", args.rows), ("--seeds", args.seeds),
                                    ("--sweep-flags", args.sweep_flags),
                                    ("--reduced", args.reduced)) if value]
  if given:
    raise ValueError(f"{given[0]} belongs to a table's command line (a queue file's line), "
                     f"not to {args.target}")


def _check_report(out: str, report: str) -> None:
  """Refuses, before anything is written, a ``report`` that cannot be one
  (its ``<stem>_plots/`` folder was written first, and left behind) and an
  ``out`` that holds no records (a mistyped one wrote an empty report over
  the real one)."""
  path = pathlib.Path(report)
  if not report or report.endswith(os.sep) or path.is_dir():
    raise ValueError(f"--report {report!r} must name a file, not a folder")
  if not path.parent.is_dir() or not os.access(path.parent, os.W_OK):
    raise ValueError(f"--report {report}: its folder {str(path.parent)!r} does not exist "
                     "or cannot be written")
  if not pathlib.Path(out).is_dir() or not any(pathlib.Path(out).glob("*/*.json")):
    raise ValueError(f"--out {out} holds no records (a table's folder of .json records)")
  unreadable = paper_runner.unreadable_records(out)
  if unreadable:
    path, why = unreadable[0]
    more = f" and {len(unreadable) - 1} more" if len(unreadable) > 1 else ""
    raise ValueError(f"record {path}{more} cannot be read ({why}); the report would leave "
                     "its row out: restore or delete it")


def _check_records_folder(out: str) -> None:
  """Refuses an ``out`` that is there but is not a folder (``list`` and
  ``plan`` read it; a file listed every table as empty)."""
  if os.path.exists(out) and not os.path.isdir(out):
    raise ValueError(f"--out {out} is not a folder (the records folder)")


def _job(args: argparse.Namespace) -> Job:
  """Checks a table's command line before any run: every row's flags parse.

  Raises:
    UsageError, ValueError: One line.
  """
  _no_second_argument(args)
  table = paper_tables.get_table(args.target)
  rows = table.select(args.rows)
  if args.seeds is not None and any(s < 0 for s in args.seeds):
    raise ValueError("--seeds must be >= 0")
  if args.seeds is not None and any(s >= keys.SEED_LIMIT for s in args.seeds):
    raise ValueError("--seeds must be below 2**63")
  try:
    extra = tuple(shlex.split(args.sweep_flags))
  except ValueError as e:  # an unclosed quote
    raise ValueError(f"--sweep-flags {args.sweep_flags!r}: {e}") from None
  if _HELP & set(extra):
    raise ValueError("--sweep-flags cannot ask for help: run experiments/sweep.py --help")
  owned = {"--out": "--out", "--seed": "--seeds"}  # the row's own flags come after extra
  for word in extra:
    if word.split("=")[0] in owned:
      flag = word.split("=")[0]
      raise ValueError(f"--sweep-flags cannot set {flag}: give reproduce.py's "
                       f"{owned[flag]} instead")
  if args.reduced and extra:
    raise ValueError("--reduced and --sweep-flags exclude each other")
  if args.reduced:
    plain = [r.slug for r in rows if not r.reduced]
    if plain:
      raise ValueError(f"--reduced: {', '.join(plain[:4])} have no reduced setting")
  for row in rows:
    flags = row.reduced if args.reduced else extra
    experiment.resolve(experiment.build_parser().parse_args(row.argv(0, args.out, flags)))
  return Job(table, tuple(rows), None if args.seeds is None else tuple(args.seeds), extra,
             args.reduced)


def _queue(path: str, out: str) -> list[Job]:
  """The jobs of a queue file: one table's command line a line (``#`` starts
  a comment), each checked before any runs; ``--out`` is the queue's.

  Raises:
    ValueError: One line naming the file and line.
  """
  try:
    text = pathlib.Path(path).read_text()
  except OSError as e:
    raise ValueError(f"queue {path}: {e.strerror or e}") from None
  except UnicodeDecodeError:
    raise ValueError(f"queue {path}: not a text file (UTF-8)") from None
  jobs = []
  for number, line in enumerate(text.splitlines(), 1):
    try:
      words = shlex.split(line, comments=True)
      if not words:
        continue
      if any(w.split("=")[0] in ("--out", "--report", "--hours") for w in words):
        raise ValueError("--out, --report and --hours belong to the queue's command, not "
                         "its lines")
      if _HELP & set(words):
        raise ValueError("a queue line runs a table; --help belongs to the command line")
      args = build_parser().parse_args([*words, "--out", out])
      if args.target in ("list", "report", "queue", "plan"):
        raise ValueError(f"a queue line runs a table, not {args.target!r}")
      jobs.append(_job(args))
    except (experiment.UsageError, ValueError) as e:
      raise ValueError(f"{path}:{number}: {e}") from None
  if not jobs:
    raise ValueError(f"queue {path} names no table")
  return jobs


def _run_job(job: Job, out: str, machine: str, budget: "_Budget | None" = None
             ) -> tuple[list[str], list[str], list[str]]:
  """Runs a job's (row, seed)s not kept yet; returns those that failed, those
  left to other processes and those whose data this machine cannot read
  (never run, each said with its command). Those ``budget`` passes over (not
  expected to end in the hours left) it notes, each said once.

  Raises:
    KeyboardInterrupt: A run was interrupted (its checkpoint is kept).
  """
  failed, elsewhere, away = [], [], []
  for row in job.rows:
    if reason := datasets.reachable(row.dataset):
      print(f"reproduce.py: {job.table.name} {row.name}: data not reachable on this machine "
            f"({reason}); not run. Where the data is: "
            f"{paper_report.rerun_command(job.table, [row])}", file=sys.stderr)
      away.append(row.slug)
      continue
    for seed in job.row_seeds(row):
      if budget is not None and (why := budget.passes_over(job, row, seed)):
        if f"{row.slug} seed {seed}" not in budget.later:  # a row on several queue lines
          print(f"reproduce.py: {job.table.name} {row.name} seed {seed}: not started, {why}",
                file=sys.stderr)
          budget.later[f"{row.slug} seed {seed}"] = None
        continue
      print(f"reproduce.py: {job.table.name} {row.name} seed {seed}", file=sys.stderr)
      try:
        kept = paper_runner.run_row(job.table, row, seed, out, experiment.main, machine,
                                    row.reduced if job.reduced else job.extra,
                                    progress=sys.stderr.isatty())
      except runlock.Busy as e:  # another campaign on the same records
        print(f"reproduce.py: {row.name} seed {seed} runs in process {e.pid or '(unknown)'}: "
              "skipped here", file=sys.stderr)
        elsewhere.append(f"{row.slug} seed {seed}")
        continue
      if budget is not None:
        budget.ran()
      if kept is None:
        failed.append(f"{row.slug} seed {seed}")
        continue
      rec = kept["record"]
      print(f"reproduce.py: {row.name} seed {seed}: best {rec['best_accuracy']:.4f} at "
            f"round {rec['best_round']} (paper: {paper_report.paper_cell(row)})",
            file=sys.stderr)
  return failed, elsewhere, away


# The test images of MNIST and Fashion-MNIST, evaluated after every round.
_TEST_IMAGES = 10_000


class _Pace(NamedTuple):
  """A kept record's measured wall seconds a round, and what the run was."""

  table: str
  slug: str
  kind: tuple[str, int, bool]  # (scheme, _run_size's images a round, attacked)
  seconds_per_round: float
  finished: str  # when the record was kept (ISO 8601): the newest set the pace


#: How many of the newest alike records set a pace (their median): a faster
#: round, once it lands in that many records, sets the estimates.
_NEWEST = 3


def _newest(paces: list[_Pace]) -> list[_Pace]:
  """The :data:`_NEWEST` most recently kept of ``paces``."""
  return sorted(paces, key=lambda p: p.finished)[-_NEWEST:]


def _run_size(row: paper_tables.Row, seed: int, extra: tuple[str, ...]) -> tuple[int, int]:
  """(rounds, forward-pass images a round) of a row's run: a trained image
  counts three (forward and backward), a test image one; the server's own
  training (Fed-SMP top_k's public-data steps) counts as the clients'."""
  request = experiment.resolve(experiment.build_parser().parse_args(row.argv(seed, "OUT", extra)))
  run = request.runs[0]
  setting = run.setting
  trained = setting["clients_per_round"] * setting["local_steps"] * setting["batch_size"]
  trained += run.scheme.server_examples(run.config.local, run.ratio)
  return setting["rounds"], 3 * trained + (request.values["test_size"] or _TEST_IMAGES)


def _kind(row: paper_tables.Row, images: int) -> tuple[str, int, bool]:
  """What tells runs of like pace: (scheme, images a round, attacked)."""
  return row.scheme, images, "--attack" in row.flags


class _Paces(NamedTuple):
  """What a plan's estimates go by (:func:`_paces`)."""

  kept: list[_Pace]  # the records kept on this machine's model
  running: list[_Pace]  # the runs training on this machine now, at their pace so far
  # The records kept on the other machines of this one's kind (``there``:
  # "on other CPU machines"), each scaled by its machine's factor, or as
  # they are where no factor was measured (``factors`` empty).
  elsewhere: list[_Pace]
  there: str
  factors: list[float]  # this machine's pace over each other machine's (:func:`_factor`)
  compared: int  # the kinds of run the factors were measured on


#: A run training now enters a machine's factor from this round on (the
#: first rounds' time includes compiling).
_SETTLED_ROUNDS = 5


def _median_pace(paces: list[_Pace]) -> float:
  """The median seconds a round of the :data:`_NEWEST` newest of ``paces``."""
  return statistics.median(p.seconds_per_round for p in _newest(paces))


def _factor(mine: list[_Pace], theirs: list[_Pace]) -> tuple[float, int] | None:
  """(this machine's pace over another's, the kinds of run compared): the
  median, over the kinds of run in both ``mine`` and ``theirs`` (the other
  machine's records), of the ratio of their paces, each the median of the
  newest three; None without such a kind."""
  ratios = []
  for kind in {p.kind for p in mine} & {p.kind for p in theirs}:
    ours = _median_pace([p for p in mine if p.kind == kind])
    other = _median_pace([p for p in theirs if p.kind == kind])
    if ours > 0 and other > 0:  # a record without its seconds says nothing
      ratios.append(ours / other)
  return (statistics.median(ratios), len(ratios)) if ratios else None


def _paces(out: str, here: str) -> _Paces:
  """The paces of the records kept in ``out``, each run once (a record
  reused from another table's run is left out): those kept on this
  machine's model (``here``, a ``host_devices.machine`` line), and those of
  the other machines of its kind, with an accelerator or without (the
  2-core CPU VMs of this project differed five-fold in pace, and a GPU run
  took 40-130 s where such a CPU takes hours). Also the paces so far of the
  runs a process trains now (a lock's holder is on this machine), which set
  a scheme's pace until it keeps a record here.

  Another machine's records count scaled by this machine's pace over its
  own, measured on the kinds of run it kept that this machine kept or is
  training (past :data:`_SETTLED_ROUNDS`). Where no other machine has such
  a kind, their records count as they are if this machine kept none, and
  not at all if it kept some."""
  paces, running, settled, index = [], [], [], paper_runner.record_index(out)
  for table in paper_tables.tables().values():
    for row in table.rows:
      for state in paper_runner.run_states(out, table, row, index):
        going = state.running is not None and not state.older
        if (state.finished and not state.same_run_as or going) and state.round:
          _, images = _run_size(row, state.seed, row.reduced if state.reduced else ())
          pace = _Pace(table.name, row.slug, _kind(row, images),
                       state.seconds / state.round, state.finished_at)
          if state.finished:
            paces.append((state.machine, pace))
          else:
            running.append(pace)
            if state.round >= _SETTLED_ROUNDS:
              settled.append(pace)
  model = paper_stats.machine_model(here)
  accelerator = paper_stats.on_accelerator(here)
  same, others = [], {}
  for machine, pace in paces:
    if paper_stats.machine_model(machine) == model:
      same.append(pace)
    elif paper_stats.on_accelerator(machine) == accelerator:
      others.setdefault(paper_stats.machine_model(machine), []).append(pace)
  there = f"on other {'accelerator' if accelerator else 'CPU'} machines"
  scaled, factors, compared = [], [], 0
  for theirs in others.values():
    if (measured := _factor(same + settled, theirs)) is not None:
      factors.append(measured[0])
      compared += measured[1]
      scaled += [p._replace(seconds_per_round=p.seconds_per_round * measured[0])
                 for p in theirs]
  if factors:
    return _Paces(same, running, scaled, there, factors, compared)
  as_kept = [] if same else [p for theirs in others.values() for p in theirs]
  return _Paces(same, running, as_kept, there, [], 0)


def _pace(paces: _Paces, table: paper_tables.Table, row: paper_tables.Row,
          images: int) -> tuple[float, str] | None:
  """Estimated seconds a round of a row's run, and what the estimate rests
  on, the first of: the row's kept seeds; kept runs of its scheme and size
  (attacked or not, as it is); the runs of its scheme and size training
  now, at their pace so far (a scheme's first run sets its pace before it
  lands); kept runs of its size; runs of its size training now; then the
  same three kinds of record kept on the other machines (``paces.elsewhere``,
  scaled to this one where measured); every run kept here, then every run
  kept on the other machines, scaled by size (seconds per image). Each kept
  pace is the median of the :data:`_NEWEST` newest such records, so the
  estimate follows the code's pace as it changes. None without a kept or
  running run."""
  scheme, _, attacked = kind = _kind(row, images)
  alike, what = _alike(paces.kept, attacked)
  far, what_far = _alike(paces.elsewhere, attacked)
  there = f"kept {paces.there}" + (", scaled to this one" if paces.factors else "")
  now = "training now, so far"
  run = (table.name, row.slug, kind)
  this_row = lambda paces_of: [p for p in paces_of if (p.table, p.slug, p.kind) == run]
  for chosen, basis in (
      (this_row(paces.kept), "its kept seeds"),
      ([p for p in alike if p.kind == kind], f"the kept {scheme} {what} of its size"),
      ([p for p in paces.running if p.kind == kind], f"the {scheme} runs of its size {now}"),
      ([p for p in alike if p.kind[1:] == kind[1:]], f"the kept {what} of its size"),
      ([p for p in paces.running if p.kind[1:] == kind[1:]], f"the runs of its size {now}"),
      (this_row(paces.elsewhere), f"its seeds {there}"),
      ([p for p in far if p.kind == kind], f"the {scheme} {what_far} of its size {there}"),
      ([p for p in far if p.kind[1:] == kind[1:]], f"the {what_far} of its size {there}")):
    if chosen:
      return _median_pace(chosen), f"{basis} ({_count(chosen)})"
  for pool, basis in ((alike, f"the kept {what}"), (far, f"the {what_far} {there}")):
    if pool:
      per_image = statistics.median(p.seconds_per_round / p.kind[1] for p in _newest(pool))
      return images * per_image, f"{basis}, scaled by size ({_count(pool)})"
  return None


def _alike(paces: list[_Pace], attacked: bool) -> tuple[list[_Pace], str]:
  """The attacked ``paces`` for an attacked run, the others for one without
  an attack, and their name; all of them, "runs", where there are none."""
  alike = [p for p in paces if p.kind[2] == attacked]
  if alike:
    return alike, "attacked runs" if attacked else "runs without attack"
  return paces, "runs"


def _count(paces: list[_Pace]) -> str:
  """How many records a pace rests on: ``"2"``, or ``"newest 3 of 7"``."""
  used = len(_newest(paces))
  return str(used) if used == len(paces) else f"newest {used} of {len(paces)}"


def _plan(path: str, out: str) -> int:
  """Prints what ``queue`` would still run from the file, in order, each run
  with its estimated hours (at the paces of the records kept on this kind of
  machine, CPU or accelerator, and of this machine's model where it kept
  any), and their sum."""
  jobs = _queue(path, out)
  paces = _paces(out, host_devices.machine())
  index = paper_runner.record_index(out)
  planned: set[tuple[str, ...]] = set()  # the commands listed
  hours, without = 0.0, 0
  for job in jobs:
    for row in job.rows:
      extra = row.reduced if job.reduced else job.extra
      if datasets.reachable(row.dataset):
        print(f"{job.table.name} {row.name}: not run here (data not reachable on this "
              "machine)")
        continue
      for seed in job.row_seeds(row):
        argv = tuple(row.argv(seed, "OUT", extra))
        if argv in planned or paper_runner.is_kept(out, job.table, row, seed, extra):
          continue  # listed above, or kept (for this table or another)
        planned.add(argv)
        name = f"{job.table.name} {row.name} seed {seed}{' (reduced)' if job.reduced else ''}"
        estimate = _estimate(paces, index, out, job, row, seed)
        if estimate is None:
          print(f"{name}: no estimate (no kept record to go by)")
          without += 1
          continue
        print(f"{name}: about {estimate.seconds / 3600:.1f} h ({estimate.basis})")
        hours += estimate.seconds / 3600
  runs = f"{len(planned)} run{'' if len(planned) == 1 else 's'}"
  basis = _basis(paces)
  print(f"{runs} to go: about {hours:.1f} run-hours at {basis}"
        + (f", and {without} without an estimate" if without else ""))
  return 0


class _Estimate(NamedTuple):
  """A run's seconds left, as ``plan`` gives them."""

  seconds: float
  basis: str  # what they rest on, e.g. "at round 50/200, interrupted; at its pace so far"
  running: bool  # a process runs it now


def _estimate(paces: _Paces, index: dict, out: str, job: Job, row: paper_tables.Row,
              seed: int) -> _Estimate | None:
  """The seconds left of a (row, seed)'s run: a started run's rounds left at
  its pace so far, else its rounds at :func:`_pace`'s; None without a kept or
  running run to go by."""
  extra = row.reduced if job.reduced else job.extra
  rounds, images = _run_size(row, seed, extra)
  # run_states knows the paper's and the reduced settings' runs, not others.
  states = [] if job.extra else paper_runner.run_states(out, job.table, row, index)
  started = next((s for s in states if (s.seed, s.reduced) == (seed, job.reduced)
                  and not s.older and 0 < s.round <= rounds), None)
  if started is not None and started.seconds:
    how = "running now" if started.running is not None else "interrupted"
    return _Estimate((rounds - started.round) * started.seconds / started.round,
                     f"at round {started.round}/{rounds}, {how}; at its pace so far",
                     started.running is not None)
  if (pace := _pace(paces, job.table, row, images)) is None:
    return None
  return _Estimate(rounds * pace[0], f"{rounds} rounds at the pace of {pace[1]}", False)


class _Budget:
  """``--hours``: which runs may start, by ``plan``'s estimates of them
  against the hours left (a batch job's wall-clock limit, a session's end).

  A run with no estimate is not started (nothing says it would end in
  time). The paces are read again after each run, so a run that lands sets
  the estimates of those after it.
  """

  def __init__(self, hours: float, out: str, machine: str):
    self.hours = hours
    self.deadline = time.monotonic() + hours * 3600
    self.out, self.machine = out, machine
    self._paces: _Paces | None = None
    self._index: dict | None = None
    self.later: dict[str, None] = {}  # the runs passed over, in order, each once

  def ran(self) -> None:
    """A run ended: the next estimate reads the records again."""
    self._paces = self._index = None

  def passes_over(self, job: Job, row: paper_tables.Row, seed: int) -> str:
    """Why the (row, seed) is not started (``""``: start it, or it is kept,
    or another process runs it, which ``run_row`` says)."""
    extra = row.reduced if job.reduced else job.extra
    if paper_runner.is_kept(self.out, job.table, row, seed, extra):
      return ""
    if self._paces is None:
      self._paces = _paces(self.out, self.machine)
      self._index = paper_runner.record_index(self.out)
    left = (self.deadline - time.monotonic()) / 3600
    estimate = _estimate(self._paces, self._index, self.out, job, row, seed)
    if estimate is None:
      return (f"no estimate of its hours (no kept record to go by), {left:.2f} of "
              f"--hours {self.hours:g} left")
    if estimate.running or estimate.seconds / 3600 <= left:
      return ""
    # Two decimals: "0.2 h, 0.2 left" read as a run that fits.
    return (f"about {estimate.seconds / 3600:.2f} h ({estimate.basis}), {left:.2f} of "
            f"--hours {self.hours:g} left")


def _basis(paces: _Paces) -> str:
  """What a plan's sum counts at (its last line)."""
  if not paces.factors:
    where = "on this machine" if paces.kept else paces.there
    return (f"the paces of the records kept {where}" if paces.kept or paces.elsewhere
            else "the kept records' paces")
  ours = {(True, True): "the records kept or training on this machine",
          (True, False): "the records kept on this machine",
          (False, True): "the runs training on this machine"}[bool(paces.kept), bool(paces.running)]
  machines = len(paces.factors)
  return (f"the paces of {ours} and of the records kept {paces.there}, times this machine's "
          f"pace over theirs ({', '.join(f'{f:.2f}' for f in sorted(paces.factors))} on {machines} "
          f"machine{'' if machines == 1 else 's'}, from {paces.compared} kind"
          f"{'' if paces.compared == 1 else 's'} of run both have)")


def main(argv: list[str] | None = None) -> int:
  """Runs the command; returns the exit code.

  Ctrl-C and SIGTERM (``kill``) stop it alike, in one line, with exit code
  130 (SIGINT) or 143 (SIGTERM): the sweep's own, naming the checkpoint of
  the run in progress, when a run was interrupted.
  """
  with interrupts.sigterm_as_interrupt():
    try:
      return _main(sys.argv[1:] if argv is None else argv)
    except KeyboardInterrupt as e:  # before or between the runs
      print("reproduce.py: interrupted; nothing run", file=sys.stderr)
      return interrupts.exit_code(e)


def _main(argv: list[str]) -> int:
  """:func:`main` with SIGTERM raised as an interruption."""
  try:
    args = build_parser().parse_args(argv)
    if args.target != "report" and args.report != DEFAULT_REPORT:
      raise ValueError(f"--report belongs to 'report', not to {args.target}")
    if args.hours is not None:
      if args.target in ("report", "list", "plan"):
        raise ValueError(f"--hours belongs to a table or 'queue', not to {args.target}")
      if not math.isfinite(args.hours) or args.hours <= 0:
        raise ValueError(f"--hours must be a number of hours > 0, got {args.hours:g}")
    if args.target == "list":
      _no_row_flags(args)
      _check_records_folder(args.out)
      return _list(args.table, args.out)
    if args.target == "report":
      _no_second_argument(args)
      _no_row_flags(args)
      _check_report(args.out, args.report)
      try:
        path = paper_report.write_report(
            args.out, args.report, "python experiments/reproduce.py report"
            + ("" if args.out == DEFAULT_OUT else f" --out {args.out}"))
      except OSError as e:
        raise ValueError(f"--report {args.report}: {e.strerror or e}: "
                         f"{e.filename or args.report}") from None
      print(f"wrote {path}", file=sys.stderr)
      return 0
    if args.target in ("queue", "plan") and args.table is None:
      raise ValueError(f"{args.target} needs a file: reproduce.py {args.target} FILE")
    if args.target in ("queue", "plan"):
      _no_row_flags(args)
    if args.target == "plan":
      _check_records_folder(args.out)
      return _plan(args.table, args.out)
    if args.target == "queue":
      jobs = _queue(args.table, args.out)
    else:
      jobs = [_job(args)]
    experiment.check_out(args.out)
  except (experiment.UsageError, ValueError) as e:
    print(f"reproduce.py: error: {e}", file=sys.stderr)
    return 2
  machine = host_devices.machine()
  budget = None if args.hours is None else _Budget(args.hours, args.out, machine)
  failed, elsewhere, away = [], [], []
  try:
    for job in jobs:
      job_failed, job_elsewhere, job_away = _run_job(job, args.out, machine, budget)
      failed += job_failed
      elsewhere += job_elsewhere
      away += job_away
  except KeyboardInterrupt as e:
    if not isinstance(e, interrupts.Reported):  # else the sweep's line named its checkpoint
      print(f"reproduce.py: interrupted; kept records and the checkpoint of the run in "
            f"progress are in {args.out}: the same command continues", file=sys.stderr)
    return interrupts.exit_code(e)
  if elsewhere:
    print(f"reproduce.py: left to the processes running them: {', '.join(elsewhere)}",
          file=sys.stderr)
  if budget is not None and budget.later:
    print(f"reproduce.py: not started within --hours {args.hours:g}, left for a later "
          f"command: {', '.join(budget.later)}", file=sys.stderr)
  if failed:
    print(f"reproduce.py: error: failed: {', '.join(failed)}", file=sys.stderr)
    return 1
  asked = sum(len(job.rows) for job in jobs)
  if away and len(away) == asked:  # nothing could run here
    print(f"reproduce.py: error: data not reachable on this machine for every row asked "
          f"({', '.join(dict.fromkeys(away))}); nothing run", file=sys.stderr)
    return 1
  tables = ", ".join(dict.fromkeys(job.table.name for job in jobs))
  print(f"reproduce.py: records of {tables} in {args.out}; "
        "run 'python experiments/reproduce.py report' to update the report", file=sys.stderr)
  return 0


if __name__ == "__main__":
  try:
    interrupts.end(main())
  except BrokenPipeError:  # its reader stopped early (`plan ... | head`): no traceback
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(1)
