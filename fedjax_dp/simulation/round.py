"""The jitted federated round.

One round (UAI 2021, Algorithms 1-6): sample a cohort, train every sampled
client in parallel (``vmap`` over the client axis, sharded over devices),
compress each update to the round's coordinate subset, clip and noise it for
DP schemes, sum the cohort (``simulation.sums``: plain, secure or robust) and
update the server model. The round's features (``fedjax_dp.features``:
attacks, the canary audit, dropouts, adaptive clipping) enter at the points
their protocol names; the round knows none of them.

The round is a pure function of (server state, client data, run key, round
index); ``make_rounds_fn`` compiles a ``lax.scan`` over several rounds so a
run only returns to Python at evaluation points.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from fedjax_dp import fast_prng, keys, sampling, sharding
from fedjax_dp.data import ClientData, as_float
from fedjax_dp.models import FlatModel
from fedjax_dp.privacy import noise as noise_lib
from fedjax_dp.round_types import At, Chunk, Noise, Observed, RoundInputs, Trainer
from fedjax_dp.simulation import sums
from fedjax_dp.simulation.plan import Plan

# The Noise of a scheme without DP carries this clip norm, which nothing reads
# (its privatize returns the messages); 1.0 keeps the compiled round as before.
_CLIP_UNUSED = 1.0


class ServerState(NamedTuple):
  """What the server carries between rounds.

  Attributes:
    weights: (n,) the global model.
    scheme_state: The scheme's own state (a pytree), e.g. FL-TOP's Top-K
      indices, from ``scheme.setup``.
    features: Each feature's state, in ``Plan.features`` order.
  """

  weights: jax.Array
  scheme_state: Any
  features: tuple = ()


class RoundInfo(NamedTuple):
  """Per-round diagnostics (no private data: counts only).

  Attributes:
    num_sampled: Clients the sampler selected.
    num_clipped: Sampled clients whose message was longer than S (a client
      that then failed included: it clipped before its message was lost).
    secure_overflow: Coordinates whose secure sum overflowed the modulus.
    features: Each feature's ``info`` (a dict of counts).
    num_silent: Sampled clients of the cohort whose message never arrived
      (they failed: the features' ``failures``).
  """

  num_sampled: jax.Array
  num_clipped: jax.Array
  secure_overflow: jax.Array | int = 0
  features: tuple = ()
  num_silent: jax.Array | int = 0


def round_inputs(plan: Plan, state: ServerState, run_key: jax.Array,
                 t: jax.Array) -> RoundInputs:
  """Round t's keys, cohort (with the features' slots), the scheme's ``round_plan``, the
  cohort's client keys and the features' round values (``Feature.begin``).

  The one place these are derived: the round, the coded-stream measurement
  and the benchmark's stages all call it.
  """
  rk = keys.round_keys(run_key, t)
  cohort = sampling.sample_cohort(rk.sampling, plan.num_clients, plan.rate, plan.capacity,
                                  plan.sampler, plan.sampler_share(run_key),
                                  cycle_length=plan.config.privacy.cycle_length, t=t,
                                  schedule=plan.schedule(run_key))
  shared = plan.scheme.round_plan(state.scheme_state, rk.mask, state.weights.shape[0],
                                  plan.num_kept)
  for f, fstate, slots in zip(plan.features, state.features, plan.feature_slots):
    cohort = f.cohort(At(fstate, t=t, run_key=run_key, slots=slots), cohort)
  train_keys, noise_keys = keys.client_keys(rk.round, cohort.indices)
  inputs = RoundInputs(rk, cohort, shared, train_keys, noise_keys, run_key)
  return inputs._replace(features=tuple(
      f.begin(At(fstate, t=t, run_key=run_key, inputs=inputs), None)
      for f, fstate in zip(plan.features, state.features)))


def make_train_fn(model: FlatModel, plan: Plan) -> Callable[..., jax.Array]:
  """``train(w, shared, data, indices, train_keys, noise) -> messages``: every
  slot's ``scheme.client_message`` (local training from w, then C(.)), one row
  per slot, the slots vmapped and split over ``plan.mesh``'s devices.
  ``noise``, the round's :class:`Noise`, reaches a scheme that declares
  ``traits.run_constants`` (``Plan.scheme_keywords``)."""
  scheme, local = plan.scheme, plan.local

  def train(w, shared, data, indices, train_keys, noise: Noise):
    keywords = plan.scheme_keywords(noise)

    def train_slots(shared, data, indices, train_keys):
      w, round_plan = shared
      return jax.vmap(lambda xk, yk, kk: scheme.client_message(
          model, w, round_plan, xk, yk, kk, local, **keywords))(
              as_float(data.x[indices]), data.y[indices], train_keys)

    return sharding.shard_clients(train_slots, plan.mesh)((w, shared), data, indices,
                                                          train_keys)
  return train


def make_privatize_fn(plan: Plan) -> Callable[..., tuple[jax.Array, jax.Array]]:
  """``privatize(messages, slot_mask, noise_keys, noise)``: the scheme's
  ``privatize`` with the round's :class:`~fedjax_dp.features.Noise`, the
  slots sharded over ``plan.mesh`` like local training."""
  def privatize(messages, slot_mask, noise_keys, noise: Noise):
    fn = sharding.shard_privatize(
        lambda m, s, k, shares: plan.scheme.privatize(
            m, s, k, noise._replace(num_shares=shares), **plan.scheme_keywords()),
        plan.mesh)
    return fn(messages, slot_mask, noise_keys, noise.num_shares)
  return privatize


def make_trainer(plan: Plan, model: FlatModel, w: jax.Array, data: ClientData,
                 inputs: RoundInputs, noise: Noise) -> Trainer:
  """Local training as this round runs it, for the features' ``train`` hook."""
  keywords = plan.scheme_keywords(noise)

  def message(any_model, x, y, key, local):
    return plan.scheme.client_message(any_model, w, inputs.shared, x, y, key, local,
                                      **keywords)
  return Trainer(model, w, data, plan.local, message)


