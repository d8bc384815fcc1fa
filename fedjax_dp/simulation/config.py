"""A run's configuration: small validated parts, composed.

:class:`RunConfig` holds the compression ratio and five parts, each a
frozen dataclass that checks its own fields: :class:`Training` (rounds,
cohort, local training), :class:`Privacy` (sigma, S, delta, accountant,
sampler), :class:`Secure` (simulated secure aggregation, thesis 5.2),
:class:`Dropouts` (client failures, thesis 5.2.5) and :class:`Execution`
(chunks, devices); then the server's sum rule (``aggregator``) and the
round's optional features (``fedjax_dp.features``: attacks, the canary
audit, adaptive clipping). Every error is a :class:`~fedjax_dp.errors.ConfigError`
naming its field, so the command line names its flag.

The defaults are the UAI 2021 Fashion-MNIST setting
(``fedjax_dp.presets.FASHION_MNIST``, UAI Table 5).
``RunConfig.of(**settings)`` builds a config from flat settings (each name
goes to the part that owns it), ``cfg.replace(**settings)`` changes some.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from fedjax_dp import aggregators, client, presets, sampling
from fedjax_dp import features as features_lib
from fedjax_dp.errors import ConfigError
from fedjax_dp.privacy import accounting, secure_aggregation
from fedjax_dp.schemes.base import LocalTraining

_UAI = presets.FASHION_MNIST

# Metrics that can pick a run's best round: accuracy (UAI Table 1) or, for
# a binary task, balanced accuracy (thesis Sec. 8.4.2-8.4.3).
SELECTION_METRICS = ("accuracy", "balanced_accuracy")


def _check(checks: list[tuple[bool, str, str]]) -> None:
  """Raises the first failed check's ConfigError((ok, field, detail) triples)."""
  for ok, field, detail in checks:
    if not ok:
      raise ConfigError(field, detail)


def _one_of(field: str, value: str, choices: tuple[str, ...]) -> tuple[bool, str, str]:
  return (value in choices, field, f"{value!r} is unknown; choose one of {', '.join(choices)}")


@dataclasses.dataclass(frozen=True)
class Training:
  """Rounds, cohort and the clients' local training (UAI Alg. 1).

  Attributes:
    rounds: T_cl.
    clients_per_round: Expected cohort size C*N.
    local_steps: T_gd.
    batch_size: |B|.
    lr: The clients' learning rate eta.
    local_optimizer: ``client.OPTIMIZERS``: sgd (UAI), adam (thesis Table 8.1).
    init_steps: T_init, the server's steps on public data (setup).
    seed: The run's root key.
    eval_every: Rounds between test evaluations.
    selection_metric: Picks the best round (``SELECTION_METRICS``).
  """

  rounds: int = _UAI["rounds"]
  clients_per_round: int = _UAI["clients_per_round"]
  local_steps: int = _UAI["local_steps"]
  batch_size: int = _UAI["batch_size"]
  lr: float = _UAI["lr"]
  local_optimizer: str = "sgd"
  init_steps: int = _UAI["init_steps"]
  seed: int = 0
  eval_every: int = 1
  selection_metric: str = "accuracy"

  def validate(self, num_clients: int) -> None:
    """Raises ConfigError naming the field."""
    _check([
        (self.rounds >= 1, "rounds", f"must be >= 1, got {self.rounds}"),
        (self.clients_per_round >= 1, "clients_per_round",
         f"must be >= 1, got {self.clients_per_round}"),
        (self.clients_per_round <= num_clients, "clients_per_round",
         f"{self.clients_per_round} exceeds the number of clients {num_clients}"),
        (self.local_steps >= 1, "local_steps", f"must be >= 1, got {self.local_steps}"),
        (self.batch_size >= 1, "batch_size", f"must be >= 1, got {self.batch_size}"),
        (self.lr > 0, "lr", f"must be > 0, got {self.lr}"),
        _one_of("local_optimizer", self.local_optimizer, client.OPTIMIZERS),
        (self.init_steps >= 1, "init_steps", f"must be >= 1, got {self.init_steps}"),
        (self.eval_every >= 1, "eval_every", f"must be >= 1, got {self.eval_every}"),
        _one_of("selection_metric", self.selection_metric, SELECTION_METRICS),
    ])

  @property
  def local(self) -> LocalTraining:
    """The client-side hyper-parameters."""
    return LocalTraining(self.local_steps, self.batch_size, self.lr, self.local_optimizer)


