"""Coordinate-subset compression: Top-K and random masks.

UAI 2021, Sections 3.1 and 4 and Appendix D: FL-TOP keeps a fixed set T of K
coordinates chosen by the server; FL-BASIC and FL-BAS-2/3/4 use a random
subset of K coordinates, drawn from a shared seed (each round, or once).
A subset is held as a sorted int32 index vector; ``compress`` is the linear
operator C(x) = x[T] and ``decompress`` its adjoint (zeros off T), so the
sum of compressed updates is the compression of the sum (secure-aggregation
compatible, UAI Eq. (2)).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def num_kept(num_params: int, ratio: float) -> int:
  """K = round(r * n), at least 1 (UAI 2021: ``r = |T| / n``).

  Args:
    num_params: n.
    ratio: r in (0, 1].

  Returns:
    The number of kept coordinates K.

  Raises:
    ValueError: If ratio is outside (0, 1].

  >>> num_kept(1_663_370, 0.01), num_kept(50, 0.001)
  (16634, 1)
  """
  if not 0.0 < ratio <= 1.0:
    raise ValueError(f"ratio must be in (0, 1], got {ratio}")
  return max(1, min(num_params, int(round(ratio * num_params))))


def topk_indices(scores: jax.Array, k: int) -> jax.Array:
  """Sorted indices of the ``k`` largest scores (UAI 2021, Section 3.1).

  >>> topk_indices(jnp.array([0.1, -3.0, 2.0, 0.5]), 2).tolist()
  [2, 3]
  """
  _, idx = jax.lax.top_k(scores, k)
  return jnp.sort(idx).astype(jnp.int32)


def random_indices(key: jax.Array, num_params: int, k: int) -> jax.Array:
  """A uniformly random k-subset of range(num_params), sorted.

  The k smallest of n i.i.d. uniforms index a uniformly random k-subset.

  >>> idx = random_indices(jax.random.PRNGKey(0), 10, 3).tolist()
  >>> len(set(idx)), idx == sorted(idx), all(0 <= i < 10 for i in idx)
  (3, True, True)
  """
  u = jax.random.uniform(key, (num_params,))
  return topk_indices(-u, k)


def compress(x: jax.Array, indices: jax.Array) -> jax.Array:
  """C(x) = x[T]: the coordinates of ``x`` in the subset.

  >>> compress(jnp.array([5.0, 6.0, 7.0, 8.0]), jnp.array([1, 3])).tolist()
  [6.0, 8.0]
  """
  return x[indices]


def decompress(values: jax.Array, indices: jax.Array, num_params: int) -> jax.Array:
  """The adjoint C^T: a length-n vector with ``values`` on T, zeros elsewhere.

  >>> decompress(jnp.array([6.0, 8.0]), jnp.array([1, 3]), 4).tolist()
  [0.0, 6.0, 0.0, 8.0]
  """
  return jnp.zeros((num_params,), values.dtype).at[indices].set(values)


def indices_to_mask(indices: jax.Array, num_params: int) -> jax.Array:
  """Boolean mask of length n, True on the subset.

  >>> indices_to_mask(jnp.array([1, 3]), 4).tolist()
  [False, True, False, True]
  """
  return jnp.zeros((num_params,), bool).at[indices].set(True)