class Aggregate(NamedTuple):
  """The round's sum, its counts, and what the features observe."""

  total: jax.Array
  num_clipped: jax.Array
  num_present: jax.Array
  overflow: jax.Array
  present: jax.Array
  noise: Noise
  tallies: tuple


def round_noise(plan: Plan, inputs: RoundInputs, fstates) -> Noise:
  """The round's :class:`Noise`: the plan's S and sigma over the cohort's
  shares, as the features' ``noise`` change them (at least one share)."""
  noise = Noise(_CLIP_UNUSED if plan.clip_norm is None else plan.clip_norm,
                plan.noise_multiplier, jnp.sum(inputs.cohort.mask))
  for f, fstate, value in zip(plan.features, fstates, inputs.features):
    noise = f.noise(At(fstate, value, inputs=inputs), noise)
  return noise._replace(num_shares=jnp.maximum(noise.num_shares, 1))


def client_noise(plan: Plan, noise: Noise) -> Noise:
  """What the clients' ``privatize`` gets: the round's :class:`Noise`, or
  sigma 0 where the round draws the shares' sum once (``Plan.noise_once``)."""
  return noise._replace(noise_multiplier=0.0) if plan.noise_once else noise


def add_aggregate_noise(plan: Plan, inputs: RoundInputs, noise: Noise, total: jax.Array,
                        num_present: jax.Array) -> jax.Array:
  """``total`` plus the present clients' shares drawn as one sum
  (``privacy.noise.aggregate_noise``) where ``Plan.noise_once``; else ``total``."""
  if not plan.noise_once:
    return total
  return total + noise_lib.aggregate_noise(inputs.keys.aggregate_noise, total.shape,
                                           noise.clip_norm, noise.noise_multiplier,
                                           noise.num_shares, num_present)


def _present_and_noise(plan: Plan, inputs: RoundInputs, fstates) -> tuple[jax.Array, Noise]:
  """The sampled slots whose client did not fail (the features' ``failures``),
  and the round's :class:`Noise` (:func:`round_noise`)."""
  fails = jnp.zeros((plan.slots,), bool)
  for f, fstate, value in zip(plan.features, fstates, inputs.features):
    fails = f.failures(At(fstate, value, inputs=inputs), fails)
  return inputs.cohort.mask & ~fails, round_noise(plan, inputs, fstates)


