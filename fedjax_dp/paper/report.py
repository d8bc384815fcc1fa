"""The reproduction report: docs/REPRODUCTION.md and its plots (the papers' app).

``experiments/reproduce.py report`` calls :func:`write_report`: for every
table (``fedjax_dp.paper.tables``) its stated setting, each row's paper cell
beside ours over the kept records (``fedjax_dp.paper.runner``) and its
verdict (``fedjax_dp.paper.stats``), the rows not run and why, and the plots.
"""

from __future__ import annotations

import os
import pathlib
import shlex
from fedjax_dp.atomic import atomic_file
from fedjax_dp.paper.runner import SEEDS_HEADLINE, kept_records, record_index
from fedjax_dp.paper.stats import MOVING, TOLERANCE, Summary, claim_check, ratio_curves, summarize
from fedjax_dp.paper.tables import Row, Table, tables

# The sweep's data set when a row names none (``Row.dataset``).
DEFAULT_DATASET = "fashion-mnist"
_METRIC_NAMES = {"class_accuracy": "class", "attack_accuracy": "attack"}
_MODEL_NAMES = {"best_accuracy": "", "main_accuracy": " (without the source class)"}


def paper_cell(row: Row) -> str:
  """The paper's figure of a row: ``0.78 @197 ε 1``, ``- (does not converge)``."""
  if row.diverges:
    return "- (does not converge)"
  if row.paper is None:
    return "-"
  parts = [f"{row.paper.accuracy:.2f}{_MODEL_NAMES[row.model_metric]}"]
  if row.paper.round is not None:
    parts.append(f"@{row.paper.round}")
  if row.paper.epsilon is not None:
    parts.append(f"ε {row.paper.epsilon:g}")
  if row.paper_attack is not None:
    parts.append(f"; {_METRIC_NAMES[row.attack_metric]} {row.paper_attack:.2f}")
  return " ".join(parts)


def ours_cell(s: Summary) -> str:
  """Our figure of a row: mean [min, max] @rounds ε; class or attack accuracy.

  Over several seeds the rounds and epsilons are each seed's, in seed order
  (``@49/122/54 ε 0.74/0.87/0.75``): seeds peak at different rounds, and a
  mean of them is no run's round.
  """
  text = f"{s.accuracy:.3f}{_MODEL_NAMES[s.row.model_metric]}"
  if len(s.seeds) > 1:
    text += f" [{s.spread[0]:.3f}, {s.spread[1]:.3f}]"
  text += " @" + "/".join(str(r) for r in s.best_rounds)
  if s.epsilons:
    text += " ε " + "/".join(f"{e:.2f}" for e in s.epsilons)
  elif s.epsilon is not None:
    text += f" ε {s.epsilon:.2f}"
  if s.attack_value is not None:
    text += f" ; {_METRIC_NAMES[s.row.attack_metric]} {s.attack_value:.2f}"
  return text


def rerun_command(table: Table, rows: list[Row]) -> str:
  """The ``reproduce.py`` command that runs ``rows`` of ``table``."""
  command = f"python experiments/reproduce.py {table.name}"
  if len(rows) < len(table.rows):
    command += " --rows " + " ".join(r.slug for r in rows)
  return command


