"""L2 clipping of (compressed) client updates.

UAI 2021, Algorithm 3 line 26 / thesis Algorithm 10: each client scales its
compressed update to L2 norm at most S, ``x / max(1, ||x||_2 / S)``. After
clipping, adding or removing one client changes the sum of updates by at most
S in L2 norm: that sensitivity is what the Gaussian noise is calibrated to.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def l2_sensitivity(clip_norm: float) -> float:
  """L2 sensitivity of a sum of clipped updates under add/remove-one-client.

  Args:
    clip_norm: The clip norm S.

  Returns:
    S: one client's clipped update is all that one client can change.
  """
  return clip_norm


def clip_by_l2_norm(x: jax.Array, clip_norm: float | jax.Array
                    ) -> tuple[jax.Array, jax.Array]:
  """Scales ``x`` to L2 norm at most ``clip_norm``; shorter vectors unchanged.

  A vector whose norm is not finite (a NaN or infinite entry, as local
  training that diverged gives, or a norm beyond float32's range) becomes
  zeros: the result has norm at most S whatever ``x`` is, so the
  sensitivity S holds for every client. Without this one diverged client
  would make the noisy sum NaN, a release the Gaussian mechanism does not
  cover (it would tell that some client diverged), and the model NaN for
  the rest of the run.

  Args:
    x: A flat update vector.
    clip_norm: The clip norm S > 0.

  Returns:
    ``(clipped, norm)``: the clipped vector and the norm of ``x`` before
    clipping (NaN or inf for a zeroed vector).
  """
  norm = jnp.sqrt(jnp.sum(jnp.square(x)))
  finite = jnp.isfinite(norm)
  # x / max(1, ||x|| / S); the max keeps a zero vector at zero (no 0/0).
  scale = 1.0 / jnp.maximum(1.0, norm / clip_norm)
  return jnp.where(finite, x * scale, 0.0), norm
