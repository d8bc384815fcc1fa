"""PRNG key derivation: one key per purpose, round and client, never reused.

Every random draw of a run descends from one seed by ``jax.random.fold_in``
along a path that names its purpose, so no two draws share a key:

  run key -> "init" (w0), "setup" -> "subset" | "calibration" | "permutation"
                                      | "server" (public-data work before round 1),
             "malicious" (the attackers' set), "audit" (canary directions and
             which are inserted, fedjax_dp.features.audit.canaries), "participation"
             (balls-in-bins' bins, b-min-sep's draws: fedjax_dp.sampling),
             "rounds" -> round t -> "sampling" | "mask" | "server_noise"
                                  | "clients" -> client id -> "train" | "noise"
                                  | "secure_agg" -> client pair -> ring offset
                                  | "dropout" | "attack"
                                  | "attack_clients" -> client id
                                  | "canary_sampling" | "adaptive_clip"
                                  | "correlated_noise"
                                  | "aggregate_noise" (the shares' sum, drawn once)

Client keys are folded in by *client id* (not slot), so a client's key in a
round does not depend on where it sits in the cohort array. Canary clients
(``fedjax_dp.features.audit.canaries``) have ids N + j, so their keys never meet a real
client's.
"""

from __future__ import annotations

from typing import NamedTuple

import jax

from fedjax_dp import options

# Fixed integers for the purposes; changing them changes every run's draws.
INIT, SETUP, ROUNDS = 0, 1, 2
MALICIOUS = 3  # the pool of malicious clients (fedjax_dp.features.attack.adversary)
AUDIT = 4  # the audit's canaries (fedjax_dp.features.audit.canaries)
PARTICIPATION = 5  # balls-in-bins and b-min-sep (fedjax_dp.sampling.Schedule)
SAMPLING, MASK, SERVER_NOISE, CLIENTS = 0, 1, 2, 3
SECURE_AGG, DROPOUT = 4, 5  # pairwise masks (privacy/secure_aggregation.py), failures
ATTACK, ATTACK_CLIENTS = 6, 7  # colluding attackers' training; each attacker's draw
CANARY_SAMPLING = 8  # which canary clients join the round
ADAPTIVE_CLIP = 9  # the noise on the clipped count (fedjax_dp.features.adaptive_clip)
CORRELATED_NOISE = 10  # the server's z_t (fedjax_dp.features.correlated_noise)
AGGREGATE_NOISE = 11  # the cohort's Gaussian shares drawn as one sum (simulation.round)
# A plug-in feature's own purposes: PLUGIN_BASE + i, clear of the library's
# (which grow from 0 at both levels).
PLUGIN_BASE = 100
TRAIN, NOISE = 0, 1
# Sub-keys of the setup key. A run has one scheme, which uses each at most
# once; SETUP_PERMUTATION (FL-CS's shared shuffle) and SETUP_SERVER (Fed-SMP's
# own public-data training) belong to different schemes and share a value.
SETUP_SUBSET, SETUP_CALIBRATION, SETUP_PERMUTATION, SETUP_SERVER = 0, 1, 2, 2
# Sub-keys of a CDP-LQ client's train key: its DP-SGD steps and its dither.
LQ_TRAIN, LQ_DITHER = 0, 1
# Sub-key of a local step's key for the loss's own draws (dropout). The step's
# batch comes from the step key itself, which jax.random.permutation splits
# (its sort keys are split(k)[1] = fold_in(k, 1), then split(split(k)[0])[1],
# ...): 1 drew the dropout from the batch's sort key; 2 is no such child.
STEP_LOSS = 2
# Seeds are PRNGKey's: a non-negative int64.
SEED_LIMIT = options.SEED_LIMIT


def run_key(seed: int) -> jax.Array:
  """The root key of a run.

  >>> key = run_key(0)
  >>> key.shape, str(key.dtype)
  ((2,), 'uint32')

  Raises:
    ValueError: A seed outside [0, 2**63) (one line; JAX would overflow).
  """
  if not 0 <= seed < SEED_LIMIT:
    raise ValueError(f"seed must be in [0, 2**63), got {seed}")
  return jax.random.PRNGKey(seed)


def round_key(key: jax.Array, round_index: jax.Array | int) -> jax.Array:
  """Key of round ``round_index`` (1-based, as the papers count rounds).

  >>> root = run_key(0)
  >>> bool((round_key(root, 1) == round_key(root, 2)).all())
  False
  """
  return jax.random.fold_in(jax.random.fold_in(key, ROUNDS), round_index)


