"""A row's result over its seeds, and its verdict against the paper (the papers' app).

:func:`summarize` turns a row's kept records (``fedjax_dp.paper.runner``)
into a :class:`Summary`: the mean best accuracy and its spread over the
seeds, each seed's best round and epsilon, where the run settled, what was
still moving when a reduced run stopped; :attr:`Summary.verdict` says whether
it is within :data:`TOLERANCE` of the paper's figure, or why not.
:func:`claim_check` checks a table's claim about the curve over r (Fed-SMP
Table I / Fig. 3) and, where the table runs them, against DP-FedAvg and
FedAvg (Tables I-III).
"""

from __future__ import annotations

import dataclasses
import math
import re
import statistics

from fedjax_dp.paper.tables import DP_FEDAVG, FEDAVG, Row
from fedjax_dp.simulation import record as record_lib

TOLERANCE = 0.03
# A run "does not converge" (the thesis' "-") when its accuracy falls below its
# data set's chance level plus this in the last fifth of its evaluations
# (``settled``; :func:`diverged_below`): 0.2 on the 10-class images, 0.6 on
# IMDB's balanced binary test set.
DIVERGED_MARGIN = 0.1


def chance(dataset: str) -> float:
  """The accuracy of a model that learned nothing on ``dataset``
  (``Dataset.chance``: 1 / its number of classes)."""
  from fedjax_dp import datasets  # pylint: disable=import-outside-toplevel
  return datasets.get_dataset(dataset).chance


def diverged_below(dataset: str) -> float:
  """The accuracy below which a run on ``dataset`` has not converged: its
  chance level plus :data:`DIVERGED_MARGIN`."""
  return chance(dataset) + DIVERGED_MARGIN

# A reduced run stops early: a metric whose mean over the run's last fifth of
# evaluations differs from the fifth before by more than this, and by more
# than twice the difference's standard error, is "still rising" (or falling)
# when the run stops, and the report says so.
MOVING = 0.02


