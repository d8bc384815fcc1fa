"""The jitted federated round and the run loop.

One round (UAI 2021, Algorithms 1-6): sample a cohort, train every sampled
client in parallel (``vmap`` over the client axis), compress each update to
the round's coordinate subset, clip and noise it for DP schemes, sum the
cohort (the secure-aggregation sum), and update the server model.

The round is a pure function of (server state, client data, run key, round
index); ``make_rounds_fn`` compiles a ``lax.scan`` over several rounds so a
run only returns to Python at evaluation points, and later rounds reuse the
compiled program.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import pathlib
import time
import warnings
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp import (aggregators, attacks, bandwidth, canaries, client, distributed, fast_prng,
                       keys, metrics, sampling, sharding)
from fedjax_dp import checkpoint as checkpoint_lib
from fedjax_dp.compression import universal_coding
from fedjax_dp.data import ClientData, as_float
from fedjax_dp.models import FlatModel
from fedjax_dp.privacy import accounting, noise, secure_aggregation
from fedjax_dp.schemes.base import LocalTraining, Scheme, SetupData, Traits


class ServerState(NamedTuple):
  """What the server carries between rounds.

  Attributes:
    weights: (n,) the global model.
    scheme_state: The scheme's own state (a pytree), e.g. FL-TOP's Top-K
      indices, from ``scheme.setup``.
    audit: The canaries and their statistics (``fedjax_dp.canaries``);
      None without an audit.
  """

  weights: jax.Array
  scheme_state: Any
  audit: canaries.AuditState | None = None


class RoundInfo(NamedTuple):
  """Per-round diagnostics (no private data: counts only).

  Attributes:
    num_sampled: Clients the sampler selected.
    num_clipped: Real clients whose message was longer than S.
    num_dropped: Sampled clients that failed before sending (thesis 5.2.5).
    secure_overflow: Coordinates whose secure sum overflowed the modulus.
    num_malicious: Malicious clients among those who sent (fedjax_dp.attacks).
  """

  num_sampled: jax.Array
  num_clipped: jax.Array
  num_dropped: jax.Array | int = 0
  secure_overflow: jax.Array | int = 0
  num_malicious: jax.Array | int = 0


@dataclasses.dataclass(frozen=True)
class RoundConfig:
  """Static configuration of the round function.

  Attributes:
    scheme: The scheme.
    num_clients: N.
    clients_per_round: Expected cohort size C*N (the fixed size for the
      "fixed" sampler); also the DP aggregate's denominator.
    capacity: Cohort slots (see ``fedjax_dp.sampling``).
    canary_slots: Slots after those for the audit's canary clients
      (``fedjax_dp.canaries``); 0 without an audit.
    sampler: "poisson" or "fixed".
    num_kept: K, values per compressed update.
    local_steps: T_gd.
    batch_size: |B|.
    lr: Client learning rate eta.
    local_optimizer: The clients' optimiser (``client.OPTIMIZERS``).
    noise_multiplier: sigma (DP schemes).
    clip_norm: S (DP schemes).
    secure_bits: b: sum the contributions under simulated secure
      aggregation modulo 2^b (``fedjax_dp.privacy.secure_aggregation``);
      None: a plain sum.
    secure_scale: Fixed-point scale 2^f of real contributions (1 for
      integer messages).
    secure_neighbours: d, ring neighbours each client shares a mask with.
    max_dropouts: l: DP noise shares are sized for |K| - l clients, so the
      aggregate noise is at least S*sigma while at most l clients fail
      (thesis 5.2.5 / 5.3.3).
    dropout_rate: Each sampled client fails (sends nothing) with this
      probability, after the cohort and the masks are fixed.
    client_chunk: Train and aggregate the cohort this many slots at a time
      (bounds memory for large cohorts, e.g. signSGD's all clients); a chunk
      of padding slots only is skipped; None: all slots at once.
    mesh: Shard the slots' local training over this 1-D device mesh
      (``fedjax_dp.sharding.client_mesh``); None: one device.
    aggregator: A robust rule over the individual updates
      (``fedjax_dp.aggregators``); None: their plain (streamed) sum.
    attack: Malicious clients (``fedjax_dp.attacks``); None: none.
  """

  scheme: Scheme
  num_clients: int
  clients_per_round: int
  capacity: int
  sampler: str
  num_kept: int
  local_steps: int
  batch_size: int
  lr: float
  local_optimizer: str = "sgd"
  noise_multiplier: float = 0.0
  clip_norm: float = 1.0
  secure_bits: int | None = None
  secure_scale: float = 1.0
  secure_neighbours: int = 1
  max_dropouts: int = 0
  dropout_rate: float = 0.0
  client_chunk: int | None = None
  mesh: jax.sharding.Mesh | None = None

  @property
  def rate(self) -> float:
    """q = C, the sampling rate."""
    return self.clients_per_round / self.num_clients

  @property
  def local(self) -> LocalTraining:
    """The client-side hyper-parameters."""
    return LocalTraining(self.local_steps, self.batch_size, self.lr, self.local_optimizer)
  aggregator: aggregators.AggregatorConfig | None = None
  attack: attacks.AttackConfig | None = None
  canary_slots: int = 0

  @property
  def slots(self) -> int:
    """Every slot of the round: the cohort's, then the canaries'."""
    return self.capacity + self.canary_slots


class RoundInputs(NamedTuple):
  """What a round derives from (state, run key, t): keys, cohort, plan."""

  keys: keys.RoundKeys
  cohort: sampling.Cohort
  plan: Any
  train_keys: jax.Array
  noise_keys: jax.Array
  roles: jax.Array | None = None  # (capacity,) bool: malicious slots (attacks only)
  attackers: jax.Array | None = None  # (round(alpha N),) the malicious clients' ids
  audit: canaries.AuditState | None = None  # the canaries (audits only)


def round_inputs(cfg: RoundConfig, state: ServerState, run_key: jax.Array,
                 t: jax.Array) -> RoundInputs:
  """Round t's keys, cohort, the scheme's plan and the cohort's client keys.

  The one place these are derived: the round, the coded-stream measurement
  and the benchmark's stages all call it.
  """
  rk = keys.round_keys(run_key, t)
  cohort = sampling.sample_cohort(rk.sampling, cfg.num_clients, cfg.rate, cfg.capacity,
                                  cfg.sampler, _cohort_share(cfg.attack, cfg.num_clients,
                                                             run_key))
  plan = cfg.scheme.round_plan(state.scheme_state, rk.mask, state.weights.shape[0],
                               cfg.num_kept)
  if cfg.canary_slots:  # canary j is client N + j, in the slots after the cohort's
    which, joined = canaries.canary_cohort(canaries.round_key(run_key, t),
                                           state.audit.inserted, cfg.rate, cfg.canary_slots)
    cohort = cohort._replace(indices=jnp.concatenate([cohort.indices, cfg.num_clients + which]),
                             mask=jnp.concatenate([cohort.mask, joined]))
  train_keys, noise_keys = keys.client_keys(rk.round, cohort.indices)
  if cfg.attack is None:
    return RoundInputs(rk, cohort, plan, train_keys, noise_keys, audit=state.audit)
  malicious = attacks.malicious_set(keys.purpose(run_key, keys.MALICIOUS), cfg.num_clients,
                                    cfg.attack.fraction)
  count = attacks.num_malicious(cfg.num_clients, cfg.attack.fraction)
  attackers = jnp.nonzero(malicious, size=count)[0]
  return RoundInputs(rk, cohort, plan, train_keys, noise_keys,
                     malicious[cohort.indices] & cohort.mask, attackers)


def _cohort_share(attack: attacks.AttackConfig | None, num_clients: int,
                  run_key: jax.Array) -> sampling.Malicious | None:
  """The malicious pool as the sampler sees it (the run key's
  ``keys.MALICIOUS`` draw, as for the poisoned data)."""
  return attacks.cohort_share(keys.purpose(run_key, keys.MALICIOUS), num_clients, attack)


def make_train_fn(model: FlatModel, cfg: RoundConfig
                  ) -> Callable[..., jax.Array]:
  """The cohort's local training and compression, sharded over ``cfg.mesh``.

  Returns:
    ``train(w, plan, data, indices, train_keys) -> messages``: every slot's
    ``scheme.client_message`` (local SGD from w, then C(.)), one row per slot,
    the slots vmapped and split over the mesh's devices.
  """
  scheme = cfg.scheme

  def train_slots(shared, data, indices, train_keys):
    w, plan = shared
    x = as_float(data.x[indices])
    y = data.y[indices]
    return jax.vmap(lambda xk, yk, kk: scheme.client_message(
        model, w, plan, xk, yk, kk, cfg.local))(x, y, train_keys)

  train_sharded = sharding.shard_clients(train_slots, cfg.mesh)

  def train(w, plan, data, indices, train_keys):
    return train_sharded((w, plan), data, indices, train_keys)

  return train


def make_privatize_fn(cfg: RoundConfig) -> Callable[..., tuple[jax.Array, jax.Array]]:
  """``privatize(messages, slot_mask, noise_keys, num_shares)``: the scheme's
  ``privatize`` with the round's S and sigma, the slots sharded over
  ``cfg.mesh`` like local training."""
  scheme = cfg.scheme

  def privatize(messages, slot_mask, noise_keys, num_shares):
    return scheme.privatize(messages, slot_mask, noise_keys, cfg.clip_norm,
                            cfg.noise_multiplier, num_shares)

  return sharding.shard_privatize(privatize, cfg.mesh)


class Aggregate(NamedTuple):
  """The round's sum and its counts."""

  total: jax.Array
  num_clipped: jax.Array
  num_present: jax.Array
  num_dropped: jax.Array
  overflow: jax.Array


def make_aggregate_fn(model: FlatModel, cfg: RoundConfig):
  """The round's one aggregation path, chunk by chunk of the cohort.

  Local training, ``scheme.privatize`` (clip and noise shares, or the
  scheme's own contributions), client failures, then a plain or secure sum;
  when no share arrived, a DP scheme's ``server_noise``.

  Returns:
    ``aggregate(w, inputs, data) -> Aggregate``.
  """
  train = make_train_fn(model, cfg)
  privatize = make_privatize_fn(cfg)
  capacity = cfg.slots
  chunk = min(cfg.client_chunk or capacity, capacity)
  num_chunks = -(-capacity // chunk)
  padded = num_chunks * chunk
  secure = cfg.secure_bits is not None

  def pad(a, fill=0):
    extra = jnp.full((padded - capacity,) + a.shape[1:], fill, a.dtype)
    return jnp.concatenate([a, extra]) if padded > capacity else a

  def aggregate(w, inputs: RoundInputs, data) -> Aggregate:
    slot_mask = inputs.cohort.mask
    fails = _failures(cfg, inputs)
    present = slot_mask & ~fails
    # Thesis 5.2.5: shares sized so that any |K| - l of them carry S*sigma.
    num_shares = jnp.maximum(jnp.sum(slot_mask) - cfg.max_dropouts, 1)
    ids, smask, pres = pad(inputs.cohort.indices), pad(slot_mask, False), pad(present, False)
    tkeys, nkeys = pad(inputs.train_keys), pad(inputs.noise_keys)

    sent_by_attackers, roles = None, None
    if cfg.attack is not None:
      roles = pad(inputs.roles, False)
      sent_by_attackers = attack_messages(model, cfg, w, inputs, data)

    def contributions(c):
      take = lambda a: jax.lax.dynamic_slice_in_dim(a, c * chunk, chunk)
      # Canary slots (ids >= N) train on client 0's data; their message is replaced.
      messages = train(w, inputs.plan, data, jnp.minimum(take(ids), cfg.num_clients - 1),
                       take(tkeys))
      messages = _replaced(cfg, messages, take(ids), None if roles is None else take(roles),
                           sent_by_attackers, inputs.audit)
      contribs, clipped = privatize(messages, take(smask), take(nkeys), num_shares)
      if sent_by_attackers is not None and cfg.attack.skip_noise:
        contribs = _unprivatized(cfg.attack, take(roles), messages, contribs)
      return contribs, _honest_clipped(cfg, clipped, take(ids), take(smask)), take(pres)

    if cfg.aggregator is not None:  # a robust rule: every update at once
      return _robust_aggregate(cfg.aggregator, contributions(0), slot_mask & fails)

    shape = jax.eval_shape(contributions, 0)[0]
    integer = jnp.issubdtype(shape.dtype, jnp.integer)

    def add_chunk(carry, c):
      acc, clipped = carry
      contribs, nclip, pres_c = contributions(c)
      if secure:
        acc = secure_aggregation.secure_accumulate(
            acc, contribs, c * chunk + jnp.arange(chunk), smask, pres, ids,
            inputs.keys.secure_agg, cfg.secure_bits, cfg.secure_scale,
            cfg.secure_neighbours)
      elif integer:
        acc = acc + jnp.sum(jnp.where(pres_c[:, None], contribs, 0), axis=0,
                            dtype=acc.dtype)
      else:
        acc = acc + noise.masked_sum(contribs, pres_c).astype(acc.dtype)
      return acc, clipped + nclip

    init = (secure_aggregation.secure_init(shape.shape[1:]) if secure else
            jnp.zeros(shape.shape[1:], jnp.int32 if integer else shape.dtype))
    acc, num_clipped = _over_chunks(add_chunk, (init, jnp.int32(0)), smask, chunk)
    num_present = jnp.sum(present)
    total, overflow = _finish_sum(cfg, acc, num_present, inputs.keys.server_noise)
    num_dropped = jnp.sum(slot_mask & fails).astype(jnp.int32)
    return Aggregate(total, num_clipped, num_present, num_dropped, overflow)

  return aggregate


def _over_chunks(add_chunk: Callable, init, slot_mask: jax.Array, chunk: int):
  """``add_chunk(carry, c)`` over the chunks of ``chunk`` slots, from ``init``.

  A chunk of padding slots only (the cohort's slots come first) adds
  nothing, so it is skipped: not trained (``lax.cond`` runs one branch).
  """
  def body(carry, c):
    sampled = jnp.any(jax.lax.dynamic_slice_in_dim(slot_mask, c * chunk, chunk))
    return jax.lax.cond(sampled, add_chunk, lambda carry, c: carry, carry, c), None
  return jax.lax.scan(body, init, jnp.arange(slot_mask.shape[0] // chunk))[0]


def _honest_clipped(cfg: RoundConfig, clipped: jax.Array, ids: jax.Array,
                    slot_mask: jax.Array) -> jax.Array:
  """Clipped real clients: canaries (ids >= N), always clipped, not counted."""
  if cfg.canary_slots and not cfg.scheme.traits.fixed_sensitivity:
    clipped = clipped - jnp.sum(slot_mask & (ids >= cfg.num_clients))
  return jnp.asarray(clipped, jnp.int32)


def _replaced(cfg: RoundConfig, messages: jax.Array, ids: jax.Array, roles: jax.Array | None,
              sent_by_attackers: Callable[[jax.Array], jax.Array] | None,
              audit: canaries.AuditState | None) -> jax.Array:
  """The slots' messages once a malicious slot sends the attack's message
  and a canary slot (id N + j) canary j's (``fedjax_dp.canaries``)."""
  if sent_by_attackers is not None:
    messages = jnp.where(roles[:, None], sent_by_attackers(ids).astype(messages.dtype),
                         messages)
  if cfg.canary_slots:
    is_canary = ids >= cfg.num_clients
    sent = canaries.messages(audit, jnp.where(is_canary, ids - cfg.num_clients, 0),
                             cfg.clip_norm, cfg.scheme.traits.fixed_sensitivity is not None,
                             messages.dtype)
    messages = jnp.where(is_canary[:, None], sent, messages)
  return messages


def _unprivatized(attack: attacks.AttackConfig, roles: jax.Array, messages: jax.Array,
                  contribs: jax.Array) -> jax.Array:
  """Contributions where attackers who skip their noise send eta_adv times
  their message, unclipped (thesis l.1789-1795), instead of privatize's."""
  raw = (float(attack.boost) * messages.astype(jnp.float32)).astype(contribs.dtype)
  return jnp.where(roles[:, None], raw, contribs)


def _robust_aggregate(aggregator: aggregators.AggregatorConfig, chunk: tuple,
                      dropped: jax.Array) -> Aggregate:
  """The round's Aggregate under a robust rule, from the one chunk of all slots:
  the rule's estimate times the present count stands for the sum."""
  contribs, num_clipped, present = chunk
  num_present = jnp.sum(present)
  total = aggregators.aggregate(aggregator, contribs, present) * num_present
  return Aggregate(total, num_clipped, num_present, jnp.sum(dropped).astype(jnp.int32),
                   jnp.int32(0))


def attack_messages(model: FlatModel, cfg: RoundConfig, w: jax.Array, inputs: RoundInputs,
                     data: ClientData) -> Callable[[jax.Array], jax.Array] | None:
  """``messages(client_ids)``: what malicious clients at these slots send
  (None when there is no attacker).

  The scheme's own ``client_message`` with the attack's local update
  (``attacks.adversarial_model``). Colluding attackers (every attack but
  random-update) train once on their pooled data and all send that message
  (thesis l.1655); a random-update attacker draws its own.
  """
  attack, scheme = cfg.attack, cfg.scheme
  if inputs.attackers.shape[0] == 0:  # alpha N rounds to no attacker
    return None
  # Skipping the noise, attackers boost the message itself (after encoding).
  boost = 1.0 if attack.skip_noise else attack.boost
  adversary = attacks.adversarial_model(model, attack, boost)
  if attack.colluding:
    pooled_x = data.x[inputs.attackers].reshape((-1,) + data.x.shape[2:])
    pooled_y = data.y[inputs.attackers].reshape(-1)
    if data.attacker_x is not None:  # an out-backdoor's source class (l.1720)
      pooled_x = jnp.concatenate([pooled_x, data.attacker_x])
      pooled_y = jnp.concatenate([pooled_y, data.attacker_y])
    # Real examples first: local training draws its batches below their count.
    real_first = jnp.argsort(pooled_y < 0, stable=True)
    pooled_x, pooled_y = pooled_x[real_first], pooled_y[real_first]
    local = cfg.local
    if attack.pool_training == "epochs":
      local = local._replace(steps=attacks.pooled_steps(local.steps, pooled_x.shape[0],
                                                        data.x.shape[1]))
    shared = scheme.client_message(adversary, w, inputs.plan, as_float(pooled_x), pooled_y,
                                   keys.purpose(inputs.keys.round, keys.ATTACK), local)
    return lambda ids: jnp.broadcast_to(shared, (ids.shape[0],) + shared.shape)

  def own(ids):
    draw_keys = keys.attacker_keys(inputs.keys.round, ids)
    return jax.vmap(lambda xk, yk, kk: scheme.client_message(
        adversary, w, inputs.plan, xk, yk, kk, cfg.local))(
            as_float(data.x[ids]), data.y[ids], draw_keys)

  return own


def _failures(cfg: RoundConfig, inputs: RoundInputs) -> jax.Array:
  """(slots,) bool: the slots whose client (or canary) fails after the cohort
  is fixed."""
  if cfg.dropout_rate > 0:
    return jax.random.bernoulli(inputs.keys.dropout, cfg.dropout_rate, (cfg.slots,))
  return jnp.zeros((cfg.slots,), bool)


def _finish_sum(cfg: RoundConfig, acc, num_present: jax.Array,
                noise_key: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(float32 total, overflow count) from the accumulated sum.

  A secure sum is decoded from its modular fixed point; with DP, when no
  share arrived the server adds the full noise itself (thesis 5.2.5).
  """
  if cfg.secure_bits is not None:
    result = secure_aggregation.secure_finalize(acc, cfg.secure_bits, cfg.secure_scale)
    total, overflow = result.total, result.overflow
  else:
    total, overflow = acc.astype(jnp.float32), jnp.int32(0)
  if cfg.scheme.traits.dp:
    total = jax.lax.cond(
        num_present == 0,
        lambda t: t + cfg.scheme.server_noise(noise_key, t.shape, cfg.clip_norm,
                                              cfg.noise_multiplier).astype(jnp.float32),
        lambda t: t, total)
  return total, overflow


def make_round_fn(model: FlatModel, cfg: RoundConfig
                  ) -> Callable[[ServerState, ClientData, jax.Array, jax.Array],
                                tuple[ServerState, RoundInfo]]:
  """Builds the pure round function of a scheme.

  Args:
    model: The model (its ``loss`` drives local SGD).
    cfg: Static round configuration.

  Returns:
    ``round_fn(state, data, run_key, t) -> (state, info)``, jittable; ``t``
    is the 1-based round index and selects the round's keys.

  On CPU this switches JAX to the unrolled threefry lowering for everything
  compiled afterwards (``fedjax_dp.fast_prng``: the same random bits, the
  DP noise about 2.4x faster).
  """
  fast_prng.use_unrolled_threefry()
  scheme = cfg.scheme
  aggregate = make_aggregate_fn(model, cfg)

  def round_fn(state: ServerState, data: ClientData, run_key: jax.Array,
               t: jax.Array) -> tuple[ServerState, RoundInfo]:
    inputs = round_inputs(cfg, state, run_key, t)
    agg = aggregate(state.weights, inputs, data)
    if scheme.traits.dp:
      # A fixed denominator: the released model depends on the noisy sum
      # alone, not on the (private) realised cohort size.
      mean = agg.total / cfg.clients_per_round
    else:
      mean = agg.total / jnp.maximum(agg.num_present, 1)  # equal |D_k|: FedAvg
    new_w, new_scheme_state = scheme.server_update(state.weights, state.scheme_state, mean,
                                                   inputs.plan)
    audit = None if state.audit is None else canaries.observe(state.audit, agg.total)
    return (ServerState(new_w, new_scheme_state, audit),
            RoundInfo(inputs.cohort.num_sampled, jnp.asarray(agg.num_clipped, jnp.int32),
                      agg.num_dropped, agg.overflow,
                      0 if inputs.roles is None else jnp.sum(inputs.roles, dtype=jnp.int32)))

  return round_fn


def make_rounds_fn(model: FlatModel, cfg: RoundConfig, num_rounds: int):
  """Compiles ``num_rounds`` consecutive rounds into one ``lax.scan``.

  Returns:
    jitted ``fn(state, data, run_key, first_round) -> (state, infos)`` where
    ``infos`` stacks each round's :class:`RoundInfo`. The state is donated.
    With ``cfg.mesh`` the outputs are replicated over it; pass the first
    call's state, data and key through ``fedjax_dp.sharding.replicate`` so
    that every call has the same argument placement (one compilation).
  """
  round_fn = make_round_fn(model, cfg)

  def rounds(state, data, run_key, first_round):
    def body(s, t):
      return round_fn(s, data, run_key, t)
    ts = first_round + jnp.arange(num_rounds, dtype=jnp.int32)
    return jax.lax.scan(body, state, ts)

  if sharding.mesh_size(cfg.mesh) > 1:
    return jax.jit(rounds, donate_argnums=(0,), out_shardings=sharding.replicated(cfg.mesh))
  return jax.jit(rounds, donate_argnums=(0,))


def make_stream_fn(model: FlatModel, cfg: RoundConfig, num_measured: int):
  """Jitted ``fn(state, data, run_key, t) -> (streams, real)``.

  The integer streams (``scheme.client_stream``) that the first
  ``num_measured`` cohort slots of round t transmit, derived with the
  round's own cohort, plan and client keys (:func:`round_inputs`), so they
  are bit for bit what those clients send in round t; ``real`` marks real
  (not padding) slots. Their coded size is measured outside ``jit``
  (CDP-LQ: bzip2). With ``cfg.mesh`` both are replicated over it, so that
  every process can read them.
  """
  scheme = cfg.scheme
  num = min(num_measured, cfg.capacity)

  def streams(state, data, run_key, t):
    inputs = round_inputs(cfg, state, run_key, t)
    ids = inputs.cohort.indices[:num]
    out = jax.vmap(lambda xk, yk, kk: scheme.client_stream(
        model, state.weights, inputs.plan, xk, yk, kk, cfg.local))(
            as_float(data.x[ids]), data.y[ids], inputs.train_keys[:num])
    return out, inputs.cohort.mask[:num]

  if sharding.mesh_size(cfg.mesh) > 1:
    return jax.jit(streams, out_shardings=sharding.replicated(cfg.mesh))
  return jax.jit(streams)


def make_eval_fn(model: FlatModel, batch_size: int = 250,
                 mesh: jax.sharding.Mesh | None = None):
  """Jitted ``fn(w, x) -> (predictions, scores)`` over a test set in batches.

  With a ``mesh`` (``fedjax_dp.sharding.client_mesh``) the batches are split
  over its devices and the outputs replicated over them (every process of a
  multi-process run reads them). Batches of 250 images evaluate the paper
  CNN 15% faster than 500 on this project's 2-core CPU, at 57-86% of the
  float32 matmul rate measured beside it (``benchmarks/throughput.py``;
  docs/performance.md).
  """
  devices = sharding.mesh_size(mesh)

  def predict_batches(w, xb):
    return jax.lax.map(lambda b: model.predict(w, as_float(b)), xb)

  if devices > 1:
    spec = jax.sharding.PartitionSpec(sharding.AXIS)
    predict_batches = jax.shard_map(predict_batches, mesh=mesh,
                                    in_specs=(jax.sharding.PartitionSpec(), spec),
                                    out_specs=spec, check_vma=False)

  def evaluate(w, x):
    num = x.shape[0]
    pad = (-num) % (batch_size * devices)
    xb = jnp.pad(x, ((0, pad),) + ((0, 0),) * (x.ndim - 1))
    xb = xb.reshape((-1, batch_size) + x.shape[1:])
    preds, scores = predict_batches(w, xb)
    return (preds.reshape((-1,) + preds.shape[2:])[:num],
            scores.reshape((-1,) + scores.shape[2:])[:num])
  if devices > 1:
    return jax.jit(evaluate, out_shardings=sharding.replicated(mesh))
  return jax.jit(evaluate)


# Metrics that can pick a run's best round: accuracy (UAI Table 1) or, for
# a binary task, balanced accuracy (thesis Sec. 8.4.2-8.4.3).
SELECTION_METRICS = ("accuracy", "balanced_accuracy")


def evaluation_metrics(model: FlatModel, labels: np.ndarray, predictions: np.ndarray,
                       scores: np.ndarray) -> dict:
  """Accuracy; for a binary model also balanced accuracy and AUROC.

  Thesis Sec. 8.4.2: balanced accuracy (TPR + TNR) / 2 at the model's
  threshold (logit 0), AUROC of the logits.
  """
  result = {"accuracy": metrics.accuracy(labels, predictions)}
  if model.loss_name == "sigmoid_ce":
    result["balanced_accuracy"] = metrics.balanced_accuracy(labels, predictions)
    result["auroc"] = metrics.auroc(labels, scores)
  return result


@dataclasses.dataclass(frozen=True)
class RunConfig:
  """A run's hyper-parameters; defaults are the UAI 2021 Fashion-MNIST setting.

  UAI 2021 Table 5 / thesis Table 8.8: C = 1/60 of N = 6000 clients,
  T_cl = 200 rounds, T_gd = 5 local steps of |B| = 10, eta = 0.215,
  delta = 1e-5, sigma = 1.54, T_init = 5.
  """

  ratio: float = 0.005
  rounds: int = 200
  clients_per_round: int = 100
  local_steps: int = 5
  batch_size: int = 10
  lr: float = 0.215
  # The clients' optimiser (client.OPTIMIZERS): sgd (UAI), adam (thesis Table 8.1).
  local_optimizer: str = "sgd"
  noise_multiplier: float = 1.54
  clip_norm: float | None = None  # None: calibrate on public data
  # Calibrate S as a run at this ratio would (None: the run's own ratio):
  # one S for every ratio, as Fed-SMP Sec. 6.2 tunes it.
  clip_ratio: float | None = None
  delta: float = 1e-5
  accountant: str = "moments"
  sampler: str = "poisson"
  init_steps: int = 5
  seed: int = 0
  eval_every: int = 1
  max_cohort: int | None = None  # truncated Poisson sampling (PLD accounting)
  # Secure aggregation (UAI 3.2.2, thesis 5.2.1/5.2.4) and failures (5.2.5).
  secure_aggregation: bool = False
  secure_bits: int | None = None  # None: thesis 5.2.4 formula
  secure_frac_bits: int = 16  # fixed-point scale 2^f of real contributions
  secure_neighbours: int = 1
  max_dropouts: int = 0
  dropout_rate: float = 0.0
  client_chunk: int | None = None  # None: default_chunk (on a CPU, 4 slots a device)
  devices: int | None = None  # shard the cohort over this many devices; None: all
  selection_metric: str = "accuracy"  # picks the best round (SELECTION_METRICS)
  # A robust rule over the individual updates (thesis Sec. 3.3.2); None: the mean.
  aggregator: aggregators.AggregatorConfig | None = None
  attack: attacks.AttackConfig | None = None  # malicious clients (thesis Ch. 6)
  audit: canaries.AuditConfig | None = None  # canary clients (empirical privacy)

  def validate(self, num_clients: int) -> None:
    """Raises ValueError with a one-line message naming the parameter.

    The command line turns the name into its flag (``flags.as_flags``).
    """
    checks = [
        (0.0 < self.ratio <= 1.0, f"ratio must be in (0, 1], got {self.ratio}"),
        (self.rounds >= 1, f"rounds must be >= 1, got {self.rounds}"),
        (self.clients_per_round >= 1,
         f"clients_per_round must be >= 1, got {self.clients_per_round}"),
        (self.clients_per_round <= num_clients,
         f"clients_per_round {self.clients_per_round} exceeds the number of "
         f"clients {num_clients}"),
        (self.local_steps >= 1, f"local_steps must be >= 1, got {self.local_steps}"),
        (self.batch_size >= 1, f"batch_size must be >= 1, got {self.batch_size}"),
        (self.lr > 0, f"lr must be > 0, got {self.lr}"),
        (self.local_optimizer in client.OPTIMIZERS,
         f"unknown local_optimizer {self.local_optimizer!r}; choose one of "
         f"{', '.join(client.OPTIMIZERS)}"),
        (self.noise_multiplier >= 0,
         f"noise_multiplier must be >= 0, got {self.noise_multiplier}"),
        (self.clip_norm is None or self.clip_norm > 0,
         f"clip_norm must be > 0, got {self.clip_norm}"),
        (self.clip_ratio is None or 0.0 < self.clip_ratio <= 1.0,
         f"clip_ratio must be in (0, 1], got {self.clip_ratio}"),
        (self.clip_ratio is None or self.clip_norm is None,
         "clip_ratio applies to a calibrated S; clip_norm is given"),
        (0.0 < self.delta < 1.0, f"delta must be in (0, 1), got {self.delta}"),
        (self.accountant in accounting.ACCOUNTANTS,
         f"unknown accountant {self.accountant!r}; choose one of "
         f"{', '.join(accounting.ACCOUNTANTS)}"),
        (self.sampler in sampling.SAMPLERS,
         f"unknown sampler {self.sampler!r}; choose one of {', '.join(sampling.SAMPLERS)}"),
        (self.init_steps >= 1, f"init_steps must be >= 1, got {self.init_steps}"),
        (self.eval_every >= 1, f"eval_every must be >= 1, got {self.eval_every}"),
        (self.secure_bits is None or
         2 <= self.secure_bits <= secure_aggregation.MAX_BITS,
         f"secure_bits must be in [2, {secure_aggregation.MAX_BITS}], "
         f"got {self.secure_bits}"),
        (0 <= self.secure_frac_bits <= 24,
         f"secure_frac_bits must be in [0, 24], got {self.secure_frac_bits}"),
        (self.secure_neighbours >= 1,
         f"secure_neighbours must be >= 1, got {self.secure_neighbours}"),
        (self.max_dropouts >= 0, f"max_dropouts must be >= 0, got {self.max_dropouts}"),
        (0.0 <= self.dropout_rate < 1.0,
         f"dropout_rate must be in [0, 1), got {self.dropout_rate}"),
        (self.client_chunk is None or self.client_chunk >= 1,
         f"client_chunk must be >= 1, got {self.client_chunk}"),
        (self.selection_metric in SELECTION_METRICS,
         f"unknown selection_metric {self.selection_metric!r}; choose one of "
         f"{', '.join(SELECTION_METRICS)}"),
    ]
    for ok, message in checks:
      if not ok:
        raise ValueError(message)
    if self.max_cohort is not None:
      if self.max_cohort < 1:
        raise ValueError(f"max_cohort must be >= 1, got {self.max_cohort}")
      if self.sampler != "poisson" or self.accountant != "pld":
        raise ValueError("max_cohort (truncated Poisson sampling) needs sampler "
                         "'poisson' and accountant 'pld'")
    if self.sampler == "fixed" and self.accountant != "rdp":
      raise ValueError(f"accountant {self.accountant!r} assumes Poisson sampling; "
                       "use accountant 'rdp' with sampler 'fixed'")

  @property
  def local(self) -> LocalTraining:
    """The client-side hyper-parameters."""
    return LocalTraining(self.local_steps, self.batch_size, self.lr, self.local_optimizer)

  def rate(self, num_clients: int) -> float:
    """q = C = clients_per_round / N."""
    return self.clients_per_round / num_clients

  def validate_scheme(self, scheme: Scheme, num_clients: int, num_params: int,
                      samples_per_client: int = 1) -> None:
    """Checks this config with a scheme: its options and its mechanism.

    Raises:
      ValueError: One line naming the parameter.
    """
    self.validate(num_clients)
    scheme.validate(num_params, self.ratio)
    if self.local_optimizer not in scheme.traits.local_optimizers:
      raise ValueError(f"local_optimizer {self.local_optimizer!r} does not apply to "
                       f"{scheme.name}, which trains with "
                       f"{' or '.join(scheme.traits.local_optimizers)}")
    self._check_aggregator(scheme)
    if self.attack is not None:
      self._check_attack(scheme, num_clients)
    mechanism = scheme.mechanism(self.noise_multiplier,
                                 scheme.num_values(num_params, self.ratio), self.local,
                                 samples_per_client)
    if self.audit is not None:
      self._check_audit(scheme, mechanism, num_clients)
    accounting.check_mechanism(mechanism, self.accountant, self.sampler)

  def _check_attack(self, scheme: Scheme, num_clients: int) -> None:
    """The attack's own checks, and how its malicious pool joins cohorts."""
    attack = self.attack
    attack.validate()
    if attack.skip_noise and not scheme.traits.dp:
      raise ValueError(f"attack skip_noise applies to DP schemes; {scheme.name} adds "
                       "no noise")
    if attack.selection == "cohort":
      if self.max_cohort is not None:
        raise ValueError("max_cohort (truncated Poisson sampling) would cut the malicious "
                         "share of the cohort; use selection 'fixed'")
      sampling.check_malicious(num_clients, self.rate(num_clients), self.sampler,
                               attacks.num_malicious(num_clients, attack.fraction),
                               attack.fraction)

  def _check_audit(self, scheme: Scheme, mechanism: accounting.Mechanism,
                   num_clients: int) -> None:
    """Canaries audit a client-level DP release: refused elsewhere (one line)."""
    self.audit.validate(num_clients)
    if mechanism.kind == "none":
      raise ValueError(f"audit_canaries audits a DP release; {scheme.name} adds no noise, "
                       "so there is no epsilon to audit")
    if mechanism.level != "client":
      raise ValueError(f"audit_canaries audits client-level DP; {scheme.name}'s DP is "
                       f"{mechanism.level}-level")
    if self.attack is not None:
      raise ValueError("audit_canaries with an attack: the audit assumes honest clients")
    if self.max_cohort is not None:
      raise ValueError("audit_canaries with max_cohort (truncated Poisson sampling) is not "
                       "supported")

  def _check_aggregator(self, scheme: Scheme) -> None:
    """A robust aggregator needs every individual update in the clear."""
    if self.aggregator is None:
      return
    self.aggregator.validate()
    if not self.aggregator.robust:
      return
    name = self.aggregator.name
    if self.secure_aggregation:
      raise ValueError(f"aggregator {name!r} needs the individual updates, which secure "
                       "aggregation hides (thesis Sec. 3.3.2)")
    if scheme.traits.dp:
      raise ValueError(f"aggregator {name!r} needs the individual updates; {scheme.name}'s "
                       "noise shares are sized for a sum, so its epsilon would not hold")
    if self.client_chunk is not None:
      raise ValueError(f"aggregator {name!r} needs every update at once; client_chunk "
                       "streams a sum")


# Cohorts above this many slots are trained and summed AUTO_CHUNK at a time.
AUTO_CHUNK_ABOVE = 256
AUTO_CHUNK = 128
# On a CPU the cohort goes CPU_CHUNK_PER_DEVICE slots a device at a time: a
# chunk of padding slots only (a Poisson cohort smaller than its capacity) is
# then skipped, not trained, and smaller chunks cost nothing there
# (docs/performance.md: an 8-round UAI run, 95 clients in 116 slots, took
# 18% less time). Where chunks would train more slots over the planned
# rounds than one piece (a cohort that is always full, such as thesis Table
# 8.3's 10 clients: chunks of 8 train 16 slots), the cohort goes in one piece.
CPU_CHUNK_PER_DEVICE = 4


def default_chunk(capacity: int, devices: int, robust: bool,
                  cohort_sizes: np.ndarray) -> int | None:
  """The slots trained and summed at a time when ``client_chunk`` is None.

  Args:
    capacity: The cohort's slots.
    devices: The devices the slots are sharded over.
    robust: A robust aggregator (it needs every update at once).
    cohort_sizes: The planned rounds' cohort sizes: on a CPU the chunks are
      used only if they train fewer slots over these rounds than one piece
      does (every chunk holding a sampled client is trained).
  """
  if robust:  # a robust rule needs every update at once
    return None
  if jax.default_backend() == "cpu":
    chunk = CPU_CHUNK_PER_DEVICE * devices
    if capacity <= chunk:
      return None
    filled = np.minimum(np.asarray(cohort_sizes), capacity)
    if np.sum(-(-filled // chunk) * chunk) >= capacity * filled.size:
      return None
    return chunk
  return AUTO_CHUNK if capacity > AUTO_CHUNK_ABOVE else None


class Communication(NamedTuple):
  """Secure-aggregation settings and bits per value up and down."""

  secure_bits: int | None
  secure_scale: float
  secure_frac_bits: int | None
  upstream_bits: float
  downstream_bits: int


def communication(traits: Traits, cfg: RunConfig, capacity: int,
                  clip_norm: float | None) -> Communication:
  """Secure-aggregation settings and bits per value up and down.

  Secure aggregation applies to DP schemes and to schemes with bounded
  integer messages (FL-SIGN, signSGD); the bit width is ``--secure-bits`` or
  thesis 5.2.4's ``ceil(log2((12 S sigma + max|x|) |K| 2^f))`` with |K| the
  largest cohort (capacity), S sigma the aggregate noise std, max|x| the
  largest noiseless coordinate (1 for signs, S after clipping) and 2^f the
  fixed-point scale (1 for integers). Without it a value costs 32 bits, or
  the scheme's own figure (1 for a sign; the thesis modulus for FL-SIGN-DP,
  whose Alg. 9 always encrypts).
  """
  integer = traits.integer_messages
  scale = 1.0 if integer else float(2 ** cfg.secure_frac_bits)
  max_abs = traits.max_abs_value or clip_norm
  noise_std = clip_norm * cfg.noise_multiplier if traits.dp else 0.0

  def formula(scale):
    return secure_aggregation.bit_width(noise_std, max_abs, capacity, scale)

  secure = cfg.secure_aggregation and (traits.dp or integer)
  bits = (cfg.secure_bits or formula(scale)) if secure else None
  up = traits.upstream_bits
  if bits is not None:
    up = bits
  elif up is None:
    up = formula(1.0)
  return Communication(bits, scale if secure else 1.0,
                       None if (not secure or integer) else cfg.secure_frac_bits, up,
                       traits.downstream_bits)


class Prepared(NamedTuple):
  """A run after the server's setup, ready for round 1 (:func:`prepare`).

  Attributes:
    scheme: The scheme, bound to the run (``Scheme.bind``).
    state: The initial server state.
    clip_norm: S for DP schemes (given, calibrated or the scheme's own), else
      None.
    num_values: m, values per message.
    round_cfg: The static round configuration.
    comm: Secure aggregation and bits per value.
    mechanism: What a round releases.
    sampling_keys: (rounds, 2) every round's sampling key.
    run_key: The run's root key.
  """

  scheme: Scheme
  state: ServerState
  clip_norm: float | None
  num_values: int
  round_cfg: RoundConfig
  comm: Communication
  mechanism: accounting.Mechanism
  sampling_keys: jax.Array
  run_key: jax.Array


def _check_clients(data: ClientData) -> None:
  """Rejects a client without examples (every row the padding label -1).

  Padded clients of unequal size (``fedjax_dp.data.partitioning``) are
  otherwise fine: local training draws only real rows and the losses ignore
  padding; client-level DP clips a client's whole update whatever its size;
  and record-level DP (CDP-LQ) samples every row with the accounted rate
  q = |B| / width, a padding row adding a zero gradient, so each real record
  is sampled at the rate the accountant assumes.
  """
  sizes = np.asarray(jnp.sum(data.y >= 0, axis=1))
  if sizes.min() < 1:
    raise ValueError(f"client {int(np.argmin(sizes))} holds no examples (all its labels "
                     "are the padding label -1)")


# RunConfig fields newer than the checkpoint format, with the value that
# means what runs did before the field existed (see ``run``).
_LATER_FIELDS = {"clip_ratio": None, "aggregator": None, "attack": None, "audit": None,
                 "local_optimizer": "sgd"}


def _calibrated_clip(scheme: Scheme, setup_data: SetupData, state: Any,
                     clip_ratio: float | None) -> float:
  """S from public data (UAI Sec. 4), at the run's ratio or at ``clip_ratio``."""
  if clip_ratio is None or clip_ratio == setup_data.ratio:
    return scheme.calibrate_clip(setup_data, state)
  at = setup_data._replace(ratio=clip_ratio)
  return scheme.calibrate_clip(at, scheme.setup(at))


def _audit_setup(cfg: RunConfig, root: jax.Array, num_values: int, rate: float,
                 multiple: int) -> tuple[canaries.AuditState | None, int]:
  """The audit's canaries and the slots their rounds need (none without)."""
  if cfg.audit is None:
    return None, 0
  state = canaries.init_state(root, num_values, cfg.audit)
  return state, canaries.planned_capacity(root, state, rate, cfg.rounds, multiple)


def prepare(model: FlatModel, scheme: Scheme, data: ClientData,
            public: tuple[np.ndarray, np.ndarray], cfg: RunConfig) -> Prepared:
  """Validates, then runs the server's work before round 1.

  w0, the scheme's setup on public data, S (the user's, calibrated, or the
  scheme's fixed sensitivity), the cohort capacity, the device mesh, bit
  widths and the round configuration.

  Raises:
    ValueError: A bad setting (one line, naming the parameter).
  """
  num_clients, samples = int(data.x.shape[0]), int(data.x.shape[1])
  n = model.num_params
  cfg.validate_scheme(scheme, num_clients, n, samples)
  if cfg.selection_metric != "accuracy" and model.loss_name != "sigmoid_ce":
    raise ValueError(f"selection_metric {cfg.selection_metric!r} needs a binary model; "
                     f"{model.name} is evaluated by accuracy")
  traits = scheme.traits
  _check_clients(data)
  root = keys.run_key(cfg.seed)
  k = scheme.num_values(n, cfg.ratio)
  sampling_keys = jax.vmap(lambda t: keys.round_keys(root, t).sampling
                           )(jnp.arange(1, cfg.rounds + 1))
  mesh = sharding.client_mesh(cfg.devices)
  sizes = sampling.planned_cohort_sizes(sampling_keys, num_clients, cfg.rate(num_clients),
                                        cfg.sampler,
                                        _cohort_share(cfg.attack, num_clients, root))
  multiple = math.lcm(4, sharding.mesh_size(mesh))
  capacity = sampling.capacity_for(sizes, num_clients, multiple=multiple)
  if cfg.max_cohort is not None:  # truncated Poisson: keep a random subset
    capacity = min(capacity, cfg.max_cohort)
  audit, canary_slots = _audit_setup(cfg, root, k, cfg.rate(num_clients), multiple)
  dropouts = cfg.max_dropouts if traits.dp else 0
  num_shares = (max(1, int(min(sizes.min(), capacity)) - dropouts),
                max(1, capacity + canary_slots - dropouts))
  setup_data = SetupData(
      model=model, w0=jax.jit(model.init)(keys.purpose(root, keys.INIT)),
      public_x=jnp.asarray(public[0]), public_y=jnp.asarray(public[1]),
      key=keys.purpose(root, keys.SETUP), ratio=cfg.ratio, init_steps=cfg.init_steps,
      local=cfg.local, run_key=root, num_clients=num_clients, samples_per_client=samples,
      rounds=cfg.rounds, noise_multiplier=cfg.noise_multiplier if traits.dp else 0.0,
      num_shares=num_shares)
  scheme_state = scheme.setup(setup_data)
  clip_norm = None
  if traits.dp:
    clip_norm = cfg.clip_norm
    if traits.fixed_sensitivity:
      clip_norm = scheme.calibrate_clip(setup_data, scheme_state)
    elif clip_norm is None:
      clip_norm = _calibrated_clip(scheme, setup_data, scheme_state, cfg.clip_ratio)
    scheme = scheme.bind(setup_data, clip_norm)

  comm = communication(traits, cfg, capacity + canary_slots, clip_norm)
  client_chunk = cfg.client_chunk
  robust = cfg.aggregator is not None and cfg.aggregator.robust
  if client_chunk is None:
    client_chunk = default_chunk(capacity + canary_slots, sharding.mesh_size(mesh), robust,
                                 sizes)
  round_cfg = RoundConfig(
      scheme=scheme, num_clients=num_clients, clients_per_round=cfg.clients_per_round,
      capacity=capacity, sampler=cfg.sampler, num_kept=k, local_steps=cfg.local_steps,
      batch_size=cfg.batch_size, lr=cfg.lr, local_optimizer=cfg.local_optimizer,
      noise_multiplier=setup_data.noise_multiplier,
      clip_norm=clip_norm if traits.dp else 1.0, secure_bits=comm.secure_bits,
      secure_scale=comm.secure_scale, secure_neighbours=cfg.secure_neighbours,
      max_dropouts=dropouts, dropout_rate=cfg.dropout_rate,
      client_chunk=client_chunk, mesh=mesh, aggregator=cfg.aggregator if robust else None,
      attack=cfg.attack, canary_slots=canary_slots)
  mechanism = scheme.mechanism(setup_data.noise_multiplier, k, cfg.local, samples)
  return Prepared(scheme, ServerState(setup_data.w0, scheme_state, audit), clip_norm, k,
                  round_cfg, comm, mechanism, sampling_keys, root)


class Counters(NamedTuple):
  """What the train loop counts over the rounds (from each round's RoundInfo)."""

  participations: int = 0
  truncated: int = 0
  clipped: int = 0
  dropped: int = 0
  under_noised: int = 0
  overflows: int = 0

  def add(self, infos: RoundInfo, capacity: int, max_dropouts: int) -> "Counters":
    """These counts plus those of the rounds in ``infos`` (stacked)."""
    sampled = np.asarray(infos.num_sampled)
    drops = np.asarray(infos.num_dropped)
    return Counters(
        self.participations + int(np.minimum(sampled, capacity).sum()),
        self.truncated + int((sampled > capacity).sum()),
        self.clipped + int(np.asarray(infos.num_clipped).sum()),
        self.dropped + int(drops.sum()),
        self.under_noised + int((drops > max_dropouts).sum()),
        self.overflows + int(np.asarray(infos.secure_overflow).sum()))


class Trained(NamedTuple):
  """What the train loop returns."""

  state: ServerState
  history: list
  counters: Counters
  coded_sizes: list
  earlier_seconds: float = 0.0  # training time of the processes before a resume


def train_loop(model: FlatModel, prep: Prepared, data: ClientData,
               test: tuple[np.ndarray, np.ndarray], rounds: int, eval_every: int,
               progress: Callable[[int], None] | None = None,
               checkpoint: tuple[str, str] | None = None) -> Trained:
  """Rounds 1..``rounds``, compiled ``eval_every`` at a time, test accuracy after each.

  Coded-stream schemes (``traits.measured_streams``) also measure what
  some clients send in the first round of every interval. With
  ``checkpoint = (path, fingerprint)`` the loop saves its state after every
  evaluation (``fedjax_dp.checkpoint``) and, if ``path`` holds a checkpoint
  of the same run, continues from it with the numbers of an uninterrupted
  run. In a multi-process run (``fedjax_dp.distributed``) process 0 alone
  reads and writes the checkpoint; the others resume from what it read.
  """
  scheme, cfg = prep.scheme, prep.round_cfg
  mesh = cfg.mesh
  eval_fn = make_eval_fn(model, mesh=mesh)
  measured = scheme.traits.measured_streams
  stream_fn = make_stream_fn(model, cfg, measured) if measured > 0 else None
  test_x, test_y = jnp.asarray(test[0]), np.asarray(test[1])
  state, root = prep.state, prep.run_key
  history, coded_sizes, counters = [], [], Counters()
  t, started, earlier = 1, time.perf_counter(), 0.0
  saved = None if checkpoint is None else _resume(checkpoint, state)
  if saved is not None:
    earlier = saved.seconds
    state, history, coded_sizes = saved.state, saved.history, saved.coded_sizes
    counters, t = Counters(*saved.counters), saved.round + 1
    if progress is not None:
      progress(saved.round)
  if mesh is not None:  # the placement every round call sees (one compilation)
    state, data, root, test_x = sharding.replicate((state, data, root, test_x), mesh)
  compiled: dict[int, Callable] = {}
  while t <= rounds:
    chunk = min(eval_every, rounds - t + 1)
    if chunk not in compiled:
      compiled[chunk] = make_rounds_fn(model, cfg, chunk)
    if stream_fn is not None:  # round t's streams, before the state is donated
      streams, real = stream_fn(state, data, root, jnp.int32(t))
      coded_sizes += [scheme.measure_stream(s, model.num_params)
                      for s, r in zip(np.asarray(streams), np.asarray(real)) if r]
    state, infos = compiled[chunk](state, data, root, jnp.int32(t))
    t += chunk
    counters = counters.add(infos, cfg.capacity, cfg.max_dropouts)
    preds, scores = map(np.asarray, eval_fn(state.weights, test_x))
    history.append({"round": t - 1,
                    **evaluation_metrics(model, test_y, preds, scores),
                    **_attack_entry(cfg.attack, test_y, preds, infos),
                    **scheme.diagnostics(state.scheme_state, t - 1),
                    # NaN or infinite outputs: the "accuracy" is that of argmax(NaN).
                    **({} if np.isfinite(scores).all() else {"nonfinite": True})})
    if checkpoint is not None and distributed.is_main():
      checkpoint_lib.save(checkpoint[0], checkpoint[1], checkpoint_lib.Saved(
          t - 1, state, history, tuple(counters), coded_sizes,
          earlier + time.perf_counter() - started))
    if progress is not None:
      progress(chunk)
  return Trained(state, history, counters, coded_sizes, earlier)


def _resume(checkpoint: tuple[str, str], state: ServerState) -> checkpoint_lib.Saved | None:
  """The run's checkpoint, if any, as process 0 reads it (every process
  resumes from the same one; ``checkpoint = (path, fingerprint)``)."""
  path, key = checkpoint
  if jax.process_count() == 1:
    return checkpoint_lib.load(path, key, state)
  found = pathlib.Path(path)
  content = distributed.broadcast_bytes(
      found.read_bytes() if distributed.is_main() and found.is_file() else None)
  return checkpoint_lib.load(path, key, state, content=content) if content else None


def _attack_record(rc: RoundConfig, best: dict) -> dict:
  """The attack's settings and, at the best round, its metrics (none without)."""
  if rc.attack is None:
    return {}
  return {"attack": dataclasses.asdict(rc.attack),
          **{k: best[k] for k in attacks.METRICS if k in best}}


def _attack_entry(attack: attacks.AttackConfig | None, labels: np.ndarray,
                  predictions: np.ndarray, infos: RoundInfo) -> dict:
  """Under attack: the malicious senders of the rounds since the last
  evaluation and, for a backdoor, the attacked class' and the attack's
  accuracy (thesis Sec. 6.2)."""
  if attack is None:
    return {}
  found = attacks.attack_metrics(predictions, labels, attack)
  found.pop("accuracy")  # already in the entry
  return {"malicious_clients": int(np.asarray(infos.num_malicious).sum()), **found}


def privacy_report(prep: Prepared, cfg: RunConfig, rounds_list) -> accounting.PrivacyReport:
  """Epsilon after each round count of ``rounds_list``: the scheme's mechanism
  composed by ``fedjax_dp.privacy.accounting.report``."""
  rc = prep.round_cfg

  def participations(ts):
    return sampling.max_participations(prep.sampling_keys, rc.num_clients, rc.rate,
                                       rc.capacity, rc.sampler, ts,
                                       _cohort_share(rc.attack, rc.num_clients, prep.run_key))

  return accounting.report(
      prep.mechanism, rounds_list, cfg.delta, cfg.accountant,
      accounting.Sampling(rc.rate, rc.sampler, rc.num_clients, rc.capacity,
                          cfg.max_cohort, participations))


def _warn(name: str, dp: bool, comm, cfg: RunConfig, counters: Counters,
          history: list[dict]) -> list[int]:
  """Warns of what makes a run's figures suspect; returns the rounds whose
  test outputs were NaN or infinite."""
  if counters.overflows:
    warnings.warn(f"{name}: {counters.overflows} coordinate sums overflowed the "
                  f"{comm.secure_bits}-bit secure-aggregation modulus")
  if dp and counters.under_noised:
    warnings.warn(f"{name}: {counters.under_noised} rounds lost more than "
                  f"--max-dropouts {cfg.max_dropouts} clients; their aggregate noise "
                  "was below what the accountant assumes")
  broken = [h["round"] for h in history if h.get("nonfinite")]
  if broken:
    warnings.warn(f"{name}: the model's test outputs were NaN or infinite at "
                  f"{len(broken)} of {len(history)} evaluations, first at round "
                  f"{broken[0]}; its accuracy there is that of a constant prediction")
  return broken


def make_record(model: FlatModel, prep: Prepared, cfg: RunConfig, trained: Trained,
                seconds: float) -> dict:
  """The run's JSON-ready record (UAI Table 1's columns and the run's details)."""
  scheme, rc, comm, counters = prep.scheme, prep.round_cfg, prep.comm, trained.counters
  dp, n, k = scheme.traits.dp, model.num_params, prep.num_values
  history = trained.history
  metric = cfg.selection_metric
  best = max(history, key=lambda h: (h[metric], -h["round"]))
  broken = _warn(scheme.name, dp, comm, cfg, counters, history)
  privacy = privacy_report(prep, cfg, [best["round"], cfg.rounds])
  upstream_bits, coded = comm.upstream_bits, {}
  if scheme.traits.measured_streams > 0:
    coded = universal_coding.summarize(trained.coded_sizes)
    if trained.coded_sizes:  # measured coded bits replace the nominal 32 a value
      upstream_bits = coded["coded_bits_per_value"]
  down_values = scheme.num_downstream(n, cfg.ratio)
  parts = counters.participations
  client_level = prep.mechanism.kind != "none" and prep.mechanism.level == "client"
  record = {
      "scheme": scheme.name,
      "ratio": cfg.ratio if scheme.traits.uses_ratio else 1.0,
      "best_accuracy": best["accuracy"],
      "best_round": best["round"],
      "selection_metric": metric,
      **{m: best[m] for m in ("balanced_accuracy", "auroc") if m in best},
      "final_accuracy": history[-1]["accuracy"],
      "downstream_kb": bandwidth.cost_kb(down_values, best["round"], rc.rate,
                                         comm.downstream_bits),
      "upstream_kb": bandwidth.cost_kb(k, best["round"], rc.rate, upstream_bits),
      "measured_upstream_kb": bandwidth.measured_cost_kb(k, parts, rc.num_clients,
                                                         upstream_bits),
      "upstream_bits": upstream_bits,
      "downstream_bits": comm.downstream_bits,
      "secure_aggregation": comm.secure_bits is not None,
      "secure_bits": comm.secure_bits,
      "secure_frac_bits": comm.secure_frac_bits,
      "secure_neighbours": cfg.secure_neighbours if comm.secure_bits else None,
      "secure_overflows": counters.overflows,
      "max_dropouts": rc.max_dropouts,
      "dropout_rate": cfg.dropout_rate,
      "dropped_clients": counters.dropped,
      "under_noised_rounds": counters.under_noised if dp else 0,
      "client_chunk": rc.client_chunk,
      **({"aggregator": dataclasses.asdict(rc.aggregator)} if rc.aggregator else {}),
      **_attack_record(rc, best),
      "upstream_values": k,
      "downstream_values": down_values,
      "epsilon": privacy.epsilons[0],
      "epsilon_final": privacy.epsilons[1],
      **_audit_record(trained.state.audit, cfg),
      "delta": cfg.delta if dp else None,
      "accountant": privacy.label,
      "sampler": cfg.sampler,
      "noise_multiplier": rc.noise_multiplier,
      "clip_norm": prep.clip_norm,
      "clipped_fraction": counters.clipped / max(parts, 1) if client_level else None,
      "rounds": cfg.rounds,
      # Named where it is not the SGD every record before it used.
      **({"local_optimizer": cfg.local_optimizer} if cfg.local_optimizer != "sgd" else {}),
      "num_params": n,
      "num_clients": rc.num_clients,
      "clients_per_round": cfg.clients_per_round,
      "capacity": rc.capacity,
      "devices": sharding.mesh_size(rc.mesh),
      "max_cohort": cfg.max_cohort,
      "truncated_rounds": counters.truncated,
      "mean_cohort": parts / cfg.rounds,
      "seed": cfg.seed,
      "seconds": seconds,
      **({"nonfinite_round": broken[0]} if broken else {}),
      "history": history,
      **scheme.diagnostics(trained.state.scheme_state, cfg.rounds),
      **scheme.describe(),
      **privacy.fields,
      **coded,
  }
  return record


def _audit_record(state: canaries.AuditState | None, cfg: RunConfig) -> dict:
  """The audit's estimates beside the accountant's epsilon (none without).

  Both threat models' statistics cover all ``cfg.rounds`` rounds, so they
  compare with ``epsilon_final``.
  """
  if state is None:
    return {}
  found = canaries.report(state, cfg.delta, cfg.audit.confidence)
  return {"empirical_epsilon": found["final_model"]["empirical_epsilon"],
          "empirical_epsilon_every_round": found["every_round"]["empirical_epsilon"],
          "epsilon_lower_bound": found["final_model"]["epsilon_lower_bound"],
          "epsilon_lower_bound_every_round": found["every_round"]["epsilon_lower_bound"],
          "audit": found}


def poisoned(data: ClientData, cfg: RunConfig) -> ClientData:
  """The clients' data as a backdoor attack of ``cfg`` leaves it (else
  ``data``); under an out-backdoor ``attacker_x``/``attacker_y`` hold the
  source-class examples taken from the honest clients, relabelled.

  The malicious set is the one every round's roles use (the run key's
  ``keys.MALICIOUS`` key), so the poisoned clients are the attacking ones.
  """
  attack = cfg.attack
  if attack is None or attack.kind not in attacks.BACKDOORS:
    return data
  attack.validate()
  malicious = attacks.malicious_set(keys.purpose(keys.run_key(cfg.seed), keys.MALICIOUS),
                                    int(data.y.shape[0]), attack.fraction)
  x, y = np.asarray(data.x), np.asarray(data.y)
  given = attacks.out_backdoor_pool(y, np.asarray(malicious), attack)
  px, py = attacks.poison_labels(x, y, np.asarray(malicious), attack)
  if given is None:
    return ClientData(jnp.asarray(px), jnp.asarray(py))
  rows = tuple(given.T)
  return ClientData(jnp.asarray(px), jnp.asarray(py), jnp.asarray(x[rows]),
                    jnp.full(len(given), attack.target, y.dtype))


def run(model: FlatModel, scheme: Scheme, data: ClientData,
        test: tuple[np.ndarray, np.ndarray], public: tuple[np.ndarray, np.ndarray],
        cfg: RunConfig, progress: Callable[[int], None] | None = None, *,
        return_state: bool = False, checkpoint: str | os.PathLike | None = None):
  """Runs one scheme for ``cfg.rounds`` rounds and reports like UAI Table 1.

  Four steps: :func:`prepare` (validation and the server's setup),
  :func:`train_loop`, the privacy report and :func:`make_record`.

  Args:
    model: The model (``fedjax_dp.models``, or ``models.from_flax``).
    scheme: The scheme (``fedjax_dp.schemes.get_scheme``, or your own).
    data: Federated training data (``fedjax_dp.data.partition``).
    test: (examples, labels) of the held-out test set.
    public: (examples, labels) of the server's public batch.
    cfg: Hyper-parameters.
    progress: Called with the number of rounds just completed.
    return_state: Also return the final :class:`ServerState`.
    checkpoint: A file to save the run to after every evaluation; a run
      started again with the same file, model, scheme, data and config
      continues from it with the same numbers. Deleted when the run ends.
      Several processes (``fedjax_dp.distributed``): process 0 alone
      writes it.

  Returns:
    A JSON-ready record: scheme, ratio, best_accuracy, best_round,
    downstream_kb, upstream_kb, epsilon (at the best round), epsilon_final,
    delta, accountant, noise_multiplier, clip_norm, rounds, num_params,
    seconds, the accuracy history, and the scheme's own fields. With
    ``return_state``, the pair ``(record, final ServerState)``.

  Raises:
    ValueError: A bad setting (one line, naming the parameter).
  """
  start = time.perf_counter()
  data = poisoned(data, cfg)
  prep = prepare(model, scheme, data, public, cfg)
  saving = None
  if checkpoint is not None:
    # Fields added since checkpoints were first written count only when set,
    # so a run interrupted under older code still resumes.
    settings = {k: v for k, v in dataclasses.asdict(cfg).items()
                if not (k in _LATER_FIELDS and v == _LATER_FIELDS[k])}
    saving = (checkpoint, checkpoint_lib.fingerprint(
        model.name, model.num_params, scheme.name, scheme.describe(),
        settings, data.x.shape, str(data.x.dtype),
        hashlib.sha256(np.asarray(data.y).tobytes()).hexdigest()))
  trained = train_loop(model, prep, data, test, cfg.rounds, cfg.eval_every, progress,
                       saving)
  # Wall time over every process that trained this run (setup counted once).
  record = make_record(model, prep, cfg, trained,
                       time.perf_counter() - start + trained.earlier_seconds)
  if checkpoint is not None and distributed.is_main():
    pathlib.Path(checkpoint).unlink(missing_ok=True)
  return (record, trained.state) if return_state else record
