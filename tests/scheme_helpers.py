"""The round's aggregation for a few messages, outside the round (test helper)."""

import jax.numpy as jnp

from fedjax_dp.privacy import noise


def privatized_sum(scheme, messages, slot_mask, noise_keys, clip_norm, noise_multiplier):
  """``(sum of scheme.privatize's contributions of the real slots, num_clipped)``.

  What the round computes with no failures and a plain sum (shares sized for
  the real clients; an empty cohort is not handled here).
  """
  num_shares = jnp.maximum(jnp.sum(slot_mask), 1)
  contribs, clipped = scheme.privatize(messages, slot_mask, noise_keys, clip_norm,
                                       noise_multiplier, num_shares)
  if jnp.issubdtype(contribs.dtype, jnp.integer):
    total = jnp.sum(jnp.where(slot_mask[:, None], contribs, 0), axis=0)
  else:
    total = noise.masked_sum(contribs, slot_mask)
  return total.astype(jnp.float32), clipped