@dataclasses.dataclass(frozen=True)
class Privacy:
  """Client-level DP (UAI Sec. 3.2) and the sampler it is accounted for.

  Attributes:
    noise_multiplier: sigma.
    clip_norm: S; None: calibrated on public data (UAI Sec. 4).
    clip_ratio: Calibrate S as a run at this ratio would (None: the run's
      own): one S for every ratio, as Fed-SMP Sec. 6.2 tunes it.
    delta: The target delta.
    accountant: ``accounting.ACCOUNTANTS``.
    sampler: ``sampling.SAMPLERS``: poisson or fixed.
    max_cohort: Truncated Poisson sampling (PLD accounting); None: none.
  """

  noise_multiplier: float = _UAI["noise_multiplier"]
  clip_norm: float | None = None
  clip_ratio: float | None = None
  delta: float = _UAI["delta"]
  accountant: str = "moments"
  sampler: str = "poisson"
  max_cohort: int | None = None

  def validate(self) -> None:
    """Raises ConfigError naming the field."""
    _check([
        (self.noise_multiplier >= 0, "noise_multiplier",
         f"must be >= 0, got {self.noise_multiplier}"),
        (self.clip_norm is None or self.clip_norm > 0, "clip_norm",
         f"must be > 0, got {self.clip_norm}"),
        (self.clip_ratio is None or 0.0 < self.clip_ratio <= 1.0, "clip_ratio",
         f"must be in (0, 1], got {self.clip_ratio}"),
        (self.clip_ratio is None or self.clip_norm is None, "clip_ratio",
         "applies to a calibrated S; clip_norm is given"),
        (0.0 < self.delta < 1.0, "delta", f"must be in (0, 1), got {self.delta}"),
        _one_of("accountant", self.accountant, accounting.ACCOUNTANTS),
        _one_of("sampler", self.sampler, sampling.SAMPLERS),
        (self.max_cohort is None or self.max_cohort >= 1, "max_cohort",
         f"must be >= 1, got {self.max_cohort}"),
        (self.max_cohort is None or (self.sampler == "poisson" and self.accountant == "pld"),
         "max_cohort", "(truncated Poisson sampling) needs sampler 'poisson' and "
         "accountant 'pld'"),
        (self.sampler != "fixed" or self.accountant == "rdp", "accountant",
         f"{self.accountant!r} assumes Poisson sampling; use accountant 'rdp' with "
         "sampler 'fixed'"),
    ])


@dataclasses.dataclass(frozen=True)
class Secure:
  """Simulated secure aggregation (UAI 3.2.2, thesis 5.2.1 / 5.2.4).

  Attributes:
    secure_aggregation: Sum the contributions modulo 2^b.
    secure_bits: b; None: thesis 5.2.4's formula.
    secure_frac_bits: f: real contributions are fixed point, scale 2^f.
    secure_neighbours: d, ring neighbours each client shares a mask with.
  """

  secure_aggregation: bool = False
  secure_bits: int | None = None
  secure_frac_bits: int = 16
  secure_neighbours: int = 1

  def validate(self) -> None:
    """Raises ConfigError naming the field."""
    top = secure_aggregation.MAX_BITS
    _check([
        (self.secure_bits is None or 2 <= self.secure_bits <= top, "secure_bits",
         f"must be in [2, {top}], got {self.secure_bits}"),
        (0 <= self.secure_frac_bits <= 24, "secure_frac_bits",
         f"must be in [0, 24], got {self.secure_frac_bits}"),
        (self.secure_neighbours >= 1, "secure_neighbours",
         f"must be >= 1, got {self.secure_neighbours}"),
    ])


@dataclasses.dataclass(frozen=True)
class Dropouts:
  """Client failures (thesis 5.2.5; ``fedjax_dp.features.dropouts``).

  Attributes:
    max_dropouts: l: DP noise shares are sized for |K| - l clients, so the
      aggregate noise is at least S*sigma while at most l clients fail.
    dropout_rate: Each sampled client fails (sends nothing) with this
      probability, after the cohort and the masks are fixed.
  """

  max_dropouts: int = 0
  dropout_rate: float = 0.0

  def validate(self) -> None:
    """Raises ConfigError naming the field."""
    _check([
        (self.max_dropouts >= 0, "max_dropouts", f"must be >= 0, got {self.max_dropouts}"),
        (0.0 <= self.dropout_rate < 1.0, "dropout_rate",
         f"must be in [0, 1), got {self.dropout_rate}"),
    ])


