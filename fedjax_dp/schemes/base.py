"""The interface every scheme implements, and what the round gives it.

A round of any scheme (thesis Ch. 2, UAI 2021 Sec. 3) has four scheme-specific
steps, each a pure function the generic round in ``fedjax_dp.simulation``
calls inside ``jit``:

1. ``round_plan``: what all clients of the round share (a coordinate subset
   drawn from the round's shared seed, ...), from the scheme state.
2. ``client_message``: one client's local training and encoding into the
   vector it sends (vmapped over the cohort by the caller).
3. ``aggregate``: the cohort's messages are summed (the secure sum). DP
   schemes clip each message to S and add a Gaussian share first;
   :func:`gaussian_aggregate` is that default.
4. ``server_update``: decode the mean message and update model and state.

``setup`` runs once on the server before round 1 (public-data work such as
the Top-K selection), and ``calibrate_clip`` derives S from public data.

Secure aggregation, client failures and chunked cohorts need the step before
the sum on its own: :func:`contributions` gives each client's privatised
message (a scheme may define ``contributions`` and ``server_noise`` itself,
as FL-SIGN-DP does with discrete Gaussian integers; otherwise the Gaussian
default applies), and the round sums them, plainly or securely.

Optional attributes a scheme may have (``fedjax_dp.schemes.sign`` has all):
``integer_messages`` (secure aggregation encodes with scale 1),
``max_abs_value`` (largest noiseless coordinate, for the secure modulus;
default S), ``upstream_bits`` / ``downstream_bits`` (bits per value; default
32; ``upstream_bits = None`` means the thesis 5.2.4 modulus),
``fixed_clip_norm(n)`` (a sensitivity that is not calibrated) and
``discrete_gaussian`` (accounted with thesis Theorem 3).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp

from fedjax_dp.models import FlatModel
from fedjax_dp.privacy import noise
from fedjax_dp.privacy.noise import noisy_sum


class LocalTraining(NamedTuple):
  """Client-side hyper-parameters: T_gd steps of SGD with |B| and eta."""

  steps: int
  batch_size: int
  lr: float


class SetupData(NamedTuple):
  """What the server has before round 1.

  Attributes:
    model: The model.
    w0: (n,) initial weights (shared by every party, UAI Alg. 1 line 2).
    public_x: The server's public batch (UAI Sec. 4).
    public_y: Its labels.
    key: Setup key; the scheme derives its own sub-keys by ``fold_in``.
    ratio: Compression ratio r.
    init_steps: T_init public-data steps.
    local: Local-training hyper-parameters.
  """

  model: FlatModel
  w0: jax.Array
  public_x: jax.Array
  public_y: jax.Array
  key: jax.Array
  ratio: float
  init_steps: int
  local: LocalTraining


class Scheme(Protocol):
  """A federated learning scheme (see the module docstring for the round).

  Attributes:
    name: The paper's name, e.g. "FL-TOP-DP".
    dp: Messages are clipped and noised (client-level DP).
    uses_ratio: The compression ratio r applies.
  """

  name: str
  dp: bool

  @property
  def uses_ratio(self) -> bool: ...

  def num_values(self, num_params: int, ratio: float) -> int:
    """Length m of a client's message."""

  def num_downstream(self, num_params: int, ratio: float) -> int:
    """Values the server sends each client per round."""

  def setup(self, data: SetupData) -> Any:
    """The scheme's initial server state (a pytree)."""

  def calibrate_clip(self, data: SetupData, state: Any) -> float:
    """Clip norm S derived from public data (DP schemes)."""

  def round_plan(self, state: Any, key: jax.Array, num_params: int, m: int) -> Any:
    """What every client shares this round, from the round's shared key."""

  def client_message(self, model: FlatModel, w: jax.Array, plan: Any, x: jax.Array,
                     y: jax.Array, key: jax.Array, local: LocalTraining) -> jax.Array:
    """One client's (m,) message: local training then encoding."""

  def aggregate(self, messages: jax.Array, slot_mask: jax.Array, noise_keys: jax.Array,
                server_key: jax.Array, clip_norm: float,
                noise_multiplier: float) -> tuple[jax.Array, jax.Array]:
    """(sum of the cohort's (privatised) messages, number clipped)."""

  def server_update(self, w: jax.Array, state: Any, mean: jax.Array,
                    plan: Any) -> tuple[jax.Array, Any]:
    """New (weights, state) from the mean message."""


def gaussian_aggregate(dp: bool, messages: jax.Array, slot_mask: jax.Array,
                       noise_keys: jax.Array, server_key: jax.Array, clip_norm: float,
                       noise_multiplier: float) -> tuple[jax.Array, jax.Array]:
  """The sum of real slots; for DP, of clipped messages plus noise shares.

  UAI 2021 Algorithm 3 lines 25-27 and Eq. (1); see
  ``fedjax_dp.privacy.noise.noisy_sum``.

  Returns:
    ``(total, num_clipped)``.
  """
  if dp:
    return noisy_sum(messages, slot_mask, noise_keys, server_key, clip_norm,
                     noise_multiplier)
  total = noise.masked_sum(messages, slot_mask)
  return total, jnp.zeros((), jnp.int32)


def contributions(scheme: Scheme, messages: jax.Array, slot_mask: jax.Array,
                  noise_keys: jax.Array, clip_norm: float, noise_multiplier: float,
                  num_shares: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Each client's input to the (secure) sum, before summing.

  The scheme's own ``contributions`` method if it has one; otherwise, for DP
  schemes, the clipped message plus a Gaussian share
  ``G(0, S^2 sigma^2 / num_shares)`` (``fedjax_dp.privacy.noise.privatize``),
  and the message itself without DP.

  Args:
    scheme: The scheme.
    messages: (capacity, m) messages.
    slot_mask: (capacity,) real participants.
    noise_keys: (capacity, 2) per-client noise keys.
    clip_norm: S.
    noise_multiplier: sigma.
    num_shares: How many shares the aggregate noise is split into (|K|, or
      |K| - l to tolerate l failures, thesis 5.2.5).

  Returns:
    ``(contributions, num_clipped)``.
  """
  own = getattr(scheme, "contributions", None)
  if own is not None:
    return own(messages, slot_mask, noise_keys, clip_norm, noise_multiplier, num_shares)
  if scheme.dp:
    return noise.privatize(messages, slot_mask, noise_keys, clip_norm, noise_multiplier,
                           num_shares)
  return messages, jnp.zeros((), jnp.int32)


def server_noise(scheme: Scheme, key: jax.Array, shape: tuple[int, ...], dtype,
                 clip_norm: float, noise_multiplier: float) -> jax.Array:
  """The full aggregate noise, added by the server when no share arrives."""
  own = getattr(scheme, "server_noise", None)
  if own is not None:
    return own(key, shape, clip_norm, noise_multiplier)
  return noise.server_noise(key, shape, dtype, clip_norm, noise_multiplier)
