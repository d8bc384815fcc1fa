"""Bytes moved around the products, per cohort batching, counted on the lowered program.

The paper CNN's local training of one chunk of the round (``--clients``
clients, ``--steps`` SGD steps of batch ``--batch-size`` from ``--samples``
examples each: ``vmap`` of ``model.local_update`` over the cohort, as the
round runs it) is lowered for ``--platform`` (default ``cuda``) on this
machine, without the device, once per ``--batching`` of the per-client
convolutions (``fedjax_dp.models.cohort_ops.cohort_batching``). The
StableHLO is walked (calls followed, loop bodies counted once per
iteration) and every op's traffic is counted:

* **products**: ``dot_general`` and ``convolution`` with a learnt kernel:
  FLOPs (2 per multiply-add, the padding's taps included, as XLA counts)
  and the bytes of their operands and results;
* **patch conv**: convolutions with a 0/1 kernel that gather receptive
  fields (``cohort_ops.PATCHES_SCOPE``): data movement run as a convolution;
* **data movement** by op: ``concatenate``, ``pad``, ``slice`` (and
  ``dynamic_slice``), ``reduce``, ``transpose``, ``gather`` and ``scatter``
  (with ``dynamic_update_slice``), other (``reverse``, ``sort``,
  ``reduce_window``, ``select_and_scatter``). Bytes read plus bytes
  written; a slice or gather reads only what it writes, an in-place update
  reads and writes only the update;
* **elementwise**: everything else but reshapes (free) and constants, which
  XLA mostly fuses into its neighbours.

This is the program **before** XLA's GPU passes: they fuse chains of these
ops (a pad, the slices and their concatenation become one kernel that reads
the input once and writes the concatenation once) and pick cuDNN / cuBLAS
algorithms, so the figures are a count of what each batching asks for, not
a timing. The measured kernels are in ``benchmarks/gpu_suite.sh``'s trace.

  python benchmarks/lowered_traffic.py
  python benchmarks/lowered_traffic.py --batching product,grouped --clients 128 --top 5
  python benchmarks/lowered_traffic.py --out benchmarks/records/lowered-traffic.jsonl
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import re
import sys

import jax
import jax.numpy as jnp
from jax._src.lib.mlir import ir

# benchmarks/common.py
from common import OneLineParser, check_out  # noqa: E402
from fedjax_dp.cli import types as flag_types  # noqa: E402
from fedjax_dp.models import cohort_ops, paper_cnn  # noqa: E402

PRODUCTS = ("stablehlo.dot_general", "stablehlo.convolution")
MOVEMENT = {
    "stablehlo.concatenate": "concatenate", "stablehlo.pad": "pad",
    "stablehlo.slice": "slice", "stablehlo.dynamic_slice": "slice",
    "stablehlo.reduce": "reduce", "stablehlo.transpose": "transpose",
    "stablehlo.gather": "gather/scatter", "stablehlo.scatter": "gather/scatter",
    "stablehlo.dynamic_update_slice": "gather/scatter",
    "stablehlo.reverse": "other", "stablehlo.sort": "other",
    "stablehlo.reduce_window": "other", "stablehlo.select_and_scatter": "other",
}
MOVEMENT_KINDS = ("concatenate", "pad", "slice", "reduce", "transpose", "gather/scatter", "other")
# No traffic of their own: views, constants, structure (loops and calls are followed).
FREE = {"stablehlo.reshape", "stablehlo.constant", "stablehlo.iota", "stablehlo.return",
        "func.return", "stablehlo.optimization_barrier", "stablehlo.get_tuple_element",
        "stablehlo.tuple", "stablehlo.custom_call"}
# Ops that read only what they write.
READ_AS_WRITTEN = {"stablehlo.slice", "stablehlo.dynamic_slice", "stablehlo.gather"}
# The default batchings measured: every one that batches (not "auto", not "map"'s loop).
DEFAULT_BATCHINGS = tuple(b for b in cohort_ops.BATCHINGS if b not in ("auto", "map"))


def _bytes(value) -> int:
  try:
    t = ir.RankedTensorType(value.type)
  except ValueError:  # a token
    return 0
  element = t.element_type
  bits = element.width if hasattr(element, "width") else ir.FloatType(element).width
  return math.prod(t.shape) * max(bits, 8) // 8


def _shape(value) -> list[int]:
  return list(ir.RankedTensorType(value.type).shape)


def _products_flops(op) -> float:
  """2 x multiply-adds of a dot_general or convolution."""
  out = math.prod(_shape(op.results[0]))
  name = op.operation.name
  if name == "stablehlo.dot_general":
    dims = str(op.attributes["dot_dimension_numbers"])
    lhs = re.search(r"lhs_contracting_dimensions = \[([0-9, ]*)\]", dims)
    contract = [int(d) for d in lhs.group(1).split(",") if d.strip()] if lhs else []
    shape = _shape(op.operands[0])
    return 2.0 * out * math.prod(shape[d] for d in contract)
  # A convolution: every output element multiplies a window of the kernel
  # over its per-group input features (the kernel's size / its outputs).
  dims = str(op.attributes["dimension_numbers"])
  rhs_spec = re.search(r"x\[([^\]]*)\]->", dims).group(1).split(",")
  kernel = _shape(op.operands[1])
  outputs = kernel[[s.strip() for s in rhs_spec].index("o")]
  return 2.0 * out * math.prod(kernel) / outputs


def _trip_count(while_op) -> int | None:
  """Iterations of a JAX loop: the one integer constant its condition compares with."""
  consts = [o for o in while_op.regions[0].blocks[0].operations
            if o.operation.name == "stablehlo.constant"]
  values = [re.search(r"dense<(-?\d+)>", str(o.attributes["value"])) for o in consts]
  values = [int(v.group(1)) for v in values if v]
  return values[0] if len(values) == 1 else None


class Count:
  """Traffic of one lowered program, by category (see the module docstring)."""

  def __init__(self, module):
    self.funcs = {str(o.attributes["sym_name"]).strip('"'): o
                  for o in module.body.operations if o.operation.name == "func.func"}
    self.product_flops = 0.0
    self.product_bytes = 0.0
    self.patch_flops = 0.0
    self.patch_bytes = 0.0
    self.movement = collections.Counter()
    self.elementwise_bytes = 0.0
    self.unknown_loops = 0
    self.top = collections.Counter()  # (kind, where) -> bytes, the data movement's sources
    self.fused_bytes = 0.0  # estimate after fusion: see _fused
    self.top_fused = collections.Counter()  # (root op, where) -> bytes
    self._walk(self.funcs["main"].regions[0], 1)

  def _walk(self, region, times: int):
    for block in region.blocks:
      for op in block.operations:
        self._op(op, times)

  def _op(self, op, times: int):
    name = op.operation.name
    if name == "func.call":
      self._walk(self.funcs[str(op.attributes["callee"]).lstrip("@")].regions[0], times)
      return
    if name == "stablehlo.while":
      trips = _trip_count(op)
      self.unknown_loops += trips is None
      self._walk(op.regions[1], times * (trips or 1))
      return
    if name in ("stablehlo.case", "stablehlo.if"):  # branches: the largest, once
      for region in op.regions:
        self._walk(region, times)
      return
    if name in FREE:
      return
    written = sum(_bytes(r) for r in op.results)
    if name in READ_AS_WRITTEN:
      read = written
    elif name == "stablehlo.dynamic_update_slice":
      read = written = _bytes(op.operands[1])
    elif name == "stablehlo.scatter":  # in place: the updates and indices
      read = sum(_bytes(v) for v in op.operands[1:])
      written = _bytes(op.operands[-1])
    else:
      read = sum(_bytes(v) for v in op.operands)
    traffic = times * (read + written)
    if name not in PRODUCTS or cohort_ops.PATCHES_SCOPE in str(op.location):
      fused = times * _fused(op)
      self.fused_bytes += fused
      self.top_fused[name.split(".")[-1], _where(op)] += fused
    if name in PRODUCTS:
      flops = times * _products_flops(op)
      if name == "stablehlo.convolution" and cohort_ops.PATCHES_SCOPE in str(op.location):
        self.patch_flops += flops
        self.patch_bytes += traffic
        self.top["patch conv", _where(op)] += traffic
      else:
        self.product_flops += flops
        self.product_bytes += traffic
    elif name in MOVEMENT:
      self.movement[MOVEMENT[name]] += traffic
      self.top[MOVEMENT[name], _where(op)] += traffic
    else:
      self.elementwise_bytes += traffic


# Ops whose results XLA keeps in memory (fusion roots, library calls, control
# flow); the other ops fuse into their consumers.
_ROOTS = set(PRODUCTS) | {"stablehlo.reduce", "stablehlo.scatter", "stablehlo.sort",
                          "stablehlo.while", "stablehlo.case", "stablehlo.if", "func.call",
                          "stablehlo.reduce_window", "stablehlo.select_and_scatter",
                          "stablehlo.custom_call"}
_USED_WHOLE = set(PRODUCTS) | {"stablehlo.while", "stablehlo.case", "stablehlo.if",
                               "func.call", "func.return", "stablehlo.return",
                               "stablehlo.custom_call"}


def _defining(value):
  owner = value.owner
  return owner if isinstance(owner, ir.OpView) or hasattr(owner, "operation") else None


def _in_memory(value) -> bool:
  """Whether ``value`` is written to memory after fusion (the estimate's rule):
  a block argument, a fusion root's or library call's result, or what one
  of those (or a loop, a call, a return) reads."""
  op = _defining(value)
  if op is None or op.operation.name in _ROOTS:
    return True
  if op.operation.name in ("stablehlo.constant", "stablehlo.iota"):
    return False
  for use in value.uses:
    user = use.owner
    name = user.operation.name if hasattr(user, "operation") else user.name
    if name in _USED_WHOLE:
      return True
    if name == "stablehlo.reshape" and _in_memory(user.results[0]):
      return True
  return False


def _fused(op) -> int:
  """Bytes one fused kernel rooted at ``op`` moves: its result written (if it
  is in memory) and every in-memory tensor its fused producers read, once.

  A rough model of XLA's fusion (elementwise and data-movement ops fuse into
  their consumers; products, reductions, scatters, sorts are roots); not
  XLA's own decisions.
  """
  results = [r for r in op.results if _in_memory(r)]
  if not results or op.operation.name == "stablehlo.reshape":
    return 0
  seen, read, stack = set(), 0, list(op.operands)
  while stack:
    value = stack.pop()
    producer = _defining(value)
    key = (producer.operation, value.result_number) if producer is not None else value
    if key in seen:
      continue
    seen.add(key)
    if producer is not None and producer.operation.name in ("stablehlo.constant",
                                                             "stablehlo.iota"):
      continue
    if producer is not None and producer.operation.name == "stablehlo.reshape":
      stack.extend(producer.operands)
    elif _in_memory(value):
      read += _bytes(value)
    else:
      stack.extend(producer.operands)
  return read + sum(_bytes(r) for r in results)


def _where(op) -> str:
  """The op's name stack, shortened to its last few scopes."""
  loc = re.search(r'loc\("([^"]*)"', str(op.location))
  return "/".join(loc.group(1).split("/")[-4:]) if loc else "?"


