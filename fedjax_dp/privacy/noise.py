"""Gaussian noise shares and the noisy secure sum of a cohort.

UAI 2021, Section 3.2.2 and Algorithm 3 line 27: each of the |K| sampled
clients adds a share ``G(0, S^2 sigma^2 / |K|)`` to its clipped update, so that
the secure-aggregation sum carries ``G(0, S^2 sigma^2)``, the Gaussian
mechanism on the sum of clipped updates with sensitivity S.

The cohort is a fixed-capacity array of slots, some of them padding (see
``fedjax_dp.sampling``). Padding slots contribute neither update nor noise.
The shares are scaled by the number of *real* participants, and when a round
has no participant at all the server adds the full ``G(0, S^2 sigma^2)``
itself, so the aggregate noise standard deviation is never below ``S*sigma``.

:func:`privatize` is the per-client step alone (what each client feeds to
secure aggregation, ``fedjax_dp.privacy.secure_aggregation``); with
``num_shares = |K| - l`` its shares tolerate l client failures (thesis 5.2.5,
5.3.3). :func:`noisy_sum` is :func:`privatize` followed by a plain sum.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from fedjax_dp.privacy.clipping import clip_by_l2_norm, l2_sensitivity


def noise_share_std(clip_norm: float | jax.Array, noise_multiplier: float,
                    num_participants: jax.Array) -> jax.Array:
  """Standard deviation of one client's noise share, ``S sigma / sqrt(|K|)``.

  Args:
    clip_norm: The clip norm S.
    noise_multiplier: sigma, the ratio of the aggregate noise std to S.
    num_participants: The number of real clients adding a share (>= 0).

  Returns:
    The per-client share std; with ``num_participants == 0`` it is the full
    ``S sigma`` (nobody adds it then; see :func:`noisy_sum`).

  Four shares of std S sigma / 2 sum to the Gaussian of std S sigma:

  >>> round(float(noise_share_std(1.0, 1.1, jnp.int32(4))), 4)
  0.55
  >>> round(float(noise_share_std(1.0, 1.1, jnp.int32(0))), 4)
  1.1
  """
  sigma_sum = l2_sensitivity(clip_norm) * noise_multiplier
  return sigma_sum / jnp.sqrt(jnp.maximum(num_participants, 1).astype(jnp.float32))


def privatize(updates: jax.Array, slot_mask: jax.Array, noise_keys: jax.Array,
              clip_norm: float | jax.Array, noise_multiplier: float,
              num_shares: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Each client's contribution to the secure sum: clipped update + share.

  UAI 2021 Algorithm 3 lines 25-27 / thesis Alg. 10-11: ``clip(u_k) + z_k``
  with ``z_k ~ G(0, S^2 sigma^2 / num_shares)``. To tolerate up to l client
  failures (thesis 5.2.5 / 5.3.3) pass ``num_shares = |K| - l``: any
  ``|K| - l`` surviving shares still sum to at least ``G(0, S^2 sigma^2)``.

  Args:
    updates: (capacity, m) compressed updates, one row per cohort slot.
    slot_mask: (capacity,) bool, True for real participants.
    noise_keys: (capacity, 2) per-client PRNG keys used for nothing else.
    clip_norm: S.
    noise_multiplier: sigma >= 0.
    num_shares: The number of shares the noise is split into (>= 0; 0 and 1
      both mean full ``S sigma`` shares).

  Returns:
    ``(contributions, num_clipped)``: (capacity, m) and the number of real
    clients whose update was longer than S, or not finite and so zeroed
    (``clip_by_l2_norm``).

  Without noise a contribution is the clipped update:

  >>> updates = jnp.array([[3.0, 4.0], [0.3, 0.4]])
  >>> keys = jax.random.split(jax.random.PRNGKey(0), 2)
  >>> out, clipped = privatize(updates, jnp.array([True, True]), keys, 1.0, 0.0,
  ...                          jnp.int32(2))
  >>> [[round(float(v), 4) for v in row] for row in out], int(clipped)
  ([[0.6, 0.8], [0.3, 0.4]], 1)
  """
  clipped, norms = jax.vmap(clip_by_l2_norm, in_axes=(0, None))(updates, clip_norm)
  if isinstance(noise_multiplier, (int, float)) and noise_multiplier == 0:
    contributions = clipped  # no share (the round draws their sum: aggregate_noise)
  else:
    share_std = noise_share_std(clip_norm, noise_multiplier, num_shares)
    shape = updates.shape[1:]
    shares = jax.vmap(lambda k: jax.random.normal(k, shape, updates.dtype))(noise_keys)
    contributions = clipped + share_std * shares
  num_clipped = jnp.sum(slot_mask & ~(norms <= clip_norm))  # NaN norms too (zeroed)
  return contributions, num_clipped