def table_markdown(table: Table, records: dict[str, list[dict]]
                   ) -> tuple[str, list[Summary]]:
  """One table's section body and the summaries of its rows that ran.

  The text depends on the records alone, never on the machine that writes
  it (which data sets it can read): rows not run are listed, and those on a
  data set other than the sweep's default (Fashion-MNIST) are given, by data
  set, the command that runs them where that data is.
  """
  lines = ["", "", "| row | paper: acc @round ε | ours: mean [min, max] @round(s) ε | "
           "seeds | rounds | diff | verdict |", "|---|---|---|---|---|---|---|"]
  summaries = []
  for row in table.rows:
    if row.slug not in records:
      continue
    s = summarize(row, records[row.slug])
    summaries.append(s)
    diff = "-" if s.difference is None else f"{s.difference:+.3f}"
    seeds = f"{len(s.seeds)} ({'/'.join(map(str, s.seeds))})" if len(s.seeds) > 1 else "1"
    if row.headline and len(s.seeds) < len(SEEDS_HEADLINE):  # the others still to run
      seeds += f", of {len(SEEDS_HEADLINE)}"
    lines.append(f"| {row.name} | {paper_cell(row)} | {ours_cell(s)} | "
                 f"{seeds} | {s.rounds} | {diff} | {s.verdict} |")
  lines[0] = f"Setting: {table.setting}.{reduced_clause(summaries)}"
  if table.study and summaries:
    lines += trained_lines(summaries)
  if table.claim and summaries:
    lines += ["", f"Claim: {table.claim}. Ours: {claim_check(summaries)}."]
    if single := sum(len(s.seeds) == 1 for s in summaries):
      lines[-1] += (f" {single} of {len(summaries)} rows run at one seed: a rise, a fall or a "
                    "gap smaller than the spread between seeds is no evidence of them.")
  shared = [f"{r.name} ({twins[0]['same_run_as'].split('/')[0]})" for r in table.rows
            if (twins := [k for k in records.get(r.slug, []) if "same_run_as" in k])]
  if shared:
    lines += ["", "The same command as a row of another table, so the same run (its hours "
              "counted there): " + ", ".join(shared) + "."]
  missing = [r for r in table.rows if r.slug not in records]
  if not summaries:
    lines = lines[:2] + ["No row has been run yet."]
  elif missing:
    lines += ["", f"Not run yet ({len(missing)}): " + ", ".join(r.name for r in missing) + "."]
  away: dict[str, list[Row]] = {}
  for row in missing:
    if row.dataset != DEFAULT_DATASET:
      away.setdefault(row.dataset, []).append(row)
  for dataset, rows in away.items():
    lines += ["", f"Rows on {dataset} not run yet: {len(rows)}; where its data is "
              f"([datasets.md](datasets.md)): `{rerun_command(table, rows)}`."]
  return "\n".join(lines) + "\n", summaries


def _seeds_cell(values: tuple) -> str:
  """``0.790 [0.780, 0.792, 0.798]``: the mean, then each seed's, seed order."""
  if not values or None in values:
    return "-"
  mean = sum(values) / len(values)
  return f"{mean:.3f}" + (f" [{', '.join(f'{v:.3f}' for v in values)}]"
                          if len(values) > 1 else "")


def trained_lines(summaries: list[Summary]) -> list[str]:
  """A study's second table: the best model, the trained model (the mean
  over the last quarter of the rounds) and the model after the last round,
  each seed's figure, and the epsilon after the last round (its method)."""
  lines = ["", "The trained model, by seed (mean [each seed's]):", "",
           "| row | best | last quarter of the rounds | after the last round | "
           "ε after the last round |", "|---|---|---|---|---|"]
  for s in summaries:
    best = _seeds_cell(s.best)
    eps = "/".join(f"{e:.2f}" for e in s.final_epsilons) or "-"
    lines.append(f"| {s.row.name} | {best} | {_seeds_cell(s.late)} | "
                 f"{_seeds_cell(s.finals)} | {eps} |")
  return lines


_REDUCED_WORDS = {"--rounds": "{} rounds", "--local-steps": "T_gd {}"}


def reduced_words(flags: tuple[str, ...]) -> str:
  """A reduced setting's sweep flags in the settings' words:
  ``--local-steps 300 --rounds 10`` gives ``T_gd 300, 10 rounds``."""
  pairs = list(zip(flags[::2], flags[1::2]))
  if len(flags) % 2 or any(flag not in _REDUCED_WORDS for flag, _ in pairs):
    return shlex.join(flags)
  return ", ".join(_REDUCED_WORDS[flag].format(value) for flag, value in pairs)