def purpose(key: jax.Array, name: int) -> jax.Array:
  """Sub-key of ``key`` for one purpose.

  >>> root = run_key(0)
  >>> bool((purpose(root, INIT) == purpose(root, SETUP)).all())
  False
  """
  return jax.random.fold_in(key, name)


class RoundKeys(NamedTuple):
  """The keys of one round (:func:`round_keys`)."""

  round: jax.Array
  sampling: jax.Array
  mask: jax.Array
  server_noise: jax.Array
  secure_agg: jax.Array
  dropout: jax.Array
  aggregate_noise: jax.Array


def round_keys(key: jax.Array, round_index: jax.Array | int) -> RoundKeys:
  """Every shared key of round ``round_index``, by purpose.

  >>> rk = round_keys(run_key(0), 1)
  >>> bool((rk.sampling == purpose(round_key(run_key(0), 1), SAMPLING)).all())
  True
  """
  rkey = round_key(key, round_index)
  return RoundKeys(rkey, purpose(rkey, SAMPLING), purpose(rkey, MASK),
                   purpose(rkey, SERVER_NOISE), purpose(rkey, SECURE_AGG),
                   purpose(rkey, DROPOUT), purpose(rkey, AGGREGATE_NOISE))


def client_keys(rkey: jax.Array, client_ids: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(train keys, noise keys) of the given clients in the round of ``rkey``.

  A client's keys depend on its id, not on its place in ``client_ids``:

  >>> rkey = round_key(run_key(0), 1)
  >>> train, noise = client_keys(rkey, jax.numpy.array([3, 7]))
  >>> train.shape, noise.shape
  ((2, 2), (2, 2))
  >>> alone, _ = client_keys(rkey, jax.numpy.array([7]))
  >>> bool((alone[0] == train[1]).all())
  True
  """
  base = purpose(rkey, CLIENTS)
  per_client = jax.vmap(lambda c: jax.random.fold_in(base, c))(client_ids)
  train = jax.vmap(lambda k: jax.random.fold_in(k, TRAIN))(per_client)
  noise = jax.vmap(lambda k: jax.random.fold_in(k, NOISE))(per_client)
  return train, noise


def attacker_keys(rkey: jax.Array, client_ids: jax.Array) -> jax.Array:
  """Each given client's key for its own attack draw in the round of ``rkey``."""
  base = purpose(rkey, ATTACK_CLIENTS)
  return jax.vmap(lambda c: jax.random.fold_in(base, c))(client_ids)


class Purpose(NamedTuple):
  """A PRNG purpose, declared as data (a round feature's ``key_purposes``).

  Attributes:
    level: ``"run"`` (folded into the run key) or ``"round"`` (into a
      round's key).
    value: The integer folded in.
    name: What the key draws.
  """

  level: str
  value: int
  name: str


# The core's purposes; the round features declare theirs (``fedjax_dp.features``).
CORE_PURPOSES = (
    Purpose("run", INIT, "w0"), Purpose("run", SETUP, "setup"),
    Purpose("run", ROUNDS, "rounds"), Purpose("run", PARTICIPATION, "participation"),
    Purpose("round", SAMPLING, "sampling"),
    Purpose("round", MASK, "mask"), Purpose("round", SERVER_NOISE, "server noise"),
    Purpose("round", CLIENTS, "clients"), Purpose("round", SECURE_AGG, "secure aggregation"),
    Purpose("round", DROPOUT, "dropouts"),
    Purpose("round", AGGREGATE_NOISE, "the cohort's noise shares, summed"),
)


def check_purposes(purposes) -> None:
  """Raises ValueError if two purposes (the core's and ``purposes``) fold the
  same integer into the same key: their draws would be one."""
  seen: dict[tuple[str, int], str] = {}
  for p in (*CORE_PURPOSES, *purposes):
    if p.level not in ("run", "round"):
      raise ValueError(f"purpose {p.name!r}: level must be 'run' or 'round', got {p.level!r}")
    taken = seen.setdefault((p.level, p.value), p.name)
    if taken != p.name:
      raise ValueError(f"purpose {p.name!r} folds {p.value} into the {p.level} key, as "
                       f"{taken!r} does")
