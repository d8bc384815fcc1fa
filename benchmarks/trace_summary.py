"""Where a profiled round spends the GPU or the CPU: busy time, products' share, top ops.

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

A trace without GPU events (a CPU run) is read on the CPU's XLA threads
instead, with the compiled module's HLO (``--hlo FILE``, or ``*.hlo.txt`` in
the trace's folder or above it, what ``throughput.py --profile DIR`` writes
as ``DIR/round.hlo.txt``): each XLA op's own time (its time less the ops it
runs inside it, a ``while`` its body), summed over the threads (CPU time),
by what the op computes:

* convolutions by role, read off the HLO: forward (no ``transpose(...)``
  in the op's JAX name), and among the gradients the weight gradient (a
  window larger than the output's spatial size: XLA's canonical form runs
  the window over the activations, the output is the kernel) and the input
  gradient (the rest: a kernel no larger than the image);
* matrix products (``dot``), random numbers (threefry and its samplers) and
  the rest by the JAX primitive that made the op;
* for convolutions and products their FLOPs, counted from the HLO shapes
  (2 x output elements x the sum each one takes), and their rate per CPU
  second, to set against one core's matrix-product rate (``--matmul-gflops``,
  the machine's rate for all its devices, and ``--cores``).

The figures are sums over the trace: for one round's trace, per round.
``docs/performance.md`` ("On a GPU", "Where a CPU round's time goes")
explains how to read them.
"""

from __future__ import annotations

import gzip
import json
import pathlib
import math
import os
import re
import sys
from typing import NamedTuple

from common import OneLineParser, check_out  # benchmarks/common.py
from fedjax_dp.cli import types as flag_types  # imports no JAX

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
  for i, event in enumerate(trace["traceEvents"]):
    problem = _malformed(event)
    if problem:
      raise TraceError(f"{path}: not a Chrome trace (traceEvents[{i}] {problem})")
  return trace


_NUMBER = (int, float)
_SCALAR = (int, float, str, type(None))


def _malformed(event) -> str | None:
  """What in one trace event the summaries could not read, or None.

  An event is a JSON object; its fields the summaries read have their
  format's types where present (``ph`` and ``name`` strings, ``pid`` and
  ``tid`` scalars, ``ts`` and ``dur`` numbers, ``args`` an object); a
  complete event (``ph`` "X") with a duration also has a name and a start.
  """
  if not isinstance(event, dict):
    return f"is {type(event).__name__}, not an object"
  for key, types, what in (("ph", str, "a string"), ("name", str, "a string"),
                           ("pid", _SCALAR, "a scalar"), ("tid", _SCALAR, "a scalar"),
                           ("ts", _NUMBER, "a number"), ("dur", _NUMBER, "a number"),
                           ("args", dict, "an object")):
    if key in event and not isinstance(event[key], types):
      return f"has {key} {event[key]!r}, not {what}"
  if event.get("ph") == "X" and "dur" in event:
    missing = [key for key in ("name", "ts") if key not in event]
    if missing:
      return f"is a complete event without {' or '.join(missing)}"
  return None


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


# ------------------------------------------------------------------ the CPU

class HloOp(NamedTuple):
  """What one instruction of the compiled module computes, each time it runs.

  Attributes:
    role: ``convolution, forward``, ``convolution, input gradient``,
      ``convolution, weight gradient``, ``matrix product``, ``random
      numbers``, or the JAX primitive that made it (the HLO opcode without one).
    flops: The convolutions' and products' FLOPs in it (0 for the rest).
  """

  role: str
  flops: float


_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+) .*\{\s*$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+) = ")
_OPCODE = re.compile(r"\s*([a-z][\w\-]*)\(")
_COLLECTIVES = ("all-reduce", "all-gather", "all-to-all", "collective-permute", "reduce-scatter")
_RNG = re.compile(r"threefry|random_bits|_uniform|_normal|erf_inv|random_split|random_fold_in")


def _closing(text: str, start: int) -> int:
  """The index just past the bracket that closes the one at ``start``."""
  depth = 0
  for i in range(start, len(text)):
    depth += {"(": 1, "{": 1, ")": -1, "}": -1}.get(text[i], 0)
    if depth == 0:
      return i + 1
  return len(text)


def _dims(shape: str) -> list[int]:
  m = re.match(r"\w+\[([\d,]*)\]", shape)
  return [int(d) for d in m.group(1).split(",") if d] if m else []