@dataclasses.dataclass(frozen=True)
class Execution:
  """How the round runs, not what it computes.

  Attributes:
    client_chunk: Train and sum this many slots at a time; None:
      ``simulation.setup.default_chunk``.
    devices: Shard the cohort over this many devices; None: all.
  """

  client_chunk: int | None = None
  devices: int | None = None

  def validate(self) -> None:
    """Raises ConfigError naming the field."""
    _check([
        (self.client_chunk is None or self.client_chunk >= 1, "client_chunk",
         f"must be >= 1, got {self.client_chunk}"),
        (self.devices is None or self.devices >= 1, "devices",
         f"must be >= 1, got {self.devices}"),
    ])


_PARTS = {"training": Training, "privacy": Privacy, "secure": Secure, "dropouts": Dropouts,
          "execution": Execution}


@dataclasses.dataclass(frozen=True)
class RunConfig:
  """A run's hyper-parameters: the ratio and its parts.

  Attributes:
    ratio: r, the compression ratio.
    training: :class:`Training`.
    privacy: :class:`Privacy`.
    secure: :class:`Secure`.
    dropouts: :class:`Dropouts`.
    execution: :class:`Execution`.
    aggregator: A robust rule over the individual updates (thesis Sec.
      3.3.2, ``fedjax_dp.aggregators``); None: the plain sum.
    features: The round's optional features, each a feature config of
      ``fedjax_dp.features`` (``AttackConfig``, ``AuditConfig``,
      ``AdaptiveClipConfig``), at most one of each kind.
  """

  ratio: float = 0.005
  training: Training = Training()
  privacy: Privacy = Privacy()
  secure: Secure = Secure()
  dropouts: Dropouts = Dropouts()
  execution: Execution = Execution()
  aggregator: aggregators.AggregatorConfig | None = None
  features: tuple = ()

  @classmethod
  def of(cls, **settings: Any) -> "RunConfig":
    """A config from flat settings: each name goes to the part that owns it.

    ``RunConfig.of(ratio=0.01, rounds=50, noise_multiplier=1.1)``; feature
    configs may be passed by their kind (``attack=AttackConfig(...)``,
    ``audit=...``, ``adaptive_clip=...``) or as ``features=(...)``.
    """
    return cls().replace(**settings)

  def replace(self, **settings: Any) -> "RunConfig":
    """This config with the named settings changed (flat names, as :meth:`of`)."""
    top, parts, kinds = {}, {name: {} for name in _PARTS}, {}
    for name, value in settings.items():
      owner = _OWNER.get(name)
      if owner is not None:
        parts[owner][name] = value
      elif name in features_lib.KINDS:
        kinds[name] = value
      elif name in ("ratio", "aggregator", "features", *_PARTS):
        top[name] = value
      else:
        raise TypeError(f"RunConfig has no setting {name!r}")
    for owner, changed in parts.items():
      if changed:
        top[owner] = dataclasses.replace(top.get(owner, getattr(self, owner)), **changed)
    new = dataclasses.replace(self, **top)
    if kinds:
      new = dataclasses.replace(new, features=features_lib.with_kinds(new.features, kinds))
    features_lib.check_unique(new.features)  # each a registered kind, once
    return new

  def feature(self, kind: str):
    """The feature config of this kind (``fedjax_dp.features.KINDS``), or None."""
    return features_lib.find(self.features, kind)

  def flat(self) -> dict:
    """Every setting by its flat name (the checkpoint's fingerprint)."""
    out = {"ratio": self.ratio}
    for name in _PARTS:
      out.update(dataclasses.asdict(getattr(self, name)))
    out["aggregator"] = None if self.aggregator is None else dataclasses.asdict(self.aggregator)
    for config in self.features:
      kind = features_lib.kind_of(config)
      out[kind] = dataclasses.asdict(config)
    return out

  def validate(self, num_clients: int) -> None:
    """Raises ConfigError (one line naming the field) for a bad setting."""
    _check([(0.0 < self.ratio <= 1.0, "ratio", f"must be in (0, 1], got {self.ratio}")])
    self.training.validate(num_clients)
    self.privacy.validate()
    self.secure.validate()
    self.dropouts.validate()
    self.execution.validate()
    if self.aggregator is not None:
      self.aggregator.validate()
    features_lib.check_unique(self.features)

  def rate(self, num_clients: int) -> float:
    """q = C = clients_per_round / N."""
    return self.training.clients_per_round / num_clients

  @property
  def local(self) -> LocalTraining:
    """The client-side hyper-parameters."""
    return self.training.local


_OWNER = {f.name: part for part, cls in _PARTS.items() for f in dataclasses.fields(cls)}
