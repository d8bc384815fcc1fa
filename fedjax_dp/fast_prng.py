"""Faster random bits on CPU, bit for bit the same.

JAX lowers its threefry2x32 hash on CPU as a rolled loop (five trips of four
rounds) to keep compile times short; XLA then writes two full-size uint32
arrays to memory on every trip. FL-STD-DP draws a noise share of all
1,663,370 weights for every client, 166 million normals a round for 100
clients, and this loop bounds the round. The unrolled lowering that JAX uses
on GPU fuses the whole hash into one pass: faster noise (measured in
docs/performance.md, "What makes the round fast"), same bits, longer compiles.

``use_unrolled_threefry()`` registers that lowering for CPU, for every
program compiled afterwards in the process (it uses JAX internals and
returns False, changing nothing, where they are missing).
"""

from __future__ import annotations


def use_unrolled_threefry() -> bool:
  """Lowers threefry2x32 unrolled on CPU from now on; True if it could."""
  try:
    # pylint: disable=import-outside-toplevel,protected-access
    from jax._src.interpreters import mlir
    from jax._src.random import threefry2x32
    rule = threefry2x32._threefry2x32_lowering_rule
    primitive = threefry2x32.threefry2x32_p
  except (ImportError, AttributeError):
    return False
  mlir.register_lowering(primitive, rule, platform="cpu")
  return True
