"""Malicious clients (thesis Ch. 6) as a round feature: the attack's one home.

The attack's settings, pools, poisoning and metrics are
:mod:`~fedjax_dp.features.attack.adversary`; this module puts them in the round.
The malicious pool (the run key's ``keys.MALICIOUS`` draw) joins cohorts as its
``selection`` says (``sampler_share``); each round marks the cohort's malicious
slots (``begin``), computes what the attackers send once the round's model is
known (``train``: colluding attackers train once on their pooled data, thesis
l.1655; a random-update attacker draws its own), replaces those slots' messages,
and, under ``skip_noise``, their contributions by eta_adv times the message,
unclipped (thesis l.1789-1795).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp import keys, sampling
from fedjax_dp.data import ClientData, as_float
from fedjax_dp.errors import ConfigError
from fedjax_dp.features.attack import adversary
from fedjax_dp.features.attack.adversary import AttackConfig
from fedjax_dp.features.base import At, Feature, RunView, Trainer
from fedjax_dp.options import Option, declared

from fedjax_dp.round_types import RoundInputs


class Round(NamedTuple):
  """An attacked round.

  Attributes:
    roles: (slots,) bool, the malicious slots.
    attackers: (round(alpha N),) the malicious clients' ids.
    sent: ``sent(ids)``, what malicious clients at these slots send (from
      ``train``; None before, or when alpha N rounds to no attacker).
  """

  roles: jax.Array
  attackers: jax.Array
  sent: Callable[[jax.Array], jax.Array] | None = None


class Attack(Feature):
  """Malicious clients: ``RunConfig.of(attack=adversary.AttackConfig(...))``."""

  kind = "attack"
  config_type = adversary.AttackConfig
  title = "attacks (malicious clients, thesis Chapter 6; fedjax_dp.features.attack)"
  switch = "attack"
  options = (*declared(adversary.AttackConfig),
             Option("backdoor", help="SRC:DST classes of a backdoor, by index or name (5:7, "
                    "Sandal:Sneaker)"))
  key_purposes = (keys.Purpose("run", keys.MALICIOUS, "the malicious pool"),
                  keys.Purpose("round", keys.ATTACK, "colluding attackers' training"),
                  keys.Purpose("round", keys.ATTACK_CLIENTS, "each attacker's own draw"))

  @classmethod
  def from_options(cls, values: Mapping[str, Any]) -> adversary.AttackConfig | None:
    """The attack of ``--attack``, its ``--malicious-fraction`` and, for a
    backdoor, ``--backdoor SRC:DST`` (classes by name for ``values["dataset"]``)."""
    kind = values["attack"]
    if kind is None:
      return super().from_options(values)
    if values["malicious_fraction"] is None:
      raise ConfigError("attack", f"{kind} needs --malicious-fraction")
    backdoor = kind in adversary.BACKDOORS
    if backdoor and values["backdoor"] is None:
      raise ConfigError("attack", f"{kind} needs --backdoor SRC:DST")
    if not backdoor and values["backdoor"] is not None:
      raise ConfigError("backdoor", f"applies to {' and '.join(adversary.BACKDOORS)}")
    config = super().from_options({**values, "backdoor": None})
    if not backdoor:
      return config
    try:
      source, target = adversary.parse_backdoor(values["backdoor"], values["dataset"])
    except ValueError as e:
      raise ConfigError("backdoor", str(e)) from None
    return dataclasses.replace(config, source=source, target=target)

  @classmethod
  def check(cls, config: adversary.AttackConfig, run: RunView) -> None:
    attack = config
    attack.validate()
    super().check(config, run)
    if not run.traits.trains_by_local_update:  # signSGD, CDP-LQ: steps of their own
      own = (f"{run.scheme_name}, which trains its clients with steps of its own, not the "
             "model's local update that the attacks replace")
      if attack.kind in ("random-update", "gradient-ascent"):
        raise ConfigError("attack", f"{attack.kind} cannot reach {own}; a backdoor's "
                          "relabelled data can (unboosted)")
      # Attackers who skip their noise boost the message itself (contributions).
      if attack.boost != 1.0 and not attack.skip_noise:
        raise ConfigError("boost", f"{attack.boost:g} cannot reach {own}; run the backdoor "
                          "unboosted")
    if attack.skip_noise and not run.traits.dp:
      raise ConfigError("skip_noise", f"applies to DP schemes; {run.scheme_name} adds no noise")
    if attack.selection == "cohort":
      if run.sampler in sampling.SCHEDULED:
        raise ConfigError("selection", f"'cohort' puts attackers in every cohort, which "
                          f"{run.sampler} sampling cannot; sample the attackers like every "
                          "client (selection 'fixed')")
      if run.max_cohort is not None:
        raise ConfigError("max_cohort", "(truncated Poisson sampling) would cut the malicious "
                          "share of the cohort; sample the attackers like every client "
                          "(selection 'fixed')")
      sampling.check_pool_share(run.num_clients, run.rate, run.sampler,
                               adversary.num_malicious(run.num_clients, attack.fraction),
                               attack.fraction)

  @classmethod
  def client_data(cls, config: adversary.AttackConfig, data: ClientData,
                  run_key: jax.Array) -> ClientData:
    """The clients' data as a backdoor leaves it (:func:`poisoned`)."""
    return poisoned(data, config, run_key)

  def sampler_share(self, run_key: jax.Array, num_clients: int) -> sampling.PoolShare | None:
    return adversary.cohort_share(keys.purpose(run_key, keys.MALICIOUS), num_clients,
                                self.config)

  def begin(self, at: At, value: None) -> Round:
    """Who attacks: the malicious pool and its slots in the cohort."""
    del value
    inputs = at.inputs
    n, fraction = self.run.num_clients, self.config.fraction
    malicious = adversary.malicious_set(keys.purpose(inputs.run_key, keys.MALICIOUS), n, fraction)
    attackers = jnp.nonzero(malicious, size=adversary.num_malicious(n, fraction))[0]
    cohort = inputs.cohort
    return Round(malicious[cohort.indices] & cohort.mask, attackers)

  def train(self, at: At, value: Round) -> Round:
    """What the attackers send this round (``Round.sent``)."""
    return value._replace(sent=attack_messages(at.trainer, self.config, at.inputs,
                                               value.attackers))

  @property
  def keeps_shares(self) -> bool:
    """Attackers who skip their noise replace their contribution, share and all."""
    return bool(self.config.skip_noise)

  def messages(self, at: At, messages: jax.Array) -> jax.Array:
    value, chunk = at.value, at.chunk
    if value.sent is None:
      return messages
    return jnp.where(chunk.take(value.roles)[:, None],
                     value.sent(chunk.ids).astype(messages.dtype), messages)

  def contributions(self, at: At, contributions: tuple[jax.Array, jax.Array]
                    ) -> tuple[jax.Array, jax.Array]:
    value, chunk, messages = at.value, at.chunk, at.messages
    contributions, clipped = contributions
    if value.sent is None or not self.config.skip_noise:
      return contributions, clipped
    # Attackers who skip their noise send eta_adv times their message, unclipped.
    raw = (float(self.config.boost) * messages.astype(jnp.float32)).astype(contributions.dtype)
    return jnp.where(chunk.take(value.roles)[:, None], raw, contributions), clipped

  def info(self, at: At, info: dict) -> dict:
    return {**info, "num_malicious": jnp.sum(at.value.roles, dtype=jnp.int32)}

  def entry(self, labels: np.ndarray, predictions: np.ndarray, infos: dict) -> dict:
    """The malicious senders since the last evaluation and, for a backdoor, the
    attacked class' and the attack's accuracy (thesis Sec. 6.2)."""
    found = adversary.attack_metrics(predictions, labels, self.config)
    found.pop("accuracy")  # already in the entry
    return {"malicious_clients": int(np.asarray(infos["num_malicious"]).sum()), **found}

  def record(self, state, best: dict) -> dict:
    """The attack's settings and metrics; with ``skip_noise`` in a DP run also
    ``honest_noise_multiplier``, sigma sqrt((1 - alpha) |K| / (|K| - l)): the
    noise the model carries when a share alpha of the expected cohort |K|
    adds none, the shares sized for |K| - l (the record's epsilon counts
    sigma; docs/attacks.md)."""
    del state
    attack = dataclasses.asdict(self.config)
    run, sigma = self.run, self.run.noise_multiplier
    if self.config.skip_noise and sigma > 0:
      cohort = run.clients_per_round
      attack["honest_noise_multiplier"] = sigma * math.sqrt(
          (1.0 - self.config.fraction) * cohort / max(cohort - run.max_dropouts, 1))
    return {"attack": attack, **{k: best[k] for k in adversary.METRICS if k in best}}