def make_aggregate_fn(model: FlatModel, plan: Plan):
  """The round's one aggregation path, chunk by chunk of the cohort.

  Local training, the features' messages, ``scheme.privatize`` (clip and
  noise shares, or the scheme's own contributions), the features'
  contributions, client failures, the round's sum, :func:`add_aggregate_noise`,
  then a DP scheme's ``server_noise`` if no share arrived.

  Returns:
    ``aggregate(w, inputs, data, feature_states) -> Aggregate``.
  """
  scheme, features, summer = plan.scheme, plan.features, plan.sum
  train, privatize = make_train_fn(model, plan), make_privatize_fn(plan)
  capacity = plan.slots
  chunk = capacity if not summer.streams else min(plan.client_chunk or capacity, capacity)
  padded = -(-capacity // chunk) * chunk

  pad = functools.partial(_pad_slots, length=padded)

  def aggregate(w, inputs: RoundInputs, data, fstates) -> Aggregate:
    slot_mask = inputs.cohort.mask
    present, noise = _present_and_noise(plan, inputs, fstates)
    trainer = make_trainer(plan, model, w, data, inputs, noise)
    # Each feature's view of the round once its train hook has run.
    at = [At(fstate, f.train(At(fstate, v, inputs=inputs, noise=noise, trainer=trainer), v),
             inputs=inputs, noise=noise)
          for f, fstate, v in zip(features, fstates, inputs.features)]
    ids, smask, pres, tkeys, nkeys = map(pad, (inputs.cohort.indices, slot_mask, present,
                                               inputs.train_keys, inputs.noise_keys))

    def contributions(c):
      take = lambda a: jax.lax.dynamic_slice_in_dim(pad(a), c * chunk, chunk)
      part = Chunk(take(ids), take(smask), take(pres), take)
      # Slots of feature clients (ids >= N) train on client 0's data; a feature
      # replaces their message.
      messages = train(w, inputs.shared, data, jnp.minimum(part.ids, plan.num_clients - 1),
                       take(tkeys), noise)
      for f, fat in zip(features, at):
        messages = f.messages(fat._replace(chunk=part), messages)
      contribs, clipped = privatize(messages, part.mask, take(nkeys), client_noise(plan, noise))
      sent = [fat._replace(chunk=part, messages=messages) for fat in at]
      for f, fat in zip(features, sent):
        contribs, clipped = f.contributions(fat, (contribs, clipped))
      tallies = tuple(f.tally(fat, None) for f, fat in zip(features, sent))
      return contribs, jnp.asarray(clipped, jnp.int32), part, tallies

    def sum_shapes(c):  # what the chunks add: contributions and the features' tallies
      contribs, _, _, tallies = contributions(c)
      return contribs, tallies

    shape, tally_shapes = jax.eval_shape(sum_shapes, 0)
    init = (summer.init(shape.shape[1:], shape.dtype), jnp.int32(0),
            jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), tally_shapes))

    def add_chunk(carry, c):
      acc, clipped, tallies = carry
      contribs, nclip, part, tally = contributions(c)
      acc = summer.add(acc, contribs, part, sums.Slots(
          c * chunk + jnp.arange(chunk), smask, pres, ids, inputs.keys.secure_agg))
      return acc, clipped + nclip, jax.tree.map(jnp.add, tallies, tally)

    if summer.streams:
      acc, num_clipped, tallies = _over_chunks(add_chunk, init, smask, chunk)
    else:  # a robust rule: every update at once
      acc, num_clipped, tallies = add_chunk(init, 0)
    num_present = jnp.sum(present)
    total, overflow = summer.finish(acc)
    total = add_aggregate_noise(plan, inputs, noise, total, num_present)
    if scheme.traits.dp:  # no share arrived: the server adds the noise (thesis 5.2.5)
      total = jax.lax.cond(
          num_present == 0,
          lambda t: t + scheme.server_noise(inputs.keys.server_noise, t.shape, noise,
                                            **plan.scheme_keywords()).astype(jnp.float32),
          lambda t: t, total)
    for f, fat in zip(features, at):
      total = f.total(fat, total)
    return Aggregate(total, num_clipped, num_present, overflow, present, noise, tallies)

  return aggregate


def _pad_slots(a: jax.Array, length: int) -> jax.Array:
  """A per-slot array to the chunks' whole ``length`` (padding slots: zeros)."""
  missing = length - a.shape[0]
  return jnp.concatenate([a, jnp.zeros((missing,) + a.shape[1:], a.dtype)]) if missing else a


