"""Plots of a sweep's records (matplotlib): the metric against round and
against upstream bandwidth.

UAI 2021 Sec. 4.1 measures a scheme by its accuracy and by what a client
sends up to the round it is reached; :func:`plot_records` draws both, one
line per run, from the records of ``fedjax_dp.simulation.run`` (a run's
other seeds, where given, as thin translucent lines of its colour):

- ``<prefix>accuracy.png``: the run's selection metric (accuracy, or
  balanced accuracy on medical-synth) at every evaluated round;
- ``<prefix>accuracy_vs_upstream.png``: the same against the average
  upstream KB per client up to that round (``bandwidth.cost_kb``, the
  paper's formula), on a log axis.

:func:`plot_epsilon` draws epsilon against round for the DP runs, from the
accountant each run used (``fedjax_dp.privacy.accounting.epsilon_curve``).
:func:`plot_attack` draws a backdoor's metric against round, beside the
model accuracy where asked (thesis Figure 6.1). :func:`plot_ratio_curve`
draws each scheme's best accuracy against the compression ratio r (the
Fed-SMP paper's Fig. 3).

Files are written atomically (a temporary file renamed into place).
"""

from __future__ import annotations

import math
import os
import pathlib

from fedjax_dp import bandwidth
from fedjax_dp.atomic import atomic_file
from fedjax_dp.privacy import accounting


def _pyplot():
  """matplotlib's pyplot on the file-only Agg backend, imported when a plot is
  drawn: at module level it would add about a second to every command."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  return plt


_LABELS = {"accuracy": "test accuracy", "balanced_accuracy": "balanced accuracy"}


def _label(record: dict) -> str:
  if "label" in record:
    return record["label"]
  ratio = record["ratio"]
  return record["scheme"] if ratio >= 1.0 else f"{record['scheme']} r={ratio * 100:g}%"


def _base(record: dict) -> tuple:
  """What a scheme and its -DP variant share: the base scheme, the ratio, and
  the rest of the label where one is given (a report row's: ``FL-STD-DP
  banded b=4`` and ``FL-STD-DP BLT m=60`` are two lines, not one colour)."""
  scheme, base = record["scheme"], record["scheme"].removesuffix("-DP")
  label = record.get("label")
  return base, record["ratio"], None if label is None else label.replace(scheme, base, 1)


def _styles(records: list[dict]) -> list[dict]:
  """Line styles: a scheme and its -DP variant at one ratio share a colour,
  the DP line dashed, so the 16 lines of UAI Table 1 at one ratio stay
  readable (tab10, or tab20 beyond 10 colours); rows of one scheme that
  differ otherwise (their labels) get colours of their own."""
  bases = list(dict.fromkeys(_base(r) for r in records))
  cmap = _pyplot().get_cmap("tab10" if len(bases) <= 10 else "tab20")
  return [{"color": cmap(bases.index(_base(r)) % cmap.N),
           "linestyle": "--" if r["scheme"].endswith("-DP") else "-"} for r in records]


def _upstream_kb(record: dict, round_: int) -> float:
  rate = record["clients_per_round"] / record["num_clients"]
  return bandwidth.cost_kb(record["upstream_values"], round_, rate, record["upstream_bits"])


def _save(fig, path: pathlib.Path) -> None:
  try:
    with atomic_file(path) as f:
      fig.savefig(f, format="png", dpi=120, bbox_inches="tight")
  finally:
    _pyplot().close(fig)


def plot_records(records: list[dict], out_dir: str | os.PathLike,
                 prefix: str = "",
                 other_seeds: list[list[dict]] | None = None) -> list[pathlib.Path]:
  """Writes the two plots of ``records`` into ``out_dir``.

  Args:
    records: Run records (each with its ``history``).
    out_dir: Folder (created if needed).
    prefix: Prepended to the file names.
    other_seeds: For each record, the records of its other seeds (same
      row, another seed), drawn thin and translucent in the record's
      colour and without a legend entry, so that a row's spread over seeds
      shows; ``None``: none.

  Returns:
    The written paths.

  Raises:
    ValueError: No records, a record without history, or ``other_seeds``
      not one list per record.
  """
  other_seeds = [[] for _ in records] if other_seeds is None else other_seeds
  if len(other_seeds) != len(records):
    raise ValueError(f"plot_records needs one list of other seeds per record, "
                     f"got {len(other_seeds)} for {len(records)} records")
  if not records or any(not r.get("history") for r in records + sum(other_seeds, [])):
    raise ValueError("plot_records needs records with their history")
  out = pathlib.Path(out_dir)
  out.mkdir(parents=True, exist_ok=True)
  metric = records[0].get("selection_metric", "accuracy")
  title = records[0].get("dataset", "fashion-mnist")
  paths = []
  for name, x_of, xlabel, log in (
      ("accuracy", lambda r, h: h["round"], "round", False),
      ("accuracy_vs_upstream", lambda r, h: _upstream_kb(r, h["round"]),
       "upstream KB per client up to the round (UAI Sec. 4.1)", True)):
    fig, ax = _pyplot().subplots(figsize=(7, 4.5))
    for record, others, style in zip(records, other_seeds, _styles(records)):
      history = record["history"]
      ax.plot([x_of(record, h) for h in history], [h[metric] for h in history],
              label=_label(record), linewidth=1.2, **style)
      for other in others:
        ax.plot([x_of(other, h) for h in other["history"]],
                [h[metric] for h in other["history"]], linewidth=0.6, alpha=0.4, **style)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(_LABELS.get(metric, metric))
    if log:
      ax.set_xscale("log")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    path = out / f"{prefix}{name}.png"
    _save(fig, path)
    paths.append(path)
  return paths


def _epsilon_curve(record: dict, config: dict, rounds: list[int]) -> list[float]:
  """The run's epsilon after each round, as its accountant gives it: the
  whole run's epsilon at every round where that is what it reports (Monte
  Carlo accounting, BLT's one Gaussian release); cyclic Poisson sampling's
  ceil(t / b) steps; otherwise the subsampled Gaussian over t rounds. A
  curve that does not end at the record's own ``epsilon_final`` models
  another mechanism than the run's (CDP-LQ's record-level steps, FL-SIGN-DP's
  discrete Gaussian bound): the run's final epsilon is drawn flat instead,
  an upper bound at every round, never a curve below the run's."""
  if record.get("epsilon_method") == "monte-carlo" or record.get("noise_correlation") == "blt":
    return [record["epsilon_final"]] * len(rounds)
  rate = record["clients_per_round"] / record["num_clients"]
  accountant = config.get("accountant", "moments")
  cycle = config.get("cycle_length") or 1
  if cycle > 1:
    curve = accounting.cyclic_epsilon_curve(record["noise_multiplier"], rate, cycle, rounds,
                                            record["delta"], accountant)
  else:
    curve = accounting.epsilon_curve(
        record["noise_multiplier"], rate, rounds, record["delta"], accountant,
        config.get("sampling", "poisson"), num_clients=record["num_clients"],
        truncated_cohort=config.get("max_cohort"))
  final = record.get("epsilon_final")  # None in records older than the field
  if final is not None and rounds[-1] == record.get("rounds") and not math.isclose(
      curve[-1], final, rel_tol=1e-3):
    return [final] * len(rounds)
  return curve


