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


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", help="save each case's output here")
  parser.add_argument("--load", help="compare the outputs saved here instead of running")
  parser.add_argument("--against", help="compare with outputs saved here, not tests/golden")
  parser.add_argument("--cases", help="comma-separated case names (default: all)")
  parser.add_argument("--shard", default="0/1", help="I/N: every N-th case from the I-th")
  args = parser.parse_args(argv)
  cases = golden_cases.cases()
  if args.cases:
    cases = [c for c in cases if c.name in args.cases.split(",")]
  i, n = map(int, args.shard.split("/"))
  cases = cases[i::n]
  worst = {}
  for case in cases:
    name = golden_cases.path(case).name
    if args.load:
      src = pathlib.Path(args.load) / name
      if not src.exists():
        continue
      got = json.loads(src.read_text())
    else:
      got = golden_cases.run_case(case)
      if args.out:
        pathlib.Path(args.out).mkdir(parents=True, exist_ok=True)
        (pathlib.Path(args.out) / name).write_text(json.dumps(got, indent=1, sort_keys=True))
    ref = pathlib.Path(args.against) / name if args.against else golden_cases.path(case)
    d = diffs(got, json.loads(ref.read_text()))
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