def lower(batching: str, clients: int, samples: int, steps: int, batch_size: int,
          platform: str):
  """The StableHLO module of the paper CNN's local training of a cohort."""
  model = paper_cnn()
  shapes = (jax.ShapeDtypeStruct((model.num_params,), jnp.float32),
            jax.ShapeDtypeStruct((clients, samples, 28, 28, 1), jnp.float32),
            jax.ShapeDtypeStruct((clients, samples), jnp.int32),
            jax.ShapeDtypeStruct((clients, 2), jnp.uint32))

  def cohort(w, x, y, keys):
    return jax.vmap(lambda x, y, k: model.local_update(
        w, x, y, k, steps=steps, batch_size=batch_size, lr=0.05))(x, y, keys)

  jax.clear_caches()  # the batching is read when the program is traced
  with cohort_ops.cohort_batching(batching):
    lowered = jax.jit(cohort).trace(*shapes).lower(lowering_platforms=(platform,))
  jax.clear_caches()
  return lowered.compiler_ir("stablehlo")


def record(batching: str, count: Count, args) -> dict:
  movement = sum(count.movement.values())
  around = movement + count.patch_bytes
  return {
      "batching": batching, "platform": args.platform, "clients": args.clients,
      "samples": args.samples, "steps": args.steps, "batch_size": args.batch_size,
      "model": "paper-cnn", "jax": jax.__version__,
      "product_gflop": count.product_flops / 1e9, "product_gb": count.product_bytes / 1e9,
      "patch_conv_gflop": count.patch_flops / 1e9, "patch_conv_gb": count.patch_bytes / 1e9,
      "movement_gb": {k: count.movement[k] / 1e9 for k in MOVEMENT_KINDS},
      "movement_total_gb": movement / 1e9,
      "around_products_gb": around / 1e9,
      "elementwise_gb": count.elementwise_bytes / 1e9,
      "product_flop_per_byte_around": count.product_flops / around if around else None,
      "fused_estimate_gb": count.fused_bytes / 1e9,
      "product_byte_share_fused": count.product_bytes / (count.product_bytes + count.fused_bytes),
      "unknown_loops": count.unknown_loops,
      "note": "StableHLO as lowered, before XLA's fusion: a count, not a timing",
  }


