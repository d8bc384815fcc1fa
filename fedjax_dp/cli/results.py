"""The sweep's results: a Markdown table laid out like UAI 2021 Table 1, JSON and CSV.

Each measured figure stands beside the paper's (``fedjax_dp.paper.results``).

Files are written atomically (a temporary file renamed into place), so an
interrupted or failed run never leaves a half-written result behind.
"""

from __future__ import annotations

import csv
import io
import json
import os
import pathlib

from fedjax_dp.atomic import atomic_file
from fedjax_dp.paper import results as paper_results

#: The files :func:`write_results` writes in ``--out``.
FILES = ("results.json", "results.csv", "results.md")

CSV_FIELDS = ("dataset", "scheme", "ratio", "best_accuracy", "best_round", "selection_metric",
              "balanced_accuracy", "auroc", "final_accuracy",
              "downstream_kb", "upstream_kb", "measured_upstream_kb", "epsilon",
              "epsilon_final", "delta", "accountant", "sampler", "noise_multiplier",
              "clip_norm", "clipped_fraction", "rounds", "num_params", "num_clients",
              "clients_per_round", "capacity", "max_cohort", "truncated_rounds",
              "mean_cohort", "seed", "seconds", "coded_bits_per_value",
              "compression_factor", "attack", "class_accuracy", "attack_accuracy",
              "main_accuracy", "empirical_epsilon", "empirical_epsilon_every_round",
              "epsilon_lower_bound", "epsilon_lower_bound_every_round")


def _fmt(value, spec: str) -> str:
  return "N/A" if value is None else format(value, spec)


def _dataset(run: dict) -> str:
  """The run's data set name (records before issue 13: Fashion-MNIST)."""
  return run.get("dataset", "fashion-mnist").split(" ")[0]


def _paper(run: dict, field: str, spec: str) -> str:
  ref = paper_results.paper_result(run["scheme"], run["ratio"], _dataset(run), run)
  return "-" if ref is None else _fmt(getattr(ref, field), spec)


def markdown_table(runs: list[dict]) -> str:
  """Table 1 layout: r, algorithm, accuracy, round, down/up cost, epsilon.

  Each measured figure stands beside the paper's (in parentheses) where UAI
  2021 Table 1/8 (or the thesis, on MNIST) has one for that scheme and ratio.
  Runs selected by balanced accuracy (medical-synth) get the layout of UAI
  Table 2 instead (:func:`balanced_table`).
  """
  if runs and runs[0].get("selection_metric") == "balanced_accuracy":
    return balanced_table(runs) + _extra_tables(runs)
  lines = ["| r | Algorithm | Accuracy (paper) | Round (paper) | Downstream KB | "
           "Upstream KB | ε (paper) | S | Accountant |",
           "|---|---|---|---|---|---|---|---|---|"]
  for run in runs:
    r, name = run["ratio"], algorithm_label(run)
    lines.append(
        f"| {r * 100:g}% | {name} "
        f"| {run['best_accuracy']:.2f} ({_paper(run, 'accuracy', '.2f')}) "
        f"| {run['best_round']} ({_paper(run, 'round', 'd')}) "
        f"| {run['downstream_kb']:.2f} | {run['upstream_kb']:.2f} "
        f"| {_fmt(run['epsilon'], '.2f')} ({_paper(run, 'epsilon', '.2f')}) "
        f"| {_fmt(run['clip_norm'], '.3g')} | {run['accountant'] or 'N/A'} |")
  return "\n".join(lines) + "\n" + _extra_tables(runs)


def algorithm_label(run: dict) -> str:
  """The scheme, and its noise where it is correlated across rounds:
  ``FL-TOP-DP, banded noise (4 bands, min-separation 4)`` (the paper's
  figure beside it is the paper's own run, with independent noise)."""
  noise = run.get("correlated_noise")
  if not noise:
    return run["scheme"]
  shape = (f"{noise['bands']} bands, " if noise["noise"] == "banded" else
           f"{noise['strategy_bands_or_buffers']} buffers, ")
  return (f"{run['scheme']}, {noise['noise'].replace('blt', 'BLT')} noise ({shape}"
          f"min-separation {noise['min_separation']})")


def _extra_tables(runs: list[dict]) -> str:
  """The tables that only some runs have: coded sizes, attacks, audits."""
  return (_coded_table(runs) + _attack_table(runs) + _audit_table(runs)
          + _test_subset_note(runs))


def _test_subset_note(runs: list[dict]) -> str:
  """Says so when accuracy was measured on part of the test set (--test-size)."""
  sizes = sorted({(run.get("data_summary") or {}).get("test_subset") for run in runs} - {None})
  if not sizes:
    return ""
  return (f"\nAccuracy on the first {', '.join(map(str, sizes))} examples of the test set "
          "(--test-size), not all of it: not comparable with the papers' figures.\n")


def attack_label(run: dict) -> str | None:
  """``in-backdoor alpha=0.1 boost=7 5->7``: a run's attack, in one cell."""
  attack = run.get("attack")
  if attack is None:
    return None
  text = (f"{attack['kind']} alpha={attack['fraction']:g} "
          f"boost={attack['boost']:g}")
  if attack.get("source") is not None:
    text += f" {attack['source']}->{attack['target']}"
  text += " no-noise" if attack.get("skip_noise") else ""
  text += " pool-epochs" if attack.get("pool_training") == "epochs" else ""
  return text + (" fixed-pool" if attack.get("selection") == "fixed" else "")