def _instruction(line: str) -> dict | None:
  """One HLO instruction line: its name, shape, opcode, operands and attributes."""
  m = _INSTRUCTION.match(line)
  if not m:
    return None
  rest = line[m.end():]
  end = _closing(rest, 0) if rest.startswith("(") else rest.find(" ")
  op = _OPCODE.match(rest, end)
  if not op:
    return None
  close = _closing(rest, op.end() - 1)
  attrs = rest[close:]
  op_name = re.search(r'op_name="([^"]*)"', attrs)
  return {"name": m.group(1), "shape": rest[:end], "opcode": op.group(1),
          "operands": re.findall(r"%([\w.\-]+)", rest[op.end():close - 1]),
          "attrs": attrs, "op_name": op_name.group(1) if op_name else "",
          "calls": re.findall(r"(?:calls|to_apply|body|condition|branch_computations)="
                              r"\{?%([\w.\-]+)", attrs)}


def _conv(ins: dict, shapes: dict[str, list[int]]) -> tuple[str, float]:
  """A convolution's role and FLOPs: each output element sums window x input features."""
  window = [int(w) for w in re.search(r"size=([\dx]+)", ins["attrs"]).group(1).split("x")]
  rhs_labels, out_labels = re.search(r"dim_labels=\w+_(\w+)->(\w+)", ins["attrs"]).groups()
  rhs = shapes.get(ins["operands"][1], [])
  out = _dims(ins["shape"])
  per_output = math.prod(window) * (rhs[rhs_labels.index("i")] if rhs else 1)
  spatial = math.prod(out[i] for i, c in enumerate(out_labels) if c.isdigit())
  if "transpose(" not in ins["op_name"]:
    role = "forward"
  elif math.prod(window) > spatial:  # the window runs over the activations: dL/dW
    role = "weight gradient"
  else:  # the window is the kernel, the output an activation's shape
    role = "input gradient"
  return f"convolution, {role}", 2.0 * math.prod(out) * per_output


def _dot(ins: dict, shapes: dict[str, list[int]]) -> float:
  lhs = shapes.get(ins["operands"][0], [])
  m = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", ins["attrs"])
  contracted = [int(d) for d in m.group(1).split(",") if d] if m else []
  return 2.0 * math.prod(_dims(ins["shape"])) * math.prod(lhs[d] for d in contracted if lhs)


def parse_hlo(text: str) -> dict[str, HloOp]:
  """Every instruction of an optimized HLO module's text, by name, as :class:`HloOp`.

  A fusion is read through the computations it calls: a convolution or a
  product in it names its role and brings its FLOPs.
  """
  computations: dict[str, list[dict]] = {}
  current: list[dict] = []
  for line in text.splitlines():
    m = _COMPUTATION.match(line)
    if m and " = " not in line.split("{")[0]:
      current = computations.setdefault(m.group(1), [])
      continue
    ins = _instruction(line)
    if ins is not None:
      current.append(ins)

  inner: dict[str, HloOp | None] = {}  # a computation's products, if any

  def products(name: str) -> HloOp | None:
    if name not in inner:
      inner[name] = None  # guards against a cycle
      shapes = {i["name"]: _dims(i["shape"]) for i in computations.get(name, [])}
      role, flops = None, 0.0
      for ins in computations.get(name, []):
        if ins["opcode"] == "convolution":
          r, f = _conv(ins, shapes)
          role, flops = role or r, flops + f
        elif ins["opcode"] == "dot":
          role, flops = role or "matrix product", flops + _dot(ins, shapes)
        elif ins["opcode"] == "fusion":
          sub = [products(c) for c in ins["calls"]]
          for op in filter(None, sub):
            role, flops = role or op.role, flops + op.flops
      inner[name] = None if role is None else HloOp(role, flops)
    return inner[name]

  ops: dict[str, HloOp] = {}
  for instructions in computations.values():
    shapes = {i["name"]: _dims(i["shape"]) for i in instructions}
    for ins in instructions:
      found = [op for op in map(products, ins["calls"]) if op] \
          if ins["opcode"] == "fusion" else []
      if ins["opcode"] == "convolution":
        ops[ins["name"]] = HloOp(*_conv(ins, shapes))
      elif ins["opcode"] == "dot":
        ops[ins["name"]] = HloOp("matrix product", _dot(ins, shapes))
      elif found:  # a fusion of products: its first one's role, all their FLOPs
        ops[ins["name"]] = HloOp(found[0].role, sum(o.flops for o in found))
      else:
        ops[ins["name"]] = HloOp(_primitive(ins), 0.0)
  return ops