def attack_messages(trainer: Trainer, attack: adversary.AttackConfig, inputs: RoundInputs,
                    attackers: jax.Array) -> Callable[[jax.Array], jax.Array] | None:
  """``messages(client_ids)``: what malicious clients at these slots send
  (None when alpha N rounds to no attacker).

  The scheme's own ``client_message`` with the attack's local update
  (``adversary.adversarial_model``). Colluding attackers (every attack but
  random-update) train once on their pooled data and all send that message
  (thesis l.1655); a random-update attacker draws its own.
  """
  data = trainer.data
  if attackers.shape[0] == 0:
    return None
  # Skipping the noise, attackers boost the message itself (after encoding).
  boost = 1.0 if attack.skip_noise else attack.boost
  attacker_model = adversary.adversarial_model(trainer.model, attack, boost)
  if attack.colluding:
    pooled_x = data.x[attackers].reshape((-1,) + data.x.shape[2:])
    pooled_y = data.y[attackers].reshape(-1)
    given = (data.feature_data or {}).get(Attack.kind)
    if given is not None:  # an out-backdoor's source class (l.1720)
      pooled_x = jnp.concatenate([pooled_x, given[0]])
      pooled_y = jnp.concatenate([pooled_y, given[1]])
    # Real examples first: local training draws its batches below their count.
    real_first = jnp.argsort(pooled_y < 0, stable=True)
    pooled_x, pooled_y = pooled_x[real_first], pooled_y[real_first]
    local = trainer.local
    if attack.pool_training == "epochs":
      local = local._replace(steps=adversary.pooled_steps(local.steps, pooled_x.shape[0],
                                                        data.x.shape[1]))
    message = trainer.message(attacker_model, as_float(pooled_x), pooled_y,
                              keys.purpose(inputs.keys.round, keys.ATTACK), local)
    return lambda ids: jnp.broadcast_to(message, (ids.shape[0],) + message.shape)

  def own(ids):
    draw_keys = keys.attacker_keys(inputs.keys.round, ids)
    return jax.vmap(lambda xk, yk, kk: trainer.message(attacker_model, xk, yk, kk,
                                                       trainer.local))(
        as_float(data.x[ids]), data.y[ids], draw_keys)

  return own