@dataclasses.dataclass(frozen=True)
class Summary:
  """A row's result over its seeds.

  Attributes:
    row: The row.
    seeds: Seeds run.
    accuracy: Mean best accuracy (the selection metric; the row's
      ``model_metric`` at the best round) over the seeds.
    spread: (min, max) over the seeds.
    best_rounds: Each seed's round of its best accuracy, in the order of
      ``seeds`` (a mean of rounds is no seed's round).
    epsilon: Mean epsilon at the best round (None without DP).
    epsilons: Each seed's epsilon at its best round, in the order of
      ``seeds`` (empty without DP).
    rounds: Rounds run (the smallest over seeds).
    seconds: Wall seconds, summed over seeds.
    accelerator_seconds: The part of ``seconds`` run on an accelerator
      (:func:`on_accelerator`).
    settled: Mean over the seeds of the lowest model metric in the last
      fifth of the run's evaluations (:func:`settled_low`): where a run ends,
      not its best; None without a history.
    attack_value: Mean of the row's ``attack_metric`` at the best round.
    reduced: The records are of the row's reduced setting.
    moves: (metric, change) pairs: the model and attack metrics still
      moving at the end of every seed's run (:func:`late_move`: the last
      fifth of the evaluations against the fifth before, by more than
      ``MOVING`` and twice its standard error), mean change over the seeds.
    best: Each seed's best model metric, seed order.
    attacks: Each seed's attack metric at its best round, seed order (empty
      for a row without one).
    late: Each seed's mean model metric over the last quarter of its rounds
      (:func:`late_mean`: rounds 151-200 of a 200-round run), seed order.
    finals: Each seed's model metric at its last evaluation, seed order.
    final_epsilons: Each seed's epsilon after its last round (empty
      without DP).
    at_paper_round: Each seed's model metric at the paper's best round (its
      last evaluation up to it), seed order; empty where the paper names no
      round or a run has no history.
    nonfinite_rounds: Each seed's first round whose model was not finite
      (None: finite throughout), seed order.
  """

  row: Row
  seeds: tuple[int, ...]
  accuracy: float
  spread: tuple[float, float]
  best_rounds: tuple[int, ...]
  epsilon: float | None
  rounds: int
  seconds: float
  accelerator_seconds: float = 0.0
  settled: float | None = None
  attack_value: float | None = None
  reduced: bool = False
  moves: tuple[tuple[str, float], ...] = ()
  epsilons: tuple[float, ...] = ()
  best: tuple[float, ...] = ()
  attacks: tuple[float, ...] = ()
  late: tuple[float, ...] = ()
  finals: tuple[float, ...] = ()
  final_epsilons: tuple[float, ...] = ()
  at_paper_round: tuple[float, ...] = ()
  nonfinite_rounds: tuple[int | None, ...] = ()

  @property
  def difference(self) -> float | None:
    """Ours minus the paper's accuracy."""
    return None if self.row.paper is None else self.accuracy - self.row.paper.accuracy

  @property
  def attack_difference(self) -> float | None:
    """Ours minus the paper's attack metric (backdoor rows)."""
    if self.row.paper_attack is None or self.attack_value is None:
      return None
    return self.attack_value - self.row.paper_attack

  @property
  def numeric(self) -> bool:
    """Compared by number: run in the paper's setting, against a published
    figure (a row the paper reports as not converging has none: it is
    :attr:`qualitative`)."""
    return not self.reduced and not self.row.diverges and self.difference is not None

  @property
  def qualitative(self) -> bool:
    """Compared in words, in the paper's setting: the paper's "-" (the run
    does not converge), which has no figure to be within a tolerance of."""
    return not self.reduced and self.row.diverges

  @property
  def within(self) -> bool:
    """A :attr:`numeric` row with |difference| <= TOLERANCE (0.03) for the
    accuracy and for the attack metric; never a qualitative or reduced one
    (see :attr:`agrees`)."""
    if not self.numeric:
      return False
    diffs = [d for d in (self.difference, self.attack_difference) if d is not None]
    return all(abs(d) <= TOLERANCE + 1e-9 for d in diffs)

  @property
  def seeds_within(self) -> int:
    """How many seeds' own figures are within TOLERANCE of the paper's (the
    model metric, and the attack metric where the row compares one): the
    verdict is the mean's, and seeds can straddle it."""
    if self.row.paper is None:
      return 0
    close = lambda ours, paper: abs(ours - paper) <= TOLERANCE + 1e-9
    attacks = (self.attacks if self.row.paper_attack is not None and self.attacks
               else (None,) * len(self.best))
    return sum(close(b, self.row.paper.accuracy)
               and (a is None or close(a, self.row.paper_attack))
               for b, a in zip(self.best, attacks))

  @property
  def agrees(self) -> bool:
    """A :attr:`qualitative` row whose run does not converge either, as in
    the paper (:meth:`converges` is False)."""
    return self.qualitative and not self.converges

  @property
  def converges(self) -> bool:
    """The run ends trained: its accuracy stays at or above its data set's
    :func:`diverged_below` (chance plus ``DIVERGED_MARGIN``) over the last
    fifth of its evaluations (the best alone, without a history).

    The thesis' "-" is a run that does not converge, judged apart from its
    best accuracy (Tab. 6.1, l.1663). A run can pass a high best on its way
    and still end at chance, or swing between trained and broken rounds
    under a boosted attack (Table 6.3's FL-STD: 0.92 at round 6, 0.11 at 9).
    """
    end = self.accuracy if self.settled is None else self.settled
    return end >= diverged_below(self.row.dataset) - 1e-9

  @property
  def verdict(self) -> str:
    """"within 0.03", or why not."""
    prefix = ("reduced setting (" + " ".join(self.row.reduced) + "), not the paper's: "
              if self.reduced else "")
    broken = sorted(r for r in self.nonfinite_rounds if r is not None)
    if self.row.diverges:
      end = ("" if self.settled is None else
             f"its last fifth of evaluations down to {self.settled:.2f}, ")
      if broken:  # a NaN model "does not converge" too: said, not hidden
        end = f"its model not finite from round {broken[0]}, " + end
      if not self.converges:
        return prefix + f"does not converge ({end}best {self.accuracy:.2f}), as in the paper"
      gap = f"converges ({end}best {self.accuracy:.2f}) where the paper's does not"
    elif self.within:
      return f"within {TOLERANCE:g}" + self._seeds_clause() + self._shape_clause()
    elif self.difference is None:  # a NaN model is said here too, not hidden behind its best
      return prefix + "no published cell" + (
          f" (its model not finite from round {broken[0]})" if broken else "")
    else:
      moves = dict(self.moves) if self.reduced else {}
      gap = "; ".join(f"{name} {_gap(d)}{_moving(moves.get(key))}" for name, key, d in (
          ("accuracy", self.row.model_metric, self.difference),
          (self.row.attack_metric, self.row.attack_metric, self.attack_difference))
                      if d is not None and (self.reduced or abs(d) > TOLERANCE + 1e-9))
    if self.reduced:  # the cut may explain the gap; a reason found says more
      return prefix + gap + (f": {self.row.reason}" if self.row.reason else "")
    gap += self._seeds_clause()
    return f"{gap}: {self.row.reason}" if self.row.reason else f"{gap}: reason not yet found"

  def _seeds_clause(self) -> str:
    """`` (the mean; 1 of 3 seeds within)`` where the seeds disagree with the
    mean's verdict; nothing for one seed or where all agree."""
    n, k = len(self.best), self.seeds_within
    if n < 2 or k == (n if self.within else 0):
      return ""
    return f" (the mean; {k} of {n} seeds within)"

  def _shape_clause(self) -> str:
    """Where the best is within but the run's course is not: at the paper's
    best round ours is off by more than TOLERANCE (an early peak that then
    falls, say), the clause gives ours there; nothing otherwise."""
    if not self.at_paper_round or self.row.paper is None:
      return ""
    there = statistics.fmean(self.at_paper_round)
    off = there - self.row.paper.accuracy
    if abs(off) <= TOLERANCE + 1e-9:
      return ""
    rounds = "/".join(map(str, self.best_rounds))
    return (f" on the best (round {rounds}); at the paper's best round, "
            f"{self.row.paper.round}, ours is {there:.3f}, off by {off:+.2f}")


