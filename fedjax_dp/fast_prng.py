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
returns False, changing nothing, where they are missing; the reads are in
``fedjax_dp.jax_internals``).
"""

from __future__ import annotations

from fedjax_dp import jax_internals


def use_unrolled_threefry() -> bool:
  """Lowers threefry2x32 unrolled on CPU from now on; True if it could."""
  return jax_internals.register_unrolled_threefry_for_cpu()
