"""Measures how far this machine's golden runs lie from the stored records.

Runs the golden cases (tests/golden_cases.py) under the test suite's XLA
flags and reports, per case and per kind of field, the largest difference
from ``tests/golden/*.json`` (or from the outputs of an earlier run), then
the worst of every kind over all cases. Use it on a new processor before
touching the tolerances of tests/test_golden.py::

  python tests/golden_diff.py --out /tmp/here            # run and compare
  python tests/golden_diff.py --shard 0/2 --out /tmp/here  # half the cases
  python tests/golden_diff.py --load /tmp/here           # compare saved runs
  python tests/golden_diff.py --load /tmp/a --against /tmp/b

Kinds: ``weights.sum`` is the change of the signed sum over the sum of
absolute values (the sum cancels, so its own relative change says little);
``weights.abs_sum`` and ``weights.l2`` are relative; ``weights.picks`` is
absolute; ``accuracy`` is absolute; ``clipped_fraction`` is in clients (the
change times the clients the fraction was taken over); every other float is
relative under its own key name; ``exact`` counts integers, strings and
flags that differ.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import sys

# The suite's XLA flags (tests/conftest.py), kept if the caller set a level.
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = " ".join(
      [os.environ.get("XLA_FLAGS", ""), "--xla_backend_optimization_level=0"]).strip()
os.environ.setdefault("FEDJAX_DP_NO_DOWNLOAD", "1")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import golden_cases  # noqa: E402  (after XLA's environment)
from fedjax_dp.atomic import atomic_file  # noqa: E402
from fedjax_dp.cli.types import OneLineParser  # noqa: E402
from fedjax_dp.data import DataError  # noqa: E402


def _clients(record: dict) -> float:
  """How many client updates a record's clipped fraction was taken over."""
  return (record.get("mean_cohort") or record["clients_per_round"]) * record["rounds"]


def diffs(got: dict, want: dict) -> dict:
  """The largest difference of each kind of field between two outputs of a case."""
  out = {}

  def put(kind, value):
    out[kind] = max(out.get(kind, 0.0), value)

  gw, ww = got["weights"], want["weights"]
  put("weights.sum", abs(gw["sum"] - ww["sum"]) / ww["abs_sum"])
  for key in ("abs_sum", "l2"):
    put(f"weights.{key}", abs(gw[key] - ww[key]) / abs(ww[key]))
  put("weights.picks", max(abs(g - w) for g, w in zip(gw["picks"], ww["picks"])))
  clients = _clients(want["record"])

  def walk(g, w, key):
    if isinstance(w, dict):
      for k in w:
        walk(g.get(k) if isinstance(g, dict) else None, w[k], k)
    elif isinstance(w, list):
      if not isinstance(g, list) or len(g) != len(w):
        put("exact", out.get("exact", 0) + 1)
        return
      for a, b in zip(g, w):
        walk(a, b, key)
    elif isinstance(w, float) and isinstance(g, float) and math.isfinite(w):
      if "accuracy" in key:
        put("accuracy", abs(g - w))
      elif key == "clipped_fraction":
        put("clipped_fraction", abs(g - w) * clients)
      else:
        put(key, abs(g - w) / abs(w) if w else abs(g))
    elif not (g == w or (isinstance(w, float) and math.isnan(w) and math.isnan(g))):
      out["exact"] = out.get("exact", 0) + 1

  walk(got["record"], want["record"], "record")
  return out


def _shard(text: str) -> tuple[int, int]:
  """--shard's ``I/N``: the I-th of N parts, 0 <= I < N."""
  try:
    i, n = map(int, text.split("/"))
  except ValueError:
    raise argparse.ArgumentTypeError(f"takes I/N (e.g. 0/2), got {text!r}") from None
  if not 0 <= i < n:
    raise argparse.ArgumentTypeError(f"must be I/N with 0 <= I < N, got {text!r}")
  return i, n


def _folder(text: str) -> pathlib.Path:
  """--load's and --against's folder of saved outputs: it must exist."""
  path = pathlib.Path(text)
  if not path.is_dir():
    raise argparse.ArgumentTypeError(f"no such folder: {text}")
  return path