def _attack_table(runs: list[dict]) -> str:
  """Thesis Sec. 6.2's metrics of the attacked runs, at the best round, if any."""
  attacked = [r for r in runs if r.get("attack") is not None]
  if not attacked:
    return ""
  lines = ["", "| r | Algorithm | Attack | Accuracy | Attacked-class accuracy | "
           "Attack accuracy | Accuracy without the source class |",
           "|---|---|---|---|---|---|---|"]
  for run in attacked:
    lines.append(
        f"| {run['ratio'] * 100:g}% | {run['scheme']} | {attack_label(run)} "
        f"| {run['best_accuracy']:.2f} | {_fmt(run.get('class_accuracy'), '.2f')} "
        f"| {_fmt(run.get('attack_accuracy'), '.2f')} "
        f"| {_fmt(run.get('main_accuracy'), '.2f')} |")
  return "\n".join(lines) + "\n"


def _audit_table(runs: list[dict]) -> str:
  """The privacy audit of the audited runs (``fedjax_dp.features.audit.canaries``), if any:
  the accountant's epsilon after every round beside the canaries' estimate
  and lower bound, for each threat model."""
  audited = [r for r in runs if r.get("audit") is not None]
  if not audited:
    return ""
  lines = ["", "| r | Algorithm | ε (accountant, all rounds) | canaries in / out "
           "| empirical ε: final model | every round | lower bound: final model "
           "| every round |", "|---|---|---|---|---|---|---|---|"]
  for run in audited:
    audit = run["audit"]
    lines.append(
        f"| {run['ratio'] * 100:g}% | {run['scheme']} | {_fmt(run['epsilon_final'], '.2f')} "
        f"| {audit['inserted']} / {audit['held_out']} "
        f"| {run['empirical_epsilon']:.2f} | {run['empirical_epsilon_every_round']:.2f} "
        f"| {run['epsilon_lower_bound']:.2f} | {run['epsilon_lower_bound_every_round']:.2f} "
        f"|")
  confidence = audited[0]["audit"]["confidence"]
  return "\n".join(lines) + (f"\n\nLower bounds hold with confidence {confidence:g} "
                             "(Steinke et al. 2023); empirical ε is Andrew et al.'s "
                             "estimate (docs/privacy.md).\n")


def balanced_table(runs: list[dict]) -> str:
  """UAI Table 2 / thesis Table 4.3 layout: the best balanced accuracy, the
  AUROC at its round, the round, costs and epsilon; no paper column (the
  medical data here is a synthetic stand-in, not the thesis' data)."""
  data = runs[0].get("dataset", "N/A")
  caveat = ("; figures are not comparable with the thesis' medical tables"
            if "synthetic stand-in" in data else "")
  lines = [f"Data: {data}{caveat}.", "",
           "| r | Algorithm | Balanced accuracy | AUROC | Round | Downstream KB | "
           "Upstream KB | ε | S | Accountant |",
           "|---|---|---|---|---|---|---|---|---|---|"]
  for run in runs:
    lines.append(
        f"| {run['ratio'] * 100:g}% | {run['scheme']} "
        f"| {run['balanced_accuracy']:.2f} | {run['auroc']:.2f} | {run['best_round']} "
        f"| {run['downstream_kb']:.2f} | {run['upstream_kb']:.2f} "
        f"| {_fmt(run['epsilon'], '.2f')} | {_fmt(run['clip_norm'], '.3g')} "
        f"| {run['accountant'] or 'N/A'} |")
  return "\n".join(lines) + "\n"


def _coded_table(runs: list[dict]) -> str:
  """Measured coded size of the runs that send coded integers (CDP-LQ), if any.

  Bits per value are bzip2 bits per model weight; the compression is against
  32-bit floats, the poster's figure in parentheses.
  """
  coded = [r for r in runs if r.get("compression_factor") is not None]
  if not coded:
    return ""
  lines = ["", "| Algorithm | Lattice | Δ (×S) | L | Bits/value (bzip2) | Compression "
           "(paper) | ε record-level | ε one step (AGM) |",
           "|---|---|---|---|---|---|---|---|"]
  for run in coded:
    paper = run.get("paper_compression_factor")
    lines.append(
        f"| {run['scheme']} | {run.get('lattice', 'N/A')} "
        f"| {_fmt(run.get('lattice_step'), 'g')} | {_fmt(run.get('lattice_dim'), 'd')} "
        f"| {run['coded_bits_per_value']:.3f} | {run['compression_factor']:.2f}x "
        f"({_fmt(paper, '.2f')}x) | {_fmt(run.get('epsilon'), '.2f')} "
        f"| {_fmt(run.get('epsilon_step_agm'), '.2f')} |")
  return "\n".join(lines) + "\n"


def csv_text(runs: list[dict]) -> str:
  """One CSV row per run with the fields of :data:`CSV_FIELDS`."""
  buf = io.StringIO()
  writer = csv.DictWriter(buf, fieldnames=CSV_FIELDS, extrasaction="ignore",
                          lineterminator="\n")
  writer.writeheader()
  for run in runs:
    writer.writerow(dict(run, attack=attack_label(run)))
  return buf.getvalue()


def _atomic_write(path: pathlib.Path, text: str) -> None:
  with atomic_file(path, "w") as f:
    f.write(text)


def write_results(out_dir: str | os.PathLike, runs: list[dict], config: dict) -> list[pathlib.Path]:
  """Writes results.json, results.csv and results.md into ``out_dir``.

  Args:
    out_dir: Output folder (created if needed).
    runs: Run records from ``fedjax_dp.simulation.run``.
    config: The sweep's settings, stored in results.json.

  Returns:
    The written paths.
  """
  out = pathlib.Path(out_dir)
  out.mkdir(parents=True, exist_ok=True)
  files = dict(zip(FILES, (json.dumps({"config": config, "runs": runs}, indent=2) + "\n",
                            csv_text(runs), markdown_table(runs))))
  paths = []
  for name, text in files.items():
    _atomic_write(out / name, text)
    paths.append(out / name)
  return paths