def _moving(change: float | None) -> str:
  if change is None:
    return ""
  way = "rising" if change > 0 else "falling"
  return f" (still {way} at the cut: {change:+.2f} between the run's last two fifths)"


# The history's name of a record's selection metric.
_HISTORY_KEYS = {"best_accuracy": "accuracy"}


def late_move(history: list[dict], metric: str) -> tuple[float, float] | None:
  """How ``metric`` moved at the end of a run: its mean over the last fifth
  of the evaluations minus its mean over the fifth before, and the standard
  error of that difference from the spread within the two (None when a
  fifth holds fewer than 2 evaluations, or without the metric)."""
  key = _HISTORY_KEYS.get(metric, metric)
  values = [h[key] for h in history if h.get(key) is not None]
  width = len(values) // 5
  if width < 2:
    return None
  before, last = values[-2 * width:-width], values[-width:]
  error = math.sqrt((statistics.variance(before) + statistics.variance(last)) / width)
  return statistics.fmean(last) - statistics.fmean(before), error


def on_accelerator(machine: str) -> bool:
  """Whether a record's machine line (``host_devices.machine``) names GPU or
  TPU devices: ``..., 1 gpu device(s) (NVIDIA H200)``."""
  match = re.search(r"\d+ (\w+) device\(s\)", machine)
  return match is not None and match[1] != "cpu"


def machine_model(machine: str) -> str:
  """A machine line without its load: what tells runs of like pace apart
  (``AMD EPYC (family 26, model 2, AVX-512), 2 cores, 2 cpu device(s)``; a
  pinned run's ``2 cores (1 usable)`` sets it apart)."""
  return re.sub(r", load [\d.]+", "", machine)