def reduced_clause(summaries: list[Summary]) -> str:
  """What a table's "Setting:" line adds for the rows shown from a reduced
  run (the stated setting is the paper's): which reduction, in how many of
  them; "" when every row shown ran in the paper's setting."""
  groups: dict[tuple[str, ...], int] = {}
  for s in summaries:
    if s.reduced:
      groups[s.row.reduced] = groups.get(s.row.reduced, 0) + 1
  if not groups:
    return ""
  shown = len(summaries)
  cut = sum(groups.values())
  if len(groups) == 1:
    [(flags, _)] = groups.items()
    how = reduced_words(flags)
  else:
    how = ", ".join(f"{reduced_words(flags)} in {n}" for flags, n in groups.items())
  rows = "every row shown" if cut == shown else f"{cut} of the {shown} rows shown"
  return f" Reduced in {rows} (their verdicts say so): {how}."


def _attack_plots(table: Table, summaries: list[Summary], runs: list[dict],
                  plot_dir: pathlib.Path) -> list[pathlib.Path]:
  """A backdoor table's metric against round, and the paper's figure drawn
  from its rows (where the table names one and they have run)."""
  from fedjax_dp import plots  # pylint: disable=import-outside-toplevel

  metric = table.rows[0].attack_metric
  if not metric:
    return []
  paths = [plots.plot_attack(runs, metric, plot_dir / f"{table.name}-{metric}.png",
                             table.title)]
  caption, slugs = table.figure
  picked = [(s, run) for s, run in zip(summaries, runs) if s.row.slug in slugs]
  if picked:
    reduced = [s.row.reduced for s, _ in picked if s.reduced]
    if reduced:  # never shown as the thesis' setting
      caption += f"\nreduced setting ({shlex.join(reduced[0])}), not the thesis'"
    paths.append(plots.plot_attack([run for _, run in picked], metric,
                                   plot_dir / f"{table.name}-figure.png", caption,
                                   with_accuracy=True))
  return paths


def _table_plots(table: Table, summaries: list[Summary], records: dict[str, list[dict]],
                 plot_dir: pathlib.Path) -> list[pathlib.Path]:
  """A table's plots, from seed 0 of each row shown (its other seeds as thin
  lines in the accuracy plots); its stale PNGs (a removed row's or
  table's) are deleted first."""
  from fedjax_dp import plots  # pylint: disable=import-outside-toplevel

  for stale in plot_dir.glob(f"{table.name}-*.png"):
    stale.unlink()
  if not summaries:
    return []
  runs = [dict(records[s.row.slug][0]["record"],
               label=s.row.name + (" (reduced)" if s.reduced else "")) for s in summaries]
  configs = [records[s.row.slug][0]["sweep_config"] for s in summaries]
  paths = plots.plot_records(
      runs, plot_dir, prefix=f"{table.name}-",
      other_seeds=[[kept["record"] for kept in records[s.row.slug][1:]] for s in summaries])
  if any(run.get("epsilon") is not None for run in runs):
    paths.append(plots.plot_epsilon(runs, configs, plot_dir / f"{table.name}-epsilon.png"))
  paths += _attack_plots(table, summaries, runs, plot_dir)
  if table.study:
    paths.append(plots.plot_trained(
        {s.row.name: {"best": s.best, "late": s.late, "final": s.finals} for s in summaries},
        plot_dir / f"{table.name}-trained.png", table.title))
  if table.claim:  # the claim is about the curve over r
    paths.append(plots.plot_ratio_curve(ratio_curves(summaries),
                                        plot_dir / f"{table.name}-ratio.png", table.title))
  return paths