def poisoned(data: ClientData, attack: adversary.AttackConfig | None,
             run_key: jax.Array) -> ClientData:
  """The clients' data as a backdoor attack leaves it (else ``data``); under an
  out-backdoor ``feature_data["attack"]`` holds the source-class examples
  taken from the honest clients, relabelled, as (x, y).

  The malicious set is the one every round's roles use (the run key's
  ``keys.MALICIOUS`` key), so the poisoned clients are the attacking ones.
  """
  if attack is None or attack.kind not in adversary.BACKDOORS:
    return data
  attack.validate()
  malicious = adversary.malicious_set(keys.purpose(run_key, keys.MALICIOUS),
                                    int(data.y.shape[0]), attack.fraction)
  x, y = np.asarray(data.x), np.asarray(data.y)
  given = adversary.out_backdoor_pool(y, np.asarray(malicious), attack)
  px, py = adversary.poison_labels(x, y, np.asarray(malicious), attack)
  emptied = np.flatnonzero(((py >= 0).sum(axis=1) == 0) & ((y >= 0).sum(axis=1) > 0))
  if emptied.size:  # out-backdoor: a client of the source class alone (a non-IID split)
    more = f" and {emptied.size - 1} more" if emptied.size > 1 else ""
    raise ConfigError("backdoor", f"{attack.source}:{attack.target} leaves client "
                      f"{int(emptied[0])}{more} without examples: the out-backdoor takes class "
                      f"{attack.source} from every honest client; choose another source class "
                      "or an IID split")
  if given is None:
    return ClientData(jnp.asarray(px), jnp.asarray(py))
  rows = tuple(given.T)
  pool = (jnp.asarray(x[rows]), jnp.full(len(given), attack.target, y.dtype))
  return ClientData(jnp.asarray(px), jnp.asarray(py),
                    feature_data={**(data.feature_data or {}), Attack.kind: pool})