def plot_epsilon(records: list[dict], configs: list[dict],
                 path: str | os.PathLike) -> pathlib.Path:
  """Epsilon after each round of every DP run, as its accountant gives it
  (:func:`_epsilon_curve`: flat where the accountant reports the whole
  run's epsilon for every round).

  Args:
    records: Run records; those without noise (no ``epsilon``) are skipped.
    configs: The sweep settings of each record (``accountant``,
      ``sampling``, ``max_cohort``), as results.json stores them.
    path: The PNG to write.

  Returns:
    ``path``.
  """
  path = pathlib.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  fig, ax = _pyplot().subplots(figsize=(7, 4.5))
  for record, config, style in zip(records, configs, _styles(records)):
    if record.get("epsilon") is None:
      continue
    rounds = list(range(1, record["rounds"] + 1))
    eps = _epsilon_curve(record, config, rounds)
    ax.plot(rounds, eps, label=_label(record), linewidth=1.2, **style)
  ax.set_xlabel("round")
  deltas = {r["delta"] for r in records if r.get("epsilon") is not None}
  ax.set_ylabel(f"epsilon (delta = {deltas.pop():g})" if len(deltas) == 1 else "epsilon")
  ax.grid(alpha=0.3)
  if ax.lines:
    ax.legend(fontsize=8)
  else:
    ax.text(0.5, 0.5, "no DP run", ha="center", va="center", transform=ax.transAxes)
  _save(fig, path)
  return path


_ATTACK_LABELS = {"class_accuracy": "accuracy on the attacked class",
                  "attack_accuracy": "attack accuracy (source taken for target)",
                  "main_accuracy": "accuracy without the source class"}


