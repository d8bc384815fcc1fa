"""Sample-level DP local training: Poisson batches, per-example clipping.

Poster (seed 001), Algorithm 1 lines 2-6: a participant draws a Poisson
subsample of its own records (each record independently with probability
q), computes the gradient, clips it to norm S_q and perturbs it with
Gaussian noise. For *record*-level DP the clipping is per example (the
DP-SGD of Abadi et al. 2016): each example's gradient is clipped to S, the
clipped gradients are summed (L2 sensitivity S under adding or removing one
record) and ``N(0, sigma^2 S^2 I)`` is added. Per-example gradients are
``vmap`` of ``grad`` over the batch, taken a micro-batch at a time
(``lax.scan``) so memory stays at ``microbatch x n`` floats per client.

``jit`` needs a static batch shape: a Poisson batch lives in ``capacity``
slots with a mask (``fedjax_dp.sampling.sample_cohort`` applied to records:
the slots are filled in increasing uniform draws, so a draw larger than the
capacity would keep a uniformly random subset). :func:`plan_batch_capacity`
draws every batch a run will use in advance and returns the largest, so no
batch is ever truncated and the accounting is that of plain Poisson
sampling.

Every function handles one client; the round ``vmap`` s them over the cohort.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp import sampling

LossFn = Callable[[jax.Array, jax.Array, jax.Array], jax.Array]

# Sub-purposes of one local step's key (fold_in constants; never reused).
BATCH, NOISE = 0, 1


def batch_size_draw(key: jax.Array, num_records: int, rate: float) -> jax.Array:
  """The Poisson batch size of a step key, as :func:`poisson_batch` draws it."""
  return jnp.sum(jax.random.uniform(key, (num_records,)) < rate)


def poisson_batch(key: jax.Array, num_records: int, rate: float,
                  capacity: int) -> sampling.Cohort:
  """A Poisson subsample of a client's records in ``capacity`` slots.

  Each record joins independently with probability ``rate`` (poster Alg. 1
  line 3, the Poisson subsampling S^po).

  Returns:
    ``Cohort(indices, mask, num_sampled)`` over record indices.
  """
  return sampling.sample_cohort(key, num_records, rate, capacity, "poisson")


def clipped_gradient_sum(loss_fn: LossFn, w: jax.Array, x: jax.Array, y: jax.Array,
                         indices: jax.Array, mask: jax.Array, clip_norm: float,
                         microbatch: int, count: jax.Array | None = None
                         ) -> tuple[jax.Array, jax.Array]:
  """``sum_i g_i / max(1, ||g_i|| / S)`` over the masked examples; a
  gradient whose norm is not finite adds nothing.

  Args:
    loss_fn: ``loss_fn(w, xb, yb)``, the mean loss of a batch.
    w: (n,) weights.
    x: (records, ...) the client's examples.
    y: (records,) labels.
    indices: (capacity,) record index of each slot.
    mask: (capacity,) real slots.
    clip_norm: S.
    microbatch: Examples whose gradients are materialised at once.
    count: Optional number of leading real slots (the mask is then
      ``arange(capacity) < count``, as :func:`poisson_batch` fills it):
      micro-batches past it are skipped (a ``while_loop``; under ``vmap``
      over clients it runs to the cohort's largest batch).

  Returns:
    ``(sum of clipped gradients (n,), number of examples clipped)``.
  """
  capacity = indices.shape[0]
  mb = max(1, min(microbatch, capacity))
  pad = (-capacity) % mb
  indices = jnp.pad(indices, (0, pad)).reshape(-1, mb)
  mask = jnp.pad(mask, (0, pad)).reshape(-1, mb)
  per_example = jax.vmap(lambda xi, yi: jax.grad(loss_fn)(w, xi[None], yi[None]))

  def add(total, clipped, idx, real):
    g = per_example(x[idx], y[idx])  # (mb, n)
    norms = jnp.sqrt(jnp.sum(jnp.square(g), axis=1))
    # A gradient that is not finite counts as zero (and as clipped), as in
    # clipping.clip_by_l2_norm: the sensitivity S holds for every example.
    finite = jnp.isfinite(norms)
    scale = jnp.where(real & finite, 1.0 / jnp.maximum(1.0, norms / clip_norm), 0.0)
    g = jnp.where(finite[:, None], g, 0.0)
    # Full float32 (a GPU's default would round g to TF32's 10-bit mantissa:
    # a sum of clipped gradients up to ~5e-4 longer than S allows).
    summed = jnp.matmul(scale, g, precision=jax.lax.Precision.HIGHEST)
    return total + summed, clipped + jnp.sum(real & ~(norms <= clip_norm))

  init = (jnp.zeros_like(w), jnp.int32(0))
  if count is None:
    (total, clipped), _ = jax.lax.scan(
        lambda carry, inputs: (add(*carry, *inputs), None), init, (indices, mask))
    return total, clipped

  def body(carry):
    i, total, clipped = carry
    return (i + 1,) + add(total, clipped, indices[i], mask[i])

  _, total, clipped = jax.lax.while_loop(lambda c: c[0] * mb < count, body,
                                         (jnp.int32(0),) + init)
  return total, clipped


def local_dp_sgd(loss_fn: LossFn, w_start: jax.Array, x: jax.Array, y: jax.Array,
                 key: jax.Array, *, steps: int, rate: float, capacity: int, lr: float,
                 clip_norm: float, noise_multiplier: float, microbatch: int = 8
                 ) -> tuple[jax.Array, jax.Array]:
  """``steps`` steps of DP-SGD on one client's records.

  Step s: a Poisson batch B_s (rate q), ``G_s = sum_{i in B_s} clip(g_i, S)``,
  ``w -= lr (G_s + N(0, sigma^2 S^2 I)) / (q |D_k|)`` -- the noisy sum over
  the *expected* batch size, so the step does not depend on the realised
  (private) batch size. Each step is one Poisson-subsampled Gaussian
  mechanism with noise multiplier sigma on the client's records.

  Args:
    loss_fn: As in :func:`clipped_gradient_sum`.
    w_start: (n,) starting weights.
    x: (records, ...) examples.
    y: (records,) labels.
    key: The client's key; step s uses ``split(key, steps)[s]``.
    steps: T_gd.
    rate: q = |B| / |D_k|.
    capacity: Batch slots (>= every drawn batch; see :func:`plan_batch_capacity`).
    lr: eta.
    clip_norm: S.
    noise_multiplier: sigma.
    microbatch: Per-example gradients materialised at once.

  Returns:
    ``(weights after the steps, examples clipped)``.
  """
  num_records = x.shape[0]
  expected = rate * num_records

  def step(carry, step_key):
    w, clipped = carry
    batch = poisson_batch(jax.random.fold_in(step_key, BATCH), num_records, rate, capacity)
    total, nclip = clipped_gradient_sum(loss_fn, w, x, y, batch.indices, batch.mask,
                                        clip_norm, microbatch,
                                        jnp.minimum(batch.num_sampled, capacity))
    noise = jax.random.normal(jax.random.fold_in(step_key, NOISE), w.shape, w.dtype)
    noisy = total + noise_multiplier * clip_norm * noise
    return (w - lr * noisy / expected, clipped + nclip), None

  (w, clipped), _ = jax.lax.scan(step, (w_start, jnp.int32(0)),
                                 jax.random.split(key, steps))
  return w, clipped


def plan_batch_capacity(step_keys: Callable[[int], jax.Array], num_rounds: int,
                        num_records: int, rate: float, multiple: int = 1) -> int:
  """The smallest capacity that holds every Poisson batch of a run untruncated.

  Args:
    step_keys: ``step_keys(t)`` -> (m, 2) every local-step key of round t
      (all clients, all steps), jittable in t.
    num_rounds: Rounds T (t = 1..T).
    num_records: |D_k|.
    rate: q.
    multiple: Round the capacity up to a multiple of this.

  Returns:
    The capacity, at most ``num_records``.
  """
  if rate >= 1.0:
    return num_records

  @jax.jit
  def largest():
    def one(t):
      ks = step_keys(t)
      return jnp.max(jax.vmap(
          lambda k: batch_size_draw(jax.random.fold_in(k, BATCH), num_records, rate))(ks))
    return jnp.max(jax.lax.map(one, jnp.arange(1, num_rounds + 1, dtype=jnp.int32)))

  size = max(1, int(np.asarray(largest())))
  return int(min(num_records, -(-size // multiple) * multiple))