def _names(value: str) -> list[str]:
  names = [n.strip() for n in value.split(",") if n.strip()]
  bad = [n for n in names if n not in cohort_ops.BATCHINGS]
  if bad or not names:
    raise argparse.ArgumentTypeError(
        f"unknown batching {', '.join(bad) or repr(value)} "
        f"(choose from {', '.join(cohort_ops.BATCHINGS)})")
  return names


def parse_args(argv=None):
  p = OneLineParser(description=__doc__.split("\n", 1)[0])
  p.add_argument("--batching", type=_names, default=list(DEFAULT_BATCHINGS),
                 help=f"comma-separated, of {', '.join(cohort_ops.BATCHINGS)} "
                      f"(default: {','.join(DEFAULT_BATCHINGS)})")
  p.add_argument("--clients", type=flag_types.positive("--clients", int), default=128,
                 help="the cohort (default 128: the round's chunk on a GPU)")
  p.add_argument("--samples", type=flag_types.positive("--samples", int), default=10,
                 help="examples a client (10)")
  p.add_argument("--steps", type=flag_types.positive("--steps", int), default=5,
                 help="local SGD steps (5)")
  p.add_argument("--batch-size", type=flag_types.positive("--batch-size", int), default=10,
                 help="batch (10)")
  p.add_argument("--platform", choices=("cuda", "rocm", "tpu", "cpu"), default="cuda")
  p.add_argument("--top", type=int, default=0,
                 help="also list the N largest sources of data movement per batching")
  p.add_argument("--out", help="append one JSON line per batching to this file")
  args = p.parse_args(argv)
  if args.top < 0:
    p.error(f"--top must be >= 0, got {args.top}")
  check_out(p, args.out)  # before anything is lowered
  return args


