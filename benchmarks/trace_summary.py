"""Where a profiled round spends the GPU: busy time, products' share, top fusions.

Reads the Chrome trace (``*.trace.json.gz``, what ``jax.profiler.trace`` and
``throughput.py --profile DIR`` write under ``DIR/plugins/profile/<run>/``;
Perfetto and TensorBoard open the same file) and reports, per trace:

* the GPU's busy time: the union of the intervals of every event on a
  ``/device:GPU:*`` process (kernels, copies, memsets; overlapping streams
  counted once), against the span from its first to its last event;
* the matrix products' share of it: kernels whose names say cuBLAS, CUTLASS,
  cuDNN or XLA's own gemm fusions (``PRODUCT_KERNELS``: gemm, cutlass,
  cublas, cudnn, xmma, wgmma, fprop/dgrad/wgrad, convolve/conv but not
  convert);
* the time by kind of XLA fusion (``loop_concatenate_fusion_1`` is a
  ``concatenate``; a kernel that is not an XLA fusion is its own kind);
* the ``--top`` kernels by total time, with how many times each ran.

  python benchmarks/trace_summary.py trace.json.gz
  python benchmarks/trace_summary.py /tmp/gpu-suite-profile --json   # newest trace under it
  python benchmarks/trace_summary.py trace.json.gz --out summary.jsonl  # words, and a JSON line

A trace without GPU events (a CPU run) reports that and no shares. The
figures are sums over the trace: for one round's trace, per round.
``docs/performance.md`` ("On a GPU") explains how to read them.
"""

from __future__ import annotations

import gzip
import json
import pathlib
import re
import sys

from common import OneLineParser  # benchmarks/common.py

# Kernel names of matrix products and convolutions: cuBLAS (sm90_xmma_gemm_*,
# *_cublas), CUTLASS, cuDNN (cudnn::*, *_fprop_*, implicit_convolve_sgemm,
# conv2d_* kernels) and XLA's Triton gemm fusions (gemm_fusion_dot_*). 'conv'
# not followed by 'ert': XLA names element-type conversions *_convert_*.
PRODUCT_KERNELS = re.compile(
    r"gemm|cutlass|cublas|cudnn|xmma|wgmma|fprop|dgrad|wgrad|convolve|conv(?!ert)",
    re.IGNORECASE)
_FUSION = re.compile(r"^(?:loop|input)_(.+?)_fusion(?:_\d+)?$")


class TraceError(Exception):
  """The file is missing or is not a Chrome trace."""


def find_trace(path: str | pathlib.Path) -> pathlib.Path:
  """``path`` itself, or the newest ``*.trace.json.gz`` under a directory."""
  path = pathlib.Path(path)
  if path.is_dir():
    traces = sorted(path.rglob("*.trace.json.gz"), key=lambda p: p.stat().st_mtime)
    if not traces:
      raise TraceError(f"no *.trace.json.gz under {path}")
    return traces[-1]
  if not path.is_file():
    raise TraceError(f"{path}: no such file")
  return path


def load(path: str | pathlib.Path) -> dict:
  """The trace's JSON (gzipped or not)."""
  path = find_trace(path)
  opener = gzip.open if path.name.endswith(".gz") else open
  try:
    with opener(path, "rt", encoding="utf-8") as f:
      trace = json.load(f)
  except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as e:
    raise TraceError(f"{path}: not a Chrome trace ({e})") from e
  if isinstance(trace, list):  # the JSON array form of the format
    trace = {"traceEvents": trace}
  if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
    raise TraceError(f"{path}: not a Chrome trace (no traceEvents)")
  return trace


def kind(name: str) -> str:
  """The kind of a kernel: ``product``, an XLA fusion's kind, or its own name."""
  if PRODUCT_KERNELS.search(name):
    return "product"
  m = _FUSION.match(name)
  return m.group(1) if m else name


def _union_us(intervals: list[tuple[float, float]]) -> float:
  total, end = 0.0, float("-inf")
  for a, b in sorted(intervals):
    if b > end:
      total += b - max(a, end)
      end = b
  return total