def settled_low(history: list[dict], metric: str) -> float | None:
  """The lowest ``metric`` over the last fifth of a run's evaluations (at
  least the last one); None without the metric in the history."""
  key = _HISTORY_KEYS.get(metric, metric)
  values = [h[key] for h in history if h.get(key) is not None]
  return min(values[-max(1, len(values) // 5):]) if values else None


def late_mean(history: list[dict], metric: str, rounds: int) -> float | None:
  """The mean ``metric`` over the evaluations of rounds (3T/4, T], the
  trained model (rounds 151-200 of a 200-round run); None without them."""
  key = _HISTORY_KEYS.get(metric, metric)
  values = [h[key] for h in history if h["round"] > rounds * 3 // 4 and h.get(key) is not None]
  return statistics.fmean(values) if values else None


def summarize(row: Row, records: list[dict]) -> Summary:
  """Mean and spread of a row's kept records."""
  runs = [r["record"] for r in records]
  # A run kept for two tables counts once (see _reuse_twin).
  own = [r for r in records if "same_run_as" not in r]
  bests = [_best(r, row.model_metric) for r in runs]
  acc = [value for value, _, _ in bests]
  eps = [r["epsilon"] for r in runs if r.get("epsilon") is not None]
  attack = [entry.get(row.attack_metric, r[row.attack_metric])
            for r, (_, _, entry) in zip(runs, bests) if row.attack_metric in r]
  lows = [settled_low(r.get("history", []), row.model_metric) for r in runs]
  return Summary(row=row, seeds=tuple(r["seed"] for r in records),
                 accuracy=statistics.fmean(acc), spread=(min(acc), max(acc)),
                 best_rounds=tuple(best_round for _, best_round, _ in bests),
                 epsilon=statistics.fmean(eps) if eps else None,
                 epsilons=tuple(eps) if len(eps) == len(runs) else (),
                 rounds=min(r["rounds"] for r in runs),
                 seconds=sum(r["record"].get("seconds", 0.0) for r in own),
                 accelerator_seconds=sum(r["record"].get("seconds", 0.0) for r in own
                                         if on_accelerator(r.get("machine", ""))),
                 settled=None if None in lows else statistics.fmean(lows),
                 attack_value=statistics.fmean(attack) if attack else None,
                 reduced=any(r.get("reduced", False) for r in records),
                 moves=_moves(row, runs),
                 best=tuple(acc),
                 attacks=tuple(attack) if len(attack) == len(runs) else (),
                 late=tuple(late_mean(r.get("history", []), row.model_metric, r["rounds"])
                            for r in runs),
                 finals=tuple(_final(r, row.model_metric) for r in runs),
                 final_epsilons=tuple(r["epsilon_final"] for r in runs
                                      if r.get("epsilon_final") is not None),
                 at_paper_round=_at_paper_round(row, runs),
                 nonfinite_rounds=tuple(r.get("nonfinite_round") for r in runs))


def _gap(difference: float) -> str:
  """``off by -0.05``; ``off by -0.031`` where two decimals would round a
  difference beyond the tolerance onto it; ``within 0.03 (-0.01)`` (a
  reduced row names every compared metric)."""
  if abs(difference) <= TOLERANCE + 1e-9:
    return f"within {TOLERANCE:g} ({difference:+.2f})"
  shown = f"{difference:+.2f}"
  if abs(float(shown)) <= TOLERANCE:
    shown = f"{difference:+.3f}"
  return f"off by {shown}"


def _best(run: dict, metric: str) -> tuple[float, int, dict]:
  """A record's best model metric, its round, and the evaluation it was
  taken at (``{}`` for the record's own figures). A record whose model went
  non-finite is recounted from its history by ``record.best_entry`` (a NaN
  model's constant prediction is no best; records kept before that rule
  counted it; the record's epsilon at its own best round is kept, an upper
  bound for the earlier round recounted)."""
  key = _HISTORY_KEYS.get(metric, metric)
  history = [h for h in run.get("history", []) if h.get(key) is not None]
  if not any(h.get("nonfinite") for h in history):
    return run[metric], run["best_round"], {}
  entry = record_lib.best_entry(history, key)
  return entry[key], entry["round"], entry


def _final(run: dict, metric: str) -> float | None:
  """The model metric at a run's last evaluation."""
  key = _HISTORY_KEYS.get(metric, metric)
  history = run.get("history") or [{}]
  return history[-1].get(key)


def _at_paper_round(row: Row, runs: list[dict]) -> tuple[float, ...]:
  """Each run's model metric at its last evaluation up to the paper's best
  round; empty unless every run has one."""
  if row.paper is None or row.paper.round is None:
    return ()
  key = _HISTORY_KEYS.get(row.model_metric, row.model_metric)
  found = [[h[key] for h in r.get("history", [])
            if h.get(key) is not None and h["round"] <= row.paper.round] for r in runs]
  return tuple(v[-1] for v in found) if all(found) else ()


def _moves(row: Row, runs: list[dict]) -> tuple[tuple[str, float], ...]:
  """The metrics still moving at the end of every seed's run, the same way,
  with their mean change."""
  out = []
  for metric in filter(None, (row.model_metric, row.attack_metric)):
    moves = [late_move(r.get("history", []), metric) for r in runs]
    if not moves or None in moves:
      continue
    changes = [change for change, error in moves if abs(change) > max(MOVING, 2 * error)]
    if len(changes) == len(moves) and len({c > 0 for c in changes}) == 1:
      out.append((metric, statistics.fmean(changes)))
  return tuple(out)


def ratio_curves(summaries: list[Summary]) -> dict[str, list[tuple[float, float, float, float]]]:
  """Each scheme's rows by ratio: (r, mean accuracy, min, max over seeds),
  sorted by r."""
  return {scheme: sorted((s.row.ratio, s.accuracy, *s.spread) for s in summaries
                         if s.row.scheme == scheme)
          for scheme in dict.fromkeys(s.row.scheme for s in summaries)}


def _within_noise(gaps: dict[str, float], noise: float | None) -> str:
  """The clause naming the ``gaps`` (name: size) no larger than ``noise``,
  the widest spread between one row's seeds; empty where none is, or the
  spread is unknown."""
  weak = [name for name, d in gaps.items() if noise is not None and abs(d) <= noise + 1e-9]
  if not weak:
    return ""
  return (f", the {' and the '.join(weak)} within the widest spread between one row's seeds "
          f"({noise:.3f}): no evidence of {'them' if len(weak) > 1 else 'it'}")


def _against_baselines(summaries: list[Summary], noise: float | None) -> list[str]:
  """Fed-SMP Tables I-III's comparison (Sec. 6.3, l.181-183): each private
  sparsifier's best over its ratios below 1 against DP-FedAvg (Fed-SMP-rand_k
  at r = 1: the same sigma, q and T, so the same final epsilon), and
  DP-FedAvg against FedAvg; empty without a DP-FedAvg row."""
  tagged = {s.row.tag: s for s in summaries if s.row.tag in (DP_FEDAVG, FEDAVG)}
  if (dp := tagged.get(DP_FEDAVG)) is None:
    return []
  sparse = [s for s in summaries if s.epsilon is not None and s.row.ratio < 1]
  parts = []
  for scheme in dict.fromkeys(s.row.scheme for s in sparse):
    best = max((s for s in sparse if s.row.scheme == scheme), key=lambda s: s.accuracy)
    gap = best.accuracy - dp.accuracy
    parts.append(f"{scheme} at its best r ({best.row.ratio:g}, {best.accuracy:.3f}) is "
                 f"{abs(gap):.3f} {'above' if gap > 0 else 'below'} DP-FedAvg "
                 f"({dp.accuracy:.3f})" + _within_noise({"gap": gap}, noise))
  if (plain := tagged.get(FEDAVG)) is not None:
    gap = dp.accuracy - plain.accuracy
    parts.append(f"DP-FedAvg is {abs(gap):.3f} {'above' if gap > 0 else 'below'} FedAvg "
                 f"({plain.accuracy:.3f})" + _within_noise({"gap": gap}, noise))
  return parts


def claim_check(summaries: list[Summary]) -> str:
  """Where each scheme's accuracy peaks over r, whether it rises then falls,
  and by how much (the peak over the smallest and the largest r run); with
  a DP-FedAvg row (Fed-SMP Tables I-III), each private sparsifier's best
  against it and it against FedAvg. A rise, a fall or a gap no larger than
  the widest spread between one row's seeds among ``summaries`` is said to
  be within it, no evidence; without a row of two seeds the spread is
  unknown (the report says how many rows ran at one seed)."""
  noise = max((hi - lo for s in summaries if len(s.best) > 1 for lo, hi in [s.spread]),
              default=None)
  parts = []
  for scheme, curve in ratio_curves(summaries).items():
    if all(r == 1.0 for r, *_ in curve):  # uncompressed only (Table I's FedAvg): no curve
      continue
    if len(curve) < 3:
      parts.append(f"{scheme}: {len(curve)} ratio(s) run, too few to tell")
      continue
    peak = max(range(len(curve)), key=lambda i: curve[i][1])
    (low, first, *_), (r, best, *_), (high, last, *_) = curve[0], curve[peak], curve[-1]
    rise, fall = f"+{best - first:.3f} over r = {low:g}", f"+{best - last:.3f} over r = {high:g}"
    sides = {"rise": best - first, "fall": best - last}
    if peak == 0:
      shape, sides = f"highest at the smallest r run ({fall})", {"fall": sides["fall"]}
    elif peak == len(curve) - 1:
      shape, sides = f"highest at the largest r run ({rise})", {"rise": sides["rise"]}
    else:
      shape = f"rises then falls ({rise}, {fall})"
    shape += _within_noise(sides, noise)
    parts.append(f"{scheme} peaks at r = {r:g} ({best:.3f}): {shape}")
  return "; ".join(parts + _against_baselines(summaries, noise))