def aggregate_noise(key: jax.Array, shape: tuple[int, ...], clip_norm: float | jax.Array,
                    noise_multiplier: float | jax.Array, num_shares: jax.Array,
                    num_present: jax.Array) -> jax.Array:
  """The sum of ``num_present`` shares ``G(0, S^2 sigma^2 / num_shares)``,
  drawn as the one Gaussian it is: ``G(0, num_present S^2 sigma^2 / num_shares)``.

  What :func:`privatize`'s shares add to a plain sum, at the cost of one draw
  instead of one per client (``simulation.round`` draws it so wherever no
  share is needed apart: ``Plan.noise_once``). With dropouts
  (``num_shares = |K| - l``) it has exactly the variance of the shares that
  arrived; with nobody present it is zero (the server adds
  :func:`server_noise`).

  Args:
    key: The round's aggregate-noise key (``keys.AGGREGATE_NOISE``).
    shape: The sum's shape.
    clip_norm: S.
    noise_multiplier: sigma.
    num_shares: The shares the noise is split into (as :func:`privatize`'s).
    num_present: The shares that reach the sum.

  Four shares of std 0.55 sum to std 1.1; two of them to 1.1 / sqrt(2):

  >>> z = aggregate_noise(jax.random.PRNGKey(0), (20000,), 1.0, 1.1, jnp.int32(4),
  ...                     jnp.int32(2))
  >>> 0.75 < float(jnp.std(z)) < 0.81
  True
  """
  std = (noise_share_std(clip_norm, noise_multiplier, num_shares)
         * jnp.sqrt(num_present.astype(jnp.float32)))
  return std * jax.random.normal(key, shape, jnp.float32)


def server_noise(server_key: jax.Array, shape: tuple[int, ...], dtype,
                 clip_norm: float | jax.Array, noise_multiplier: float) -> jax.Array:
  """``G(0, S^2 sigma^2)``: what the server adds when no client's share arrives.

  >>> z = server_noise(jax.random.PRNGKey(0), (1000,), jnp.float32, 2.0, 1.5)
  >>> 2.7 < float(jnp.std(z)) < 3.3
  True
  """
  return (l2_sensitivity(clip_norm) * noise_multiplier *
          jax.random.normal(server_key, shape, dtype))


# Rows at least this long are summed as a matrix-vector product.
MATVEC_SUM_MIN = 2**20


def masked_sum(values: jax.Array, slot_mask: jax.Array) -> jax.Array:
  """Sum of the rows of ``values`` whose slot is real, ``sum_k mask_k v_k``.

  Rows of ``MATVEC_SUM_MIN`` values or more (FL-STD's whole model) are summed
  as a (capacity,) x (capacity, m) product at full float32 precision:
  XLA:CPU reduces the leading axis of such arrays far slower than it
  multiplies them by a vector (docs/performance.md, "What makes the round
  fast"). A row left out that is not finite (a padding slot's or a dropped
  client's diverged update) would make the product NaN (0 x inf): where the
  product is not finite, the masked reduction gives the sum instead (the
  same rounding as for shorter rows, which always take it).

  Args:
    values: (capacity, m) float rows.
    slot_mask: (capacity,) bool.

  Returns:
    (m,) the sum of the masked rows.

  >>> values = jnp.array([[1.0, 2.0], [30.0, 40.0], [5.0, 6.0]])
  >>> masked_sum(values, jnp.array([True, False, True])).tolist()
  [6.0, 8.0]
  """
  def reduced():
    return jnp.sum(jnp.where(slot_mask[:, None], values, 0.0), axis=0)

  if values.shape[-1] < MATVEC_SUM_MIN:
    return reduced()
  weights = slot_mask.astype(values.dtype)
  total = jnp.matmul(weights, values, precision=jax.lax.Precision.HIGHEST)
  return jax.lax.cond(jnp.all(jnp.isfinite(total)), lambda: total, reduced)


def noisy_sum(updates: jax.Array, slot_mask: jax.Array, noise_keys: jax.Array,
              server_key: jax.Array, clip_norm: float | jax.Array,
              noise_multiplier: float) -> tuple[jax.Array, jax.Array]:
  """Clips, noises and sums the compressed updates of one cohort.

  Simulates UAI 2021 Algorithm 3 lines 25-27 followed by the secure sum of
  Eq. (1): ``sum_k (clip(u_k) + z_k)`` with ``z_k ~ G(0, S^2 sigma^2 / |K|)``
  (:func:`privatize` then a plain sum; see
  ``fedjax_dp.privacy.secure_aggregation`` for the modular masked sum).

  Args:
    updates: (capacity, m) compressed updates, one row per cohort slot.
    slot_mask: (capacity,) bool, True for real participants.
    noise_keys: (capacity, 2) per-client PRNG keys used for nothing else.
    server_key: Key for the server's fallback noise when the cohort is empty.
    clip_norm: S.
    noise_multiplier: sigma >= 0.

  Returns:
    ``(noisy_sum, num_clipped)``: the (m,) aggregate and the number of real
    clients whose update was longer than S.

  Two real clients (one clipped from norm 5 to S = 1) and a padding slot:

  >>> updates = jnp.array([[3.0, 4.0], [0.3, 0.4], [9.0, 9.0]])
  >>> mask = jnp.array([True, True, False])
  >>> noise_keys = jax.random.split(jax.random.PRNGKey(0), 3)
  >>> server_key = jax.random.PRNGKey(1)
  >>> total, clipped = noisy_sum(updates, mask, noise_keys, server_key, 1.0, 0.0)
  >>> [round(float(v), 4) for v in total], int(clipped)
  ([0.9, 1.2], 1)
  >>> total, _ = noisy_sum(updates, mask, noise_keys, server_key, 1.0, 1.1)
  >>> total.shape
  (2,)
  """
  num_real = jnp.sum(slot_mask)
  contributions, num_clipped = privatize(updates, slot_mask, noise_keys, clip_norm,
                                         noise_multiplier, num_real)
  total = masked_sum(contributions, slot_mask)
  # Empty cohort: nobody adds a share, so the server adds G(0, S^2 sigma^2).
  fallback = server_noise(server_key, updates.shape[1:], updates.dtype, clip_norm,
                          noise_multiplier)
  total = total + jnp.where(num_real == 0, 1.0, 0.0) * fallback
  return total, num_clipped