def _over_chunks(add_chunk: Callable, init, slot_mask: jax.Array, chunk: int):
  """``add_chunk(carry, c)`` over the chunks of ``chunk`` slots, from ``init``.

  A chunk of padding slots only (the cohort's slots come first) adds
  nothing, so it is skipped: not trained (``lax.cond`` runs one branch).
  """
  def body(carry, c):
    sampled = jnp.any(jax.lax.dynamic_slice_in_dim(slot_mask, c * chunk, chunk))
    return jax.lax.cond(sampled, add_chunk, lambda carry, c: carry, carry, c), None
  return jax.lax.scan(body, init, jnp.arange(slot_mask.shape[0] // chunk))[0]


def make_round_fn(model: FlatModel, plan: Plan
                  ) -> Callable[[ServerState, ClientData, jax.Array, jax.Array],
                                tuple[ServerState, RoundInfo]]:
  """Builds the pure round function of a scheme.

  Returns:
    ``round_fn(state, data, run_key, t) -> (state, info)``, jittable; ``t``
    is the 1-based round index and selects the round's keys.

  On CPU this switches JAX to the unrolled threefry lowering for everything
  compiled afterwards (``fedjax_dp.fast_prng``: the same random bits, faster).
  """
  fast_prng.use_unrolled_threefry()
  scheme, features = plan.scheme, plan.features
  aggregate = make_aggregate_fn(model, plan)

  def round_fn(state: ServerState, data: ClientData, run_key: jax.Array,
               t: jax.Array) -> tuple[ServerState, RoundInfo]:
    inputs = round_inputs(plan, state, run_key, t)
    agg = aggregate(state.weights, inputs, data, state.features)
    if scheme.traits.dp:
      # A fixed denominator: the released model depends on the noisy sum
      # alone, not on the (private) realised cohort size.
      mean = agg.total / plan.clients_per_round
    else:
      mean = agg.total / jnp.maximum(agg.num_present, 1)  # equal |D_k|: FedAvg
    new_w, new_scheme_state = scheme.server_update(state.weights, state.scheme_state, mean,
                                                   inputs.shared)
    at = [At(fstate, value, t=t, run_key=run_key, inputs=inputs, noise=agg.noise,
             observed=Observed(agg.total, tally, inputs.cohort.mask, agg.present, agg.noise,
                               inputs.keys.round))
          for fstate, value, tally in zip(state.features, inputs.features, agg.tallies)]
    fstates = tuple(f.observe(fat, fat.state) for f, fat in zip(features, at))
    cohort = slice(0, plan.capacity)  # the sampled clients' slots, before the features'
    silent = jnp.sum(inputs.cohort.mask[cohort] & ~agg.present[cohort], dtype=jnp.int32)
    info = RoundInfo(inputs.cohort.num_sampled, agg.num_clipped, agg.overflow,
                     tuple(f.info(fat, {}) for f, fat in zip(features, at)), silent)
    return ServerState(new_w, new_scheme_state, fstates), info

  return round_fn


def make_rounds_fn(model: FlatModel, plan: Plan, num_rounds: int,
                   on_round: Callable[[int], None] | None = None):
  """Compiles ``num_rounds`` consecutive rounds into one ``lax.scan``.

  Args:
    model: The model.
    plan: The run's plan.
    num_rounds: Rounds a call runs.
    on_round: Called with each round's number once the round's new weights
      are computed, from inside the compiled rounds (``jax.debug.callback``,
      on a runtime thread: it must return quickly and not raise). It changes
      no number; None puts nothing in the compiled function. With a mesh it
      runs once a round (on the mesh's first device: in a multi-process run
      on process 0 alone; give it on every process alike).

  Returns:
    jitted ``fn(state, data, run_key, first_round) -> (state, infos)`` where
    ``infos`` stacks each round's :class:`RoundInfo`. The state is donated.
    With ``plan.mesh`` the outputs are replicated over it; pass the first
    call's state, data and key through ``fedjax_dp.sharding.replicate`` so
    that every call has the same argument placement (one compilation).
  """
  round_fn = make_round_fn(model, plan)
  if on_round is not None:
    round_fn = _reporting(round_fn, on_round)

  def rounds(state, data, run_key, first_round):
    ts = first_round + jnp.arange(num_rounds, dtype=jnp.int32)
    return jax.lax.scan(lambda s, t: round_fn(s, data, run_key, t), state, ts)

  if sharding.mesh_size(plan.mesh) > 1:
    return jax.jit(rounds, donate_argnums=(0,), out_shardings=sharding.replicated(plan.mesh))
  return jax.jit(rounds, donate_argnums=(0,))


def _reporting(round_fn: Callable, on_round: Callable[[int], None]) -> Callable:
  """``round_fn`` that calls ``on_round(t)`` once round t's weights are computed."""

  def report(t, weight):
    del weight
    on_round(int(t))

  def reporting_round(state, data, run_key, t):
    state, info = round_fn(state, data, run_key, t)
    # One new weight as an operand makes the call wait for the round's update
    # (with t alone XLA may run it at the round's start).
    jax.debug.callback(report, t, jnp.ravel(state.weights)[0])
    return state, info
  return reporting_round