def summarize(trace: dict, top: int = 12) -> dict:
  """The trace's GPU figures (milliseconds; None where there are no GPU events)."""
  events = trace["traceEvents"]
  gpus = {e.get("pid") for e in events if e.get("ph") == "M" and e.get("name") ==
          "process_name" and str((e.get("args") or {}).get("name", "")).startswith(
              "/device:GPU")}
  kernels = [e for e in events if e.get("ph") == "X" and e.get("pid") in gpus and
             isinstance(e.get("dur"), (int, float))]
  out = {"gpus": len(gpus), "events": len(kernels), "busy_ms": None, "span_ms": None,
         "busy_fraction": None, "product_ms": None, "product_fraction": None,
         "product_kernels": [], "kinds": [], "top": []}
  if not kernels:
    return out
  busy_us = sum(_union_us([(e["ts"], e["ts"] + e["dur"]) for e in kernels
                           if e["pid"] == pid]) for pid in gpus)
  span_us = max(e["ts"] + e["dur"] for e in kernels) - min(e["ts"] for e in kernels)
  by_name: dict[str, list[float]] = {}
  for e in kernels:
    by_name.setdefault(e["name"], []).append(e["dur"])
  names = sorted(((sum(d), len(d), n) for n, d in by_name.items()), reverse=True)
  by_kind: dict[str, float] = {}
  for total, _, n in names:
    by_kind[kind(n)] = by_kind.get(kind(n), 0.0) + total
  product_us = by_kind.get("product", 0.0)
  ms = lambda us: round(us / 1e3, 3)
  out.update(
      busy_ms=ms(busy_us), span_ms=ms(span_us), busy_fraction=round(busy_us / span_us, 4),
      product_ms=ms(product_us), product_fraction=round(product_us / busy_us, 4),
      product_kernels=[{"name": n, "ms": ms(t), "count": c} for t, c, n in names
                       if kind(n) == "product"],
      kinds=[{"kind": k, "ms": ms(t), "fraction": round(t / busy_us, 4)}
             for k, t in sorted(by_kind.items(), key=lambda kv: -kv[1])][:top],
      top=[{"name": n, "kind": kind(n), "ms": ms(t), "count": c,
            "fraction": round(t / busy_us, 4)} for t, c, n in names[:top]])
  return out


def report(s: dict, source: str) -> str:
  """The summary in words."""
  if s["busy_ms"] is None:
    return f"{source}: no GPU events ({s['gpus']} GPU device(s) in the trace)"
  lines = [
      f"{source}: {s['gpus']} GPU device(s), {s['events']} events",
      f"  GPU busy {s['busy_ms']:.1f} ms of a {s['span_ms']:.1f} ms span "
      f"({100 * s['busy_fraction']:.1f}%)",
      f"  matrix products and convolutions {s['product_ms']:.1f} ms = "
      f"{100 * s['product_fraction']:.1f}% of busy ({len(s['product_kernels'])} kernels)",
      "  by kind: " + ", ".join(f"{k['kind']} {k['ms']:.1f} ms" for k in s["kinds"]),
      "  top kernels:"]
  lines += [f"  {t['ms']:9.2f} ms {100 * t['fraction']:5.1f}% x{t['count']:<4d} {t['name'][:90]}"
            for t in s["top"]]
  return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
  p = OneLineParser(prog="benchmarks/trace_summary.py", description=__doc__.splitlines()[0])
  p.add_argument("trace", help="a *.trace.json.gz, or a directory: the newest one under it")
  p.add_argument("--top", type=int, default=12, help="kernels and kinds listed")
  p.add_argument("--json", action="store_true", help="one JSON line instead of words")
  p.add_argument("--out", default=None, help="also append the JSON line to this file")
  args = p.parse_args(argv)
  if args.top < 1:
    p.error("--top must be >= 1")
  try:
    path = find_trace(args.trace)
    s = summarize(load(path), args.top)
  except TraceError as e:
    print(f"benchmarks/trace_summary.py: error: {e}", file=sys.stderr)
    return 2
  s["trace"] = str(path)
  print(json.dumps(s) if args.json else report(s, str(path)), flush=True)
  if args.out:
    with open(args.out, "a", encoding="utf-8") as f:
      f.write(json.dumps(s) + "\n")
  return 0


if __name__ == "__main__":
  sys.exit(main())