def _primitive(ins: dict) -> str:
  """The JAX primitive that made an instruction (its opcode if none is named)."""
  if ins["opcode"] in _COLLECTIVES:
    return ins["opcode"]
  if _RNG.search(ins["op_name"]):
    return "random numbers"
  last = ins["op_name"].rsplit("/", 1)[-1]
  return re.sub(r"\(.*", "", last) or ins["opcode"]


def find_hlo(trace_path: pathlib.Path) -> pathlib.Path | None:
  """The newest ``*.hlo.txt`` (or ``.hlo.txt.gz``) in the trace's folder or a
  folder above it (up to 4)."""
  for folder in list(trace_path.parents)[:4]:
    found = sorted([*folder.glob("*.hlo.txt"), *folder.glob("*.hlo.txt.gz")],
                   key=lambda p: p.stat().st_mtime)
    if found:
      return found[-1]
  return None


def read_hlo(path: pathlib.Path) -> str:
  """An HLO text file, gzipped (``.gz``) or not."""
  opener = gzip.open if path.name.endswith(".gz") else open
  with opener(path, "rt", encoding="utf-8") as f:
    return f.read()


def _self_times(events: list[dict]) -> list[tuple[dict, float]]:
  """Each event with its own time: its duration less its children's on its thread."""
  out: list[tuple[dict, float]] = []
  by_thread: dict[tuple, list[dict]] = {}
  for e in events:
    by_thread.setdefault((e.get("pid"), e.get("tid")), []).append(e)
  for thread in by_thread.values():
    thread.sort(key=lambda e: (e["ts"], -e["dur"]))
    own = [e["dur"] for e in thread]
    stack: list[int] = []
    for i, e in enumerate(thread):
      while stack and thread[stack[-1]]["ts"] + thread[stack[-1]]["dur"] <= e["ts"]:
        stack.pop()
      if stack:
        own[stack[-1]] -= e["dur"]
      stack.append(i)
    out += list(zip(thread, own))
  return out


def summarize_cpu(trace: dict, ops: dict[str, HloOp], top: int = 12,
                  matmul_gflops: float | None = None, cores: int | None = None) -> dict:
  """The XLA ops' CPU time by role (ms, summed over threads) and the products' rates.

  Args:
    trace: The Chrome trace of a CPU run.
    ops: :func:`parse_hlo` of the module it ran.
    top: Ops listed.
    matmul_gflops: The machine's float32 matrix-product rate, all devices.
    cores: The cores it ran on (the per-core rate is ``matmul_gflops / cores``).
  """
  timed = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("name") in ops
           and isinstance(e.get("dur"), (int, float))]
  out = {"threads": 0, "ops": len(timed), "cpu_ms": None, "span_ms": None,
         "matmul_gflops_per_core": None, "roles": [], "top": []}
  if not timed:
    return out
  mine = _self_times(timed)
  roles: dict[str, list[float]] = {}
  names: dict[str, list[float]] = {}
  for e, own in mine:
    op = ops[e["name"]]
    r = roles.setdefault(op.role, [0.0, 0.0, 0])
    r[0], r[1], r[2] = r[0] + own, r[1] + op.flops, r[2] + 1
    n = names.setdefault(e["name"], [0.0, 0])
    n[0], n[1] = n[0] + own, n[1] + 1
  cpu_us = sum(own for _, own in mine)
  per_core = None if not (matmul_gflops and cores) else matmul_gflops / cores
  ms = lambda us: round(us / 1e3, 3)

  def rate(us: float, flops: float) -> dict:
    if not flops or us <= 0:
      return {"gflop": None, "gflops_per_cpu_second": None, "of_matmul": None}
    g = flops / us / 1e3
    return {"gflop": round(flops / 1e9, 3), "gflops_per_cpu_second": round(g, 2),
            "of_matmul": None if per_core is None else round(g / per_core, 3)}

  out.update(
      threads=len({(e.get("pid"), e.get("tid")) for e in timed}), cpu_ms=ms(cpu_us),
      span_ms=ms(max(e["ts"] + e["dur"] for e in timed) - min(e["ts"] for e in timed)),
      matmul_gflops_per_core=None if per_core is None else round(per_core, 2),
      roles=[{"role": k, "ms": ms(us), "fraction": round(us / cpu_us, 4), "count": c,
              **rate(us, f)} for k, (us, f, c) in sorted(roles.items(), key=lambda kv: -kv[1][0])],
      top=[{"name": n, "role": ops[n].role, "ms": ms(us), "count": c,
            "fraction": round(us / cpu_us, 4)}
           for n, (us, c) in sorted(names.items(), key=lambda kv: -kv[1][0])[:top]])
  return out


