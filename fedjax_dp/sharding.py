"""The cohort's client axis sharded over devices.

A round trains every cohort slot independently, so the slots split over a
1-D ``jax.sharding.Mesh`` (axis ``"clients"``) with no communication: each
device gathers its own clients' data from a replicated copy of the
federation and trains them; the aggregation that follows sums across
devices (XLA inserts the all-reduce). Results equal those on one device up
to the order of floating-point sums.

On one host the mesh spans its local devices (CPU cores exposed as devices
with ``XLA_FLAGS=--xla_force_host_platform_device_count=N``, or GPUs). In a
run of several processes (``fedjax_dp.distributed``: the same program, data
and seed in each) ``jax.devices()`` lists every process's devices and the
mesh spans them all, the same number from each process.
"""

from __future__ import annotations

import math
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

AXIS = "clients"


def client_mesh(num_devices: int | None = None) -> jax.sharding.Mesh | None:
  """A 1-D mesh over ``num_devices`` devices (None: all of them).

  With several processes, the first ``num_devices / processes`` local
  devices of each process, in process order.

  Returns:
    The mesh, or None for a single device (no sharding).

  Raises:
    ValueError: If more devices are asked for than exist, or a count that
      does not split evenly over the processes.
  """
  devices = jax.devices()
  count = len(devices) if num_devices is None else num_devices
  if not 1 <= count <= len(devices):
    raise ValueError(f"--devices must be in [1, {len(devices)}], got {count}")
  processes = jax.process_count()
  if processes > 1:
    if count % processes:
      raise ValueError(f"--devices must be a multiple of the {processes} processes, "
                       f"got {count}")
    local = [[d for d in devices if d.process_index == p] for p in range(processes)]
    short = [p for p, own in enumerate(local) if len(own) < count // processes]
    if short:
      raise ValueError(f"--devices {count} takes {count // processes} devices from each of "
                       f"the {processes} processes; process {short[0]} has "
                       f"{len(local[short[0]])} (see --cpu-devices)")
    chosen = [d for own in local for d in own[:count // processes]]
    return jax.sharding.Mesh(np.asarray(chosen), (AXIS,))
  if count == 1:
    return None
  return jax.sharding.Mesh(np.asarray(devices[:count]), (AXIS,))


def mesh_size(mesh: jax.sharding.Mesh | None) -> int:
  """Number of devices of a mesh (1 for None)."""
  return 1 if mesh is None else math.prod(mesh.devices.shape)


def replicated(mesh: jax.sharding.Mesh) -> jax.sharding.NamedSharding:
  """The sharding of an array every device of ``mesh`` holds whole."""
  return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())


def replicate(tree, mesh: jax.sharding.Mesh | None):
  """``tree`` placed whole on every device of ``mesh`` (unchanged for None).

  Put a sharded round's state, data and key there before its first call:
  the round returns its state so placed, and arguments placed alike on
  every call keep the first compiled program. With several processes each
  passes the same values and gets one global array, whole on every
  process's devices (what a computation over the mesh takes).
  """
  if mesh is None or mesh_size(mesh) == 1:
    return tree
  return jax.device_put(tree, replicated(mesh))


def shard_clients(fn: Callable, mesh: jax.sharding.Mesh | None) -> Callable:
  """Runs ``fn(shared, data, indices, keys)`` with its slot axis sharded.

  Args:
    fn: Computes per-slot outputs (leading axis = slots) from ``shared`` (a
      pytree every device needs whole: weights, plan), ``data`` (the
      federation, replicated), ``indices`` (slots,) client ids and ``keys``
      (slots, 2).
    mesh: From :func:`client_mesh`; None runs ``fn`` as it is.

  Returns:
    A function of the same arguments and outputs. The slots are padded to
    a multiple of the device count (repeating the first slot) and the
    padding is dropped from the outputs.
  """
  if mesh is None or mesh_size(mesh) == 1:
    return fn
  spec, replicated = jax.sharding.PartitionSpec(AXIS), jax.sharding.PartitionSpec()
  sharded = jax.shard_map(fn, mesh=mesh, in_specs=(replicated, replicated, spec, spec),
                          out_specs=spec, check_vma=False)

  def wrapped(shared, data, indices, keys):
    slots = indices.shape[0]
    pad = (-slots) % mesh_size(mesh)
    if pad:
      indices = jnp.concatenate([indices, jnp.repeat(indices[:1], pad, axis=0)])
      keys = jnp.concatenate([keys, jnp.repeat(keys[:1], pad, axis=0)])
    out = sharded(shared, data, indices, keys)
    return jax.tree.map(lambda a: a[:slots], out) if pad else out

  return wrapped


def shard_privatize(fn: Callable, mesh: jax.sharding.Mesh | None) -> Callable:
  """Runs ``fn(messages, slot_mask, noise_keys, num_shares)`` with the slots sharded.

  ``fn`` returns ``(contributions, count)``: one row per slot and a count
  over the slots (clipped messages), which is summed over the devices.
  Each client's privatisation is its own (its message, its noise key), so
  every device works on its share of the cohort. Padding slots (to a
  multiple of the device count) are masked out and dropped.
  """
  if mesh is None or mesh_size(mesh) == 1:
    return fn
  spec, replicated = jax.sharding.PartitionSpec(AXIS), jax.sharding.PartitionSpec()

  def per_device(messages, slot_mask, noise_keys, num_shares):
    contributions, count = fn(messages, slot_mask, noise_keys, num_shares)
    # The count's psum blocks its device's thread until every device reaches
    # it, and XLA:CPU's thunk executor runs it as soon as its operand is
    # ready: a count that does not depend on the contributions (a constant 0
    # without DP) was summed before the device trained, and it then waited
    # out the other device's whole training (FL-STD's 100-client round: 1.4 s
    # of 5.9; docs/performance.md, "Where a CPU round's time goes"). So it is
    # capped by a bound it never exceeds (the real slots, plus the rows whose
    # first value is NaN) that reads the contributions: XLA cannot fold it.
    first = contributions.reshape(contributions.shape[0], -1)[:, 0].astype(jnp.float32)
    cap = jnp.sum(slot_mask) + jnp.sum(jnp.isnan(first))
    count = jnp.minimum(count, cap.astype(jnp.asarray(count).dtype))
    return contributions, jax.lax.psum(count, AXIS)

  sharded = jax.shard_map(per_device, mesh=mesh,
                          in_specs=(spec, spec, spec, replicated),
                          out_specs=(spec, replicated), check_vma=False)

  def wrapped(messages, slot_mask, noise_keys, num_shares):
    slots = messages.shape[0]
    pad = (-slots) % mesh_size(mesh)
    if pad:
      messages = jnp.concatenate([messages, jnp.zeros((pad,) + messages.shape[1:],
                                                      messages.dtype)])
      slot_mask = jnp.concatenate([slot_mask, jnp.zeros((pad,), bool)])
      noise_keys = jnp.concatenate([noise_keys, jnp.repeat(noise_keys[:1], pad, axis=0)])
    contributions, count = sharded(messages, slot_mask, noise_keys, num_shares)
    return (contributions[:slots] if pad else contributions), count

  return wrapped