def plot_attack(records: list[dict], metric: str, path: str | os.PathLike,
                title: str = "", with_accuracy: bool = False) -> pathlib.Path:
  """A backdoor's ``metric`` (``fedjax_dp.features.attack.adversary.METRICS``) at every
  evaluated round, one line per run; with ``with_accuracy``, each run's
  model accuracy too (solid; the metric dashed), as thesis Figure 6.1.

  Raises:
    ValueError: A record whose history lacks ``metric``.
  """
  path = pathlib.Path(path)
  if any(metric not in h for r in records for h in r.get("history", [])) or not records:
    raise ValueError(f"plot_attack needs records whose history has {metric!r}")
  path.parent.mkdir(parents=True, exist_ok=True)
  fig, ax = _pyplot().subplots(figsize=(7, 4.5))
  for record in records:
    rounds = [h["round"] for h in record["history"]]
    label = _label(record)
    line, = ax.plot(rounds, [h[metric] for h in record["history"]], "--", linewidth=1.2,
                    label=f"{label}: {_ATTACK_LABELS[metric]}" if with_accuracy else label)
    if with_accuracy:
      ax.plot(rounds, [h["accuracy"] for h in record["history"]], color=line.get_color(),
              linewidth=1.2, label=f"{label}: test accuracy")
  ax.set_xlabel("round")
  ax.set_ylabel("accuracy" if with_accuracy else _ATTACK_LABELS[metric])
  ax.set_ylim(-0.02, 1.02)
  ax.set_title(title or records[0].get("dataset", ""))
  ax.grid(alpha=0.3)
  ax.legend(fontsize=7)
  _save(fig, path)
  return path


def plot_ratio_curve(curves: dict[str, list[tuple[float, float, float, float]]],
                     path: str | os.PathLike, title: str = "") -> pathlib.Path:
  """Best accuracy against the compression ratio r, one line per scheme, on
  a log r axis, with the [min, max] over seeds as an error bar.

  Args:
    curves: For each scheme, (r, mean, min, max) sorted by r
      (``fedjax_dp.paper.stats.ratio_curves``).
    path: The PNG to write.
    title: The plot's title.

  Raises:
    ValueError: No point.
  """
  if not any(curves.values()):
    raise ValueError("plot_ratio_curve needs at least one point")
  path = pathlib.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  fig, ax = _pyplot().subplots(figsize=(6, 4))
  for scheme, curve in curves.items():
    ratios, means, lows, highs = zip(*curve)
    ax.errorbar(ratios, means, yerr=[[m - lo for m, lo in zip(means, lows)],
                                     [hi - m for m, hi in zip(means, highs)]],
                marker="o", capsize=3, linewidth=1.2, label=scheme)
  ax.set_xscale("log")
  ax.set_xlabel("compression ratio r = k / d")
  ax.set_ylabel("best test accuracy")
  ax.set_title(title)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  _save(fig, path)
  return path


def plot_trained(rows: dict[str, dict[str, tuple[float, ...]]],
                 path: str | os.PathLike, title: str = "") -> pathlib.Path:
  """A study's rows by three measures of the model: its best accuracy, the
  mean over the last quarter of the rounds and the accuracy after the last
  round; each seed a dot, the mean over the seeds a bar.

  Args:
    rows: For each row's label, {"best", "late", "final"}: each seed's value
      (``fedjax_dp.paper.stats.Summary``'s ``best``, ``late``, ``finals``).
    path: The PNG to write.
    title: The plot's title.

  Raises:
    ValueError: No row.
  """
  if not rows:
    raise ValueError("plot_trained needs at least one row")
  path = pathlib.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  measures = (("best", "best"), ("late", "mean of the last quarter of the rounds"),
              ("final", "after the last round"))
  fig, ax = _pyplot().subplots(figsize=(7, 1.3 + 0.55 * len(rows)))
  height = 0.25
  for k, (key, label) in enumerate(measures):
    for i, values in enumerate(rows.values()):
      seeds = [v for v in values[key] if v is not None]
      if not seeds:
        continue
      y = i + (k - 1) * height
      ax.barh(y, sum(seeds) / len(seeds), height=height * 0.9, color=f"C{k}",
              alpha=0.45, label=label if i == 0 else None)
      ax.plot(seeds, [y] * len(seeds), "o", color=f"C{k}", markersize=3)
  ax.set_yticks(range(len(rows)), list(rows), fontsize=8)
  ax.invert_yaxis()
  ax.set_xlabel("test accuracy (dots: seeds; bars: their mean)")
  ax.set_xlim(0, 1)
  ax.set_title(title, fontsize=9)
  ax.grid(alpha=0.3, axis="x")
  ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=3)
  fig.tight_layout()
  _save(fig, path)
  return path
