"""FL-SIGN, FL-SIGN-DP and signSGD: one sign per weight, majority vote.

Thesis Sec. 4.1.1 (Alg. 3): each sampled client runs T_gd local SGD steps and
sends ``sign(w_k - w)`` (a uniformly random sign where the update is 0); the
server takes the sign of the sum of signs (the coordinate-wise majority vote)
and moves every weight by ``gamma``: ``w += gamma * sign(sum_k s_k)``. The
votes are not weighted by |D_k|. One bit per weight goes up.

FL-SIGN-DP (thesis Sec. 5.2, Alg. 9): each client sends the integers
``z_k ~ DG(sign(delta_k), sqrt(n) sigma / sqrt(|K|))`` (the exact discrete
Gaussian sampler of ``fedjax_dp.privacy.discrete_gaussian``) under secure
aggregation; a sign vector has L2 norm exactly sqrt(n), the sensitivity
(thesis Table 8.2: S = sqrt(n), no clipping). The server sees
``sum_k z_k``, whose privacy is thesis Theorem 3
(``accounting.epsilon_discrete_gaussian``); an upstream value needs
``log2 m = ceil(log2((12 sqrt(n) sigma + 1) |K|))`` bits (thesis 5.2.4).

signSGD with majority vote (Bernstein et al. 2018, as the thesis describes it
in Sec. 4.1.1): *every* client computes the gradient of one mini-batch and
sends its sign; the server broadcasts the sign of the vote (1 bit per weight
down). Its preset samples all clients (C = 1).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

import jax
import jax.numpy as jnp

from fedjax_dp import local_training, options
from fedjax_dp.models import FlatModel
from fedjax_dp.privacy.accounting import Mechanism
from fedjax_dp.privacy.dg_table import (DiscreteGaussianTable, discrete_gaussian_table,
                                        draw_marked, resolve_ties, sample_table)
from fedjax_dp.privacy.discrete_gaussian import sample_discrete_gaussian
from fedjax_dp.schemes.base import Family, LocalTraining, Noise, Scheme, SetupData, Traits


@dataclasses.dataclass(frozen=True, eq=False)
class NoiseTables:
  """FL-SIGN-DP's discrete Gaussian tables for one run (its ``run_constants``).

  Attributes:
    noise_multiplier: The run's sigma.
    fewest_shares: The share count of the first row of ``shares``.
    shares: Row r is ``DG(0, sqrt(n) sigma / sqrt(fewest_shares + r))``, one
      client's share for every share count a planned or possible round has.
    server: ``DG(0, sqrt(n) sigma)``, the server's noise when no share arrives.
  """

  noise_multiplier: float
  fewest_shares: int
  shares: DiscreteGaussianTable
  server: DiscreteGaussianTable


def random_tie_sign(delta: jax.Array, key: jax.Array) -> jax.Array:
  """``sign(delta)`` in {-1, +1} as int8, a fair coin where delta is 0 (Alg. 3)."""
  coin = jax.random.bernoulli(key, 0.5, delta.shape)
  tie = jnp.where(coin, 1, -1).astype(jnp.int8)
  return jnp.where(delta > 0, jnp.int8(1), jnp.where(delta < 0, jnp.int8(-1), tie))


def _over_clients(fn, messages, slot_mask, keys):
  """(slots, n) int32 ``fn(message, key)`` for every slot, zero for padding slots.

  On a CPU one slot after the other (``lax.scan``: a padding slot computes
  nothing, and memory stays one client's); elsewhere all at once (``vmap``,
  padding masked by ``jnp.where``): no per-client control flow, which on a
  GPU is a device-to-host synchronisation per client.
  """
  n = messages.shape[1]

  def scanned(messages, slot_mask, keys):
    def one(_, inputs):
      message, key, real = inputs
      return None, jax.lax.cond(real, lambda: fn(message, key),
                                lambda: jnp.zeros((n,), jnp.int32))
    return jax.lax.scan(one, None, (messages, keys, slot_mask))[1]

  def vectorised(messages, slot_mask, keys):
    return jnp.where(slot_mask[:, None], jax.vmap(fn)(messages, keys), 0)

  return jax.lax.platform_dependent(messages, slot_mask, keys, cpu=scanned,
                                    default=vectorised)


def table_shares(messages: jax.Array, slot_mask: jax.Array, keys: jax.Array,
                 table: DiscreteGaussianTable, row: jax.Array, vectorised: bool | None = None,
                 max_ties: int | None = None) -> jax.Array:
  """FL-SIGN-DP's shares ``message + DG(0, xi_row)`` from the alias tables (Alg. 9).

  Every slot's values from one table lookup per element
  (``dg_table.draw_marked``: branch-free), then the rare ties of all slots
  decided in one loop (``dg_table.resolve_ties``). Slot s draws exactly
  ``dg_table.sample_table(keys[s], table, (n,), row)``, whichever way.

  Args:
    messages: (slots, n) integer signs.
    slot_mask: (slots,) real slots; the others are zero.
    keys: (slots,) the slots' noise keys.
    table: The share tables.
    row: The row of the round's share count (traced).
    vectorised: All slots at once (a GPU's way) or one after the other (a
      CPU's); default: chosen by the platform the program is lowered for.
    max_ties: Chunks with ties visited per iteration of the ties' loop
      (``dg_table.resolve_ties``; tests).

  Returns:
    (slots, n) int32.
  """
  n = messages.shape[1]

  one = lambda message, key, scan: draw_marked(key, table, n, row, offset=message, scan=scan)

  def scanned(messages, slot_mask, keys):
    def step(_, inputs):
      message, key, real = inputs
      return None, jax.lax.cond(real, lambda: one(message, key, True),
                                lambda: jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype),
                                                     jax.eval_shape(lambda m, k: one(m, k, True),
                                                                    message, key)))
    return jax.lax.scan(step, None, (messages, keys, slot_mask))[1]

  def all_at_once(messages, slot_mask, keys):
    values, ties = jax.vmap(lambda m, k: one(m, k, False))(messages, keys)
    return jnp.where(slot_mask[:, None], values, 0), jnp.where(slot_mask[:, None], ties, 0)

  if vectorised is None:
    values, ties = jax.lax.platform_dependent(messages, slot_mask, keys, cpu=scanned,
                                              default=all_at_once)
  else:
    values, ties = (all_at_once if vectorised else scanned)(messages, slot_mask, keys)
  return resolve_ties(values, ties, keys, table, row, offset=messages, max_ties=max_ties)


@dataclasses.dataclass(frozen=True)
class SignScheme(Scheme):
  """A sign-quantised federated learning scheme.

  Attributes:
    name: "FL-SIGN", "FL-SIGN-DP" or "signSGD".
    private: Discrete Gaussian noise shares (FL-SIGN-DP).
    single_batch: Send the sign of one mini-batch gradient instead of the
      sign of a T_gd-step local update (signSGD).
    gamma: Server step size gamma (thesis Table 8.1: 0.001; Table 8.2:
      0.005 for FL-SIGN-DP).
    reference: Where the scheme is defined.

  FL-SIGN-DP's noise tables for a run are its ``run_constants``, kept in
  the run's plan; without them (a direct call) the noise comes from the
  rejection sampler.
  """

  name: str
  private: bool
  single_batch: bool
  gamma: float
  reference: str

  @property
  def traits(self) -> Traits:
    """Integer messages of n signs (|x| <= 1).

    Up: 1 bit a sign; FL-SIGN-DP's integers are always encrypted, so a value
    costs the secure modulus (thesis 5.2.4). Down: signSGD broadcasts the
    1-bit vote, the others the model. The sensitivity of a sign vector is
    sqrt(n) by construction (thesis Table 8.2: no clipping).
    """
    return Traits(dp=self.private, uses_ratio=False, integer_messages=True,
                  max_abs_value=1.0, upstream_bits=None if self.private else 1,
                  downstream_bits=1 if self.single_batch else 32,
                  fixed_sensitivity=True,
                  sensitivity_reason="sqrt(n): a sign vector's L2 norm (thesis Table 8.2)",
                  # signSGD sends one batch's gradient: no local optimiser runs.
                  local_optimizers=("sgd",) if self.single_batch else ("sgd", "adam"),
                  run_constants=self.private,
                  trains_by_local_update=not self.single_batch)

  def num_kept(self, num_params: int, ratio: float) -> int:
    """n signs (or noisy integers) up per client and round."""
    return num_params

  def num_downstream(self, num_params: int, ratio: float) -> int:
    """n values down."""
    return num_params

  def setup(self, data: SetupData) -> jax.Array:
    """No server state."""
    return jnp.zeros((0,), jnp.int32)

  def calibrate_clip(self, data: SetupData, state: jax.Array) -> float:
    """S = sqrt(n), the L2 norm of a sign vector: no clipping (thesis Table 8.2)."""
    return math.sqrt(int(data.w0.shape[0]))

  def round_plan(self, state, key, num_params, num_kept):
    """Nothing shared beyond the model."""
    return None

  def client_message(self, model: FlatModel, w: jax.Array, plan, x: jax.Array,
                     y: jax.Array, key: jax.Array, local: LocalTraining, *, noise=None,
                     constants=None) -> jax.Array:
    """(n,) int8 signs of the local update (of the negative gradient for signSGD);
    FL-SIGN-DP's noise comes later (``privatize``), so ``noise`` and
    ``constants`` are not used."""
    del noise, constants
    train_key, tie_key = jax.random.split(key)
    if self.single_batch:
      delta = -local_training.batch_gradient(model.loss, w, x, y, train_key, local.batch_size)
    else:
      delta = local.update(model, w, x, y, train_key)
    return random_tie_sign(delta, tie_key)

  def share_scale(self, num_params: int, noise_multiplier: float,
                  num_shares: jax.Array) -> jax.Array:
    """``sqrt(n) sigma / sqrt(num_shares)``, one client's DG scale (Alg. 9)."""
    shares = jnp.maximum(num_shares, 1).astype(jnp.float32)
    return math.sqrt(num_params) * noise_multiplier / jnp.sqrt(shares)

  def run_constants(self, data: SetupData, clip_norm: float) -> NoiseTables:
    """FL-SIGN-DP: the alias tables of every share scale the run can use.

    One row per share count from the fewest of the planned rounds to the
    most the capacity allows (``data.num_shares``), and the server's full
    noise; built once (``fedjax_dp.privacy.dg_table``).
    """
    del clip_norm  # sqrt(n) by construction
    n, sigma = int(data.w0.shape[0]), float(data.noise_multiplier)
    fewest, most = data.num_shares
    scale = lambda shares: math.sqrt(n) * sigma / math.sqrt(shares)
    return NoiseTables(
        sigma, fewest, discrete_gaussian_table([scale(r) for r in range(fewest, most + 1)]),
        discrete_gaussian_table(scale(1)))

  def privatize(self, messages, slot_mask, noise_keys, noise: Noise, *,
                constants: NoiseTables | None = None):
    """(capacity, n) int32: the signs, or ``DG(sign, share scale)`` for -DP.

    ``noise.clip_norm`` is ignored: the sensitivity is sqrt(n) by construction.
    With the run's ``constants`` (:meth:`run_constants`), the shares come
    from the alias table of the round's share count (:func:`table_shares`);
    a count outside the tables (a round the run did not plan, with fewer
    clients than any planned one) and a call without them use the rejection
    sampler. Padding slots are zero. All
    device code (no host callback).
    """
    noise_multiplier, num_shares = noise.noise_multiplier, noise.num_shares
    zero = jnp.zeros((), jnp.int32)
    if not self.private:
      return messages.astype(jnp.int32), zero
    n = messages.shape[1]

    def rejection(scale, max_levels=None):
      return _over_clients(lambda m, key: m.astype(jnp.int32) + sample_discrete_gaussian(
          key, 0.0, scale, (n,), max_levels), messages, slot_mask, noise_keys)

    if constants is None:
      return rejection(self.share_scale(n, noise_multiplier, num_shares)), zero
    sigma = constants.noise_multiplier
    if isinstance(noise_multiplier, (int, float)) and noise_multiplier != sigma:
      raise ValueError(f"noise_multiplier {noise_multiplier} differs from the "
                       f"{sigma} the tables were built for")
    row = num_shares - constants.fewest_shares
    table = constants.shares
    return jax.lax.cond(
        (row >= 0) & (row < table.rows),
        lambda: table_shares(messages, slot_mask, noise_keys, table, row),
        # Rare: 2 of the 5 buffer levels, about 8 s less CPU time to compile
        # (docs/performance.md), a few more passes when it runs.
        lambda: rejection(self.share_scale(n, sigma, num_shares), max_levels=2),
    ), zero

  def server_noise(self, key, shape, noise: Noise, *,
                   constants: NoiseTables | None = None):
    """``DG(0, sqrt(n) sigma)`` when no client's share arrives."""
    if constants is not None:
      return sample_table(key, constants.server, shape)
    n = int(shape[0])
    return sample_discrete_gaussian(key, 0.0, math.sqrt(n) * noise.noise_multiplier, shape)

  def server_update(self, w: jax.Array, state: jax.Array, mean: jax.Array,
                    plan) -> tuple[jax.Array, jax.Array]:
    """``w += gamma * sign(sum)`` (Alg. 3 line 8; a tie moves nothing)."""
    return w + self.gamma * jnp.sign(mean), state

  def mechanism(self, noise_multiplier: float, num_kept: int, local: LocalTraining,
                samples_per_client: int) -> Mechanism:
    """FL-SIGN-DP: the distributed discrete Gaussian of thesis Theorem 3."""
    if not self.private:
      return Mechanism(kind="none")
    return Mechanism(kind="discrete_gaussian", noise_multiplier=noise_multiplier,
                     dimension=num_kept)

  def describe(self) -> dict:
    """The server step gamma."""
    return {"gamma": self.gamma}


# The server steps gamma: thesis Table 8.1 (FL-SIGN, also Table 8.3's) and Table 8.2
# (FL-SIGN-DP); fedjax_dp.paper's tests check them against the papers' settings.
GAMMA = 0.001
DP_GAMMA = 0.005

SIGN_SCHEMES = {
    s.name: s for s in (
        SignScheme("FL-SIGN", False, False, GAMMA, "thesis Sec. 4.1.1, Alg. 3"),
        SignScheme("FL-SIGN-DP", True, False, DP_GAMMA, "thesis Sec. 5.2, Alg. 9"),
        SignScheme("signSGD", False, True, GAMMA,
                   "Bernstein et al. 2018; thesis Sec. 4.1.1"),
    )
}


# The papers' settings of these schemes (thesis Tables 8.1, 8.2, 8.4) are the papers'
# app's presets (fedjax_dp.paper.presets.SIGN), applied by the command line.


OPTIONS = (options.Option("gamma", options.positive, None,
                          "server step gamma (default: 0.001 for FL-SIGN and signSGD, 0.005 "
                          "for FL-SIGN-DP)"),)


def configure(scheme: Scheme, values: Mapping[str, Any]) -> Scheme:
  """The scheme with ``gamma``, if given."""
  gamma = values.get("gamma")
  return scheme if gamma is None else dataclasses.replace(scheme, gamma=gamma)


FAMILY = Family("FL-SIGN / FL-SIGN-DP / signSGD (presets: thesis Tables 8.1, 8.2; "
                "Sec. 4.1.1)", SIGN_SCHEMES, options=OPTIONS, configure=configure)