def main(argv=None) -> int:
  args = parse_args(argv)
  rows = []
  for batching in args.batching:
    count = Count(lower(batching, args.clients, args.samples, args.steps, args.batch_size,
                        args.platform))
    rows.append(record(batching, count, args))
    if args.top:
      print(f"{batching}: largest data movement (GB, op, name stack)")
      for (kind, where), size in count.top.most_common(args.top):
        print(f"  {size / 1e9:8.3f}  {kind:14s} {where}")
      print(f"{batching}: largest fused kernels, estimated (GB, root op, name stack)")
      for (kind, where), size in count.top_fused.most_common(args.top):
        print(f"  {size / 1e9:8.3f}  {kind:14s} {where}")
  head = (["batching", "product GFLOP", "product GB", "patch conv GB"]
          + [f"{k} GB" for k in MOVEMENT_KINDS]
          + ["moved around GB", "FLOP/byte moved", "elementwise GB", "fused est. GB",
             "products' share of bytes (fused est.)"])
  print(f"paper CNN, {args.clients} clients x {args.steps} steps of batch {args.batch_size}, "
        f"lowered for {args.platform} (StableHLO before XLA's fusion; jax {jax.__version__})")
  print("| " + " | ".join(head) + " |")
  print("|" + " --- |" * len(head))
  for r in rows:
    cells = ([r["batching"], f"{r['product_gflop']:.1f}", f"{r['product_gb']:.2f}",
              f"{r['patch_conv_gb']:.2f}"]
             + [f"{r['movement_gb'][k]:.2f}" for k in MOVEMENT_KINDS]
             + [f"{r['around_products_gb']:.2f}",
                f"{r['product_flop_per_byte_around'] or 0:.0f}", f"{r['elementwise_gb']:.2f}",
                f"{r['fused_estimate_gb']:.2f}", f"{r['product_byte_share_fused']:.0%}"])
    print("| " + " | ".join(cells) + " |")
  if any(r["unknown_loops"] for r in rows):
    print("warning: a loop's trip count was not found; its body was counted once",
          file=sys.stderr)
  if args.out:
    with open(args.out, "a", encoding="utf-8") as f:
      for r in rows:
        f.write(json.dumps(r) + "\n")
  return 0


if __name__ == "__main__":
  sys.exit(main())