def write_report(out: str | os.PathLike, report: str | os.PathLike,
                 command: str) -> pathlib.Path:
  """Writes REPRODUCTION.md (and its PNGs beside it) from the kept records.

  Args:
    out: The records folder (``experiments/reproduce.py --out``).
    report: The Markdown file to write; plots go to ``<stem>_plots/``
      beside it.
    command: The command that regenerates it (quoted in the file).

  Returns:
    The report's path.
  """
  report = pathlib.Path(report)
  plot_dir = report.parent / f"{report.stem}_plots"
  sections, everything, beyond, no_cell, twins = [], [], 0, 0, []
  index = record_index(out)
  for table in tables().values():
    records = kept_records(out, table, index)
    body, summaries = table_markdown(table, records)
    everything += summaries
    # A row whose every record is another table's run of the same command.
    twins += [s for s in summaries
              if all("same_run_as" in k for k in records[s.row.slug])]
    if table.study:
      beyond += len(summaries)
    elif table.claim:  # a row without a published cell, weighed by the table's claim
      no_cell += sum(s.row.paper is None and not s.row.diverges for s in summaries)
    paths = _table_plots(table, summaries, records, plot_dir)
    figures = ("\n" + " ".join(f"![{p.stem}]({plot_dir.name}/{p.name})" for p in paths) + "\n"
               if paths else "")
    sections.append(f"## {table.title}\n\n{body}{figures}")
  within = sum(s.within for s in everything)
  compared = sum(s.numeric for s in everything)
  qualitative = sum(s.qualitative for s in everything)
  agree = sum(s.agrees for s in everything)
  gpu_hours = sum(s.accelerator_seconds for s in everything) / 3600
  cpu_hours = sum(s.seconds for s in everything) / 3600 - gpu_hours
  head = [
      "# Reproduction of the papers' tables",
      "",
      f"Generated from the records in `{out}` by `{command}`; do not edit by hand.",
      "Each row is the paper's stated setting (the table's S and sigma, never tuned); "
      "ours is the best accuracy over the run's rounds, as the papers report it, "
      "mean and [min, max] over the seeds run (the plots draw seed 0, and a row's "
      "other seeds as thin lines of its colour in the accuracy plots); a row run at "
      "several seeds gives each seed's best round and its ε there, in the order of "
      "its seeds (named in the seeds column), never a mean of rounds. "
      f"A row is within when |ours - paper| <= {TOLERANCE:g}, ours the mean over its "
      "seeds (where the seeds fall on both sides of the tolerance, the verdict says how "
      "many are within, and where the best is within but ours at the paper's best round "
      "is not, it gives ours there); a row the paper reports "
      "as not converging (\"-\") has no figure to be within of and is counted apart, "
      "as qualitative. A reduced run stops "
      "before the paper's: its verdict says which metric was still rising (or "
      "falling) at the cut, by more than "
      f"{MOVING:g} and twice the noise between the run's last two fifths.",
      "",
      f"Rows run: {len(everything)} ({sum(s.reduced for s in everything)} in a reduced "
      f"setting; distinct runs: {len(everything) - len(twins)}, as {len(twins)} of the rows "
      "repeat another table's command); compared with a paper figure in the "
      f"paper's setting: {compared}, within {TOLERANCE:g}: {within} of them (counting "
      f"each run once: {compared - sum(s.numeric for s in twins)} and "
      f"{within - sum(s.within for s in twins)}); qualitative in the paper's setting "
      f"(the paper's \"-\", does not converge): {qualitative}, as in the paper: {agree}; "
      f"no published cell (a table's claim checked instead): {no_cell}; "
      f"beyond the papers (their setting, a mechanism they did not run): {beyond}; "
      f"wall hours in the kept records: {cpu_hours:.1f} "
      f"on CPUs, {gpu_hours:.1f} on accelerators (each record names its machine).",
      "",
  ]
  report.parent.mkdir(parents=True, exist_ok=True)
  with atomic_file(report, "w") as f:
    f.write("\n".join(head) + "\n" + "\n".join(sections))
  return report