def report_cpu(s: dict, source: str) -> str:
  """The CPU summary in words."""
  if s["cpu_ms"] is None:
    return f"{source}: no XLA op of the HLO module in the trace"
  per_core = ("" if s["matmul_gflops_per_core"] is None else
              f"; one core's matrix products {s['matmul_gflops_per_core']:.1f} GFLOP/s")
  lines = [f"{source}: {s['ops']} XLA ops on {s['threads']} thread(s), "
           f"{s['cpu_ms']:.1f} CPU ms in a {s['span_ms']:.1f} ms span{per_core}",
           "  by role (own time, summed over threads):"]
  roles, rest = s["roles"][:len(s["top"])], s["roles"][len(s["top"]):]
  for r in roles:
    speed = "" if r["gflop"] is None else (
        f", {r['gflop']:.1f} GFLOP at {r['gflops_per_cpu_second']:.1f} GFLOP/s a core" +
        ("" if r["of_matmul"] is None else f" = {100 * r['of_matmul']:.0f}% of matmul"))
    lines.append(f"  {r['ms']:10.1f} ms {100 * r['fraction']:5.1f}% x{r['count']:<6d} "
                 f"{r['role']}{speed}")
  if rest:
    lines.append(f"  {sum(r['ms'] for r in rest):10.1f} ms "
                 f"{100 * sum(r['fraction'] for r in rest):5.1f}% in {len(rest)} other roles")
  lines.append("  top ops:")
  lines += [f"  {t['ms']:10.1f} ms {100 * t['fraction']:5.1f}% x{t['count']:<6d} "
            f"{t['name'][:40]} ({t['role']})" for t in s["top"]]
  return "\n".join(lines)


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
  p.add_argument("--top", type=int, default=12, help="kernels (ops) and kinds listed")
  p.add_argument("--hlo", default=None,
                 help="a CPU trace's optimized HLO text (default: the newest *.hlo.txt in "
                      "the trace's folder or above it)")
  p.add_argument("--matmul-gflops", type=flag_types.positive("--matmul-gflops"), default=None,
                 help="the machine's float32 matrix-product GFLOP/s, all cores (a CPU trace; "
                      "throughput.py records it as matmul_gflops_per_sec)")
  p.add_argument("--cores", type=int, default=None,
                 help="the cores the run used (default: this machine's)")
  p.add_argument("--json", action="store_true", help="one JSON line instead of words")
  p.add_argument("--out", default=None, help="also append the JSON line to this file")
  args = p.parse_args(argv)
  if args.top < 1:
    p.error("--top must be >= 1")
  if args.cores is not None and args.cores < 1:
    p.error("--cores must be >= 1")
  check_out(p, args.out)
  try:
    path = find_trace(args.trace)
    trace = load(path)
    s = summarize(trace, args.top)
    words = report(s, str(path))
    if s["busy_ms"] is None and s["gpus"] == 0:  # a CPU run: its XLA ops, by the HLO
      hlo = pathlib.Path(args.hlo) if args.hlo else find_hlo(path)
      if hlo is None or not hlo.is_file():
        raise TraceError(f"{path}: a CPU trace needs its module's HLO "
                         f"({'no such file: ' + str(hlo) if hlo else 'no *.hlo.txt beside it'}; "
                         "--hlo FILE, or throughput.py --profile writes round.hlo.txt)")
      s = summarize_cpu(trace, parse_hlo(read_hlo(hlo)), args.top,
                        args.matmul_gflops, args.cores or os.cpu_count())
      s["hlo"] = str(hlo)
      words = report_cpu(s, str(path))
  except TraceError as e:
    print(f"benchmarks/trace_summary.py: error: {e}", file=sys.stderr)
    return 2
  s["trace"] = str(path)
  print(json.dumps(s) if args.json else words, flush=True)
  if args.out:
    with open(args.out, "a", encoding="utf-8") as f:
      f.write(json.dumps(s) + "\n")
  return 0


if __name__ == "__main__":
  sys.exit(main())