def _out(text: str) -> pathlib.Path:
  """--out's folder: a folder, or a path whose nearest existing folder can be written."""
  path = pathlib.Path(text)
  if path.exists() and not path.is_dir():
    raise argparse.ArgumentTypeError(f"{text} is a file; give a folder")
  nearest = next(p for p in (path, *path.absolute().parents) if p.exists())
  if not nearest.is_dir() or not os.access(nearest, os.W_OK | os.X_OK):
    raise argparse.ArgumentTypeError(f"{text} cannot be written")
  return path


def _case_names(text: str) -> list[str]:
  """--cases: names of golden cases, comma-separated."""
  names = [n for n in text.split(",") if n]
  known = [c.name for c in golden_cases.cases()]
  bad = [n for n in names if n not in known]
  if bad or not names:
    raise argparse.ArgumentTypeError(
        f"unknown case {bad[0]!r} (choose from {', '.join(known)})" if bad
        else f"names no case, got {text!r}")
  return names


def _read(parser: argparse.ArgumentParser, path: pathlib.Path, want: dict | None) -> dict:
  """A saved output, checked against ``want`` (None: against itself, a reference)."""
  try:
    got = json.loads(path.read_text(encoding="utf-8"))
    diffs(got, got if want is None else want)
  except (OSError, ValueError, KeyError, TypeError, AttributeError, ZeroDivisionError) as e:
    # Unreadable, not JSON (a ValueError), or without a field diffs() compares.
    parser.error(f"{path}: not a golden case's output ({type(e).__name__}: {e})")
  return got


def _parser() -> argparse.ArgumentParser:
  parser = OneLineParser(prog="tests/golden_diff.py",
                                   description=__doc__.splitlines()[0])
  parser.add_argument("--out", type=_out, help="save each case's output here")
  parser.add_argument("--load", type=_folder,
                      help="compare the outputs saved here instead of running")
  parser.add_argument("--against", type=_folder,
                      help="compare with outputs saved here, not tests/golden")
  parser.add_argument("--cases", type=_case_names,
                      help="comma-separated case names (default: all)")
  parser.add_argument("--shard", type=_shard, default=(0, 1),
                      help="I/N: every N-th case from the I-th")
  return parser


def _inputs(parser, args) -> list[tuple]:
  """(case, file name, its reference, its saved output or None) of each case
  compared, every file read and checked before anything runs or is written."""
  cases = golden_cases.cases()
  if args.cases:
    cases = [c for c in cases if c.name in args.cases]
  i, n = args.shard
  out = []
  for case in cases[i::n]:
    name = golden_cases.path(case).name
    ref = args.against / name if args.against else golden_cases.path(case)
    if not ref.is_file():
      where = f"--against {args.against}" if args.against else "tests/golden"
      parser.error(f"{where} holds no {name} (case {case.name})")
    want = _read(parser, ref, None)
    src = args.load / name if args.load else None
    if src is not None and not src.exists():
      continue  # not saved there (another shard's)
    out.append((case, name, want, None if src is None else _read(parser, src, want)))
  if args.load and not out:
    parser.error(f"--load {args.load} holds none of the cases' outputs (<case>.json)")
  return out


def main(argv=None) -> None:
  parser = _parser()
  args = parser.parse_args(argv)
  if args.load and args.out:
    parser.error("--out saves a run's outputs; --load runs nothing")
  inputs = _inputs(parser, args)
  if not args.load:
    try:
      golden_cases.setting()  # the data, before any case runs
    except DataError as e:
      parser.exit(2, f"{parser.prog}: error: {e}\n")
  worst = {}
  for case, name, want, got in inputs:
    if got is None:
      got = golden_cases.run_case(case)
      if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        with atomic_file(args.out / name, "w") as f:
          f.write(json.dumps(got, indent=1, sort_keys=True))
    d = diffs(got, want)
    print(f"{case.name:28s} " + " ".join(f"{k}={v:.2g}" for k, v in sorted(d.items()) if v),
          flush=True)
    for k, v in d.items():
      if v >= worst.get(k, (0.0, ""))[0]:
        worst[k] = (v, case.name)
  print("worst:")
  for k, (v, where) in sorted(worst.items()):
    print(f"  {k:28s} {v:.3g}  ({where})")


if __name__ == "__main__":
  main()
