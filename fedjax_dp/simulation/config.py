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
(``fedjax_dp.data.settings.FASHION_MNIST``, UAI Table 5).
``RunConfig.of(**settings)`` builds a config from flat settings (each name
goes to the part that owns it), ``cfg.replace(**settings)`` changes some.
Each field declares its option (``fedjax_dp.options.setting``: its flag,
parser and help; its default is the field's), which
:func:`option_groups` hands to a front end; the command line's flags, help
and error messages are built from them. A run is resolved once, by
``simulation.setup.prepare``, into a ``simulation.Plan``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from fedjax_dp import aggregators, keys, local_training, options, sampling
from fedjax_dp import features as features_lib
from fedjax_dp.data import settings as data_settings
from fedjax_dp.errors import ConfigError
from fedjax_dp.options import setting
from fedjax_dp.privacy import accounting, monte_carlo, secure_aggregation
from fedjax_dp.schemes.base import LocalTraining

_UAI = data_settings.FASHION_MNIST

# Metrics that can pick a run's best round: accuracy (UAI Table 1) or, for
# a binary task, balanced accuracy (thesis Sec. 8.4.2-8.4.3).
SELECTION_METRICS = ("accuracy", "balanced_accuracy")


def _check_bins(num_clients: int, clients_per_round: int, bins: int) -> None:
  """Balls-in-bins takes one of B bins a round, N / B clients on average: the
  DP mean divides by C N, which that is only when B = N / (C N) is whole
  (600 clients at 250 a round made 2 bins of 300)."""
  if abs(num_clients / clients_per_round - bins) <= 1e-9:
    return
  whole = {c for d in range(1, math.isqrt(num_clients) + 1) if num_clients % d == 0
           for c in (d, num_clients // d)}  # the cohorts of whole bins: N's divisors
  near = [max((c for c in whole if c < clients_per_round), default=None),
          min((c for c in whole if c > clients_per_round), default=None)]
  raise ConfigError("clients_per_round", f"balls-in-bins takes one of N / |K| bins a round: "
                    f"{num_clients} / {clients_per_round} = "
                    f"{num_clients / clients_per_round:.4g} is not a whole number of bins "
                    f"(try {' or '.join(str(c) for c in near if c is not None)} clients a "
                    "round)")


def _check(checks: list[tuple[bool, str, str]]) -> None:
  """Raises the first failed check's ConfigError((ok, field, detail) triples)."""
  for ok, field, detail in checks:
    if not ok:
      raise ConfigError(field, detail)


def _one_of(field: str, value: str, choices: tuple[str, ...]) -> tuple[bool, str, str]:
  return (value in choices, field, f"{value!r} is unknown; choose one of {', '.join(choices)}")


# Round counters and client ids are int32.
INT32_MAX = 2**31 - 1


@dataclasses.dataclass(frozen=True)
class Training:
  """Rounds, cohort and the clients' local training (UAI Alg. 1).

  Attributes:
    rounds: T_cl.
    clients_per_round: Expected cohort size C*N.
    local_steps: T_gd.
    batch_size: |B|.
    lr: The clients' learning rate eta.
    local_optimizer: ``local_training.OPTIMIZERS``: sgd (UAI), adam (thesis Table 8.1).
    init_steps: T_init, the server's steps on public data (setup).
    seed: The run's root key.
    eval_every: Rounds between test evaluations.
    selection_metric: Picks the best round (``SELECTION_METRICS``).
  """

  rounds: int = setting(_UAI["rounds"], "T_cl, the rounds", int, preset="scheme")
  clients_per_round: int = setting(
      _UAI["clients_per_round"], "expected |K| = C*N, or 'all' (C = 1)", options.cohort,
      preset="scheme")
  local_steps: int = setting(_UAI["local_steps"], "T_gd, local steps", int, preset="scheme")
  batch_size: int = setting(_UAI["batch_size"], "|B|, the local batch size", int,
                            preset="scheme")
  lr: float = setting(_UAI["lr"], "the clients' learning rate eta", options.number,
                      preset="scheme")
  local_optimizer: str = setting(
      "sgd", "the clients' optimiser, its state fresh every round: sgd (the UAI paper's) "
      "or adam (thesis Table 8.1: CIFAR-10, IMDB; Keras' epsilon 1e-7)",
      choices=local_training.OPTIMIZERS, preset="dataset")
  init_steps: int = setting(_UAI["init_steps"], "T_init, the server's public-data steps "
                            "(Top-K selection, calibration)", int, preset="dataset")
  seed: int = setting(0, "the seed of every random draw", options.seed)
  eval_every: int = setting(1, "evaluate the test metrics every k rounds", int)
  selection_metric: str = "accuracy"

  def validate(self, num_clients: int) -> None:
    """Raises ConfigError naming the field."""
    _check([
        (self.rounds >= 1, "rounds", f"must be >= 1, got {self.rounds}"),
        (self.rounds <= INT32_MAX, "rounds",  # the round counter is int32
         f"must be at most {INT32_MAX}, got {self.rounds}"),
        (self.clients_per_round >= 1, "clients_per_round",
         f"must be >= 1, got {self.clients_per_round}"),
        (self.clients_per_round <= num_clients, "clients_per_round",
         f"{self.clients_per_round} exceeds the number of clients {num_clients}"),
        (self.local_steps >= 1, "local_steps", f"must be >= 1, got {self.local_steps}"),
        (self.batch_size >= 1, "batch_size", f"must be >= 1, got {self.batch_size}"),
        (self.lr > 0, "lr", f"must be > 0, got {self.lr}"),
        _one_of("local_optimizer", self.local_optimizer, local_training.OPTIMIZERS),
        (self.init_steps >= 1, "init_steps", f"must be >= 1, got {self.init_steps}"),
        (0 <= self.seed < keys.SEED_LIMIT, "seed", f"must be in [0, 2**63), got {self.seed}"),
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
    clip_norm: S; None: calibrated on public data (UAI Sec. 4). A scheme of
      fixed sensitivity (FL-SIGN-DP's sqrt(n)) uses its own
      (``simulation.setup.clip_norm_of``).
    clip_ratio: Calibrate S as a run at this ratio would (None: the run's
      own): one S for every ratio, as Fed-SMP Sec. 6.2 tunes it.
    delta: The target delta.
    accountant: ``accounting.RUN_ACCOUNTANTS``: moments, rdp, pld or
      monte-carlo (``fedjax_dp.privacy.monte_carlo``; balls-in-bins and
      b-min-sep need it).
    sampler: ``sampling.SAMPLERS``: poisson, fixed, balls-in-bins or b-min-sep.
    max_cohort: Truncated Poisson sampling (PLD accounting); None: none.
    cycle_length: b, cyclic Poisson sampling over b groups of clients
      (``sampling``'s module docstring; amplified banded matrix
      factorization); 1: plain Poisson sampling.
    min_separation: The fewest rounds between two participations of a
      client: b-min-sep's b (required there); under cyclic Poisson or
      balls-in-bins sampling, the separation correlated noise assumes (at
      most what they keep, ``cycle_length`` or 1/q; None: that); None
      otherwise.
    mc_samples: Monte Carlo accounting's draws of each direction.
    mc_confidence: The probability with which its epsilon bound holds.
    mc_seed: The seed of its draws (the record's; calibration uses the next).
    target_epsilon: Calibrate sigma so that the run's epsilon after its
      last round is at most this, under its accountant and sampler
      (``simulation.record.calibrated_sigma``); None: sigma as given.
  """

  noise_multiplier: float = setting(_UAI["noise_multiplier"], "sigma of DP schemes",
                                    options.number, preset="dataset")
  clip_norm: float | None = setting(
      None, "the clip norm S: a number, 'calibrate' (a public-data round, UAI Sec. 4; the "
      "default) or 'paper' (UAI Table 6, calibrating where it has none)", options.clip,
      name="clip")
  clip_ratio: float | None = setting(
      None, "calibrate S once as at this ratio and use it at every ratio of the sweep "
      "(Fed-SMP Sec. 6.2: one S for all ratios); default: each run's own ratio",
      options.number)
  delta: float = setting(_UAI["delta"], "delta", options.number, preset="dataset")
  accountant: str = setting(
      "moments", "moments (the papers' method), rdp or pld (dp-accounting), or monte-carlo "
      "(amplified correlated noise: an upper bound that holds with probability "
      "--mc-confidence; docs/correlated-noise.md)", choices=accounting.RUN_ACCOUNTANTS)
  sampler: str = setting(
      "poisson", "poisson (epsilon valid), fixed (the papers' literal fixed-size cohorts; "
      "needs --accountant rdp), balls-in-bins (each client in one of 1/q bins, drawn "
      "once; round t takes bin (t - 1) mod 1/q) or b-min-sep (a client joins with "
      "probability p only if it did not in the last b - 1 rounds, b = --min-separation); "
      "the last two need --accountant monte-carlo", name="sampling",
      choices=sampling.SAMPLERS)
  max_cohort: int | None = setting(
      None, "cap the Poisson cohort at B clients (truncated Poisson sampling: a random B "
      "of the sampled clients; accounted with --accountant pld)", int)
  cycle_length: int = setting(
      1, "cyclic Poisson sampling: the clients form B groups (B at most 1/q), round t samples "
      "group (t - 1) mod B at rate B q, so a client's rounds are at least B apart (the "
      "min-separation of --noise banded/blt); 1: plain Poisson sampling", options.positive_int)
  min_separation: int | None = setting(
      None, "the fewest rounds between two participations of a client: b of --sampling "
      "b-min-sep (required there); with --cycle-length B or --sampling balls-in-bins (B = "
      "1/q), the separation --noise banded/blt assumes (at most B; default B)",
      options.positive_int)
  mc_samples: int = setting(monte_carlo.DEFAULT_SAMPLES, "--accountant monte-carlo: draws "
                            "of each direction of the dominating pair",
                            options.positive_int)
  mc_confidence: float = setting(monte_carlo.DEFAULT_CONFIDENCE, "--accountant monte-carlo: "
                                 "the probability with which its epsilon bound holds",
                                 options.number)
  mc_seed: int = setting(0, "--accountant monte-carlo: the seed of its draws (kept in the "
                         "record)", options.seed)
  target_epsilon: float | None = setting(
      None, "calibrate sigma of DP schemes so that the run's epsilon after its last round "
      "is at most this, under its --accountant and --sampling (overrides "
      "--noise-multiplier; to 1e-4, Monte Carlo 1e-3, rounded up)", options.number)

  def validate(self) -> None:
    """Raises ConfigError naming the field."""
    fewest = (monte_carlo.fewest_samples(self.delta, self.mc_confidence)
              if 0.0 < self.delta < 1.0 and 0.0 < self.mc_confidence < 1.0 else 0)
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
        # Calibration draws from mc_seed + 1 (record.calibrated_sigma).
        (0 <= self.mc_seed < keys.SEED_LIMIT - 1, "mc_seed",
         f"must be in [0, 2**63 - 1), got {self.mc_seed}"),
        _one_of("accountant", self.accountant, accounting.RUN_ACCOUNTANTS),
        _one_of("sampler", self.sampler, sampling.SAMPLERS),
        (self.max_cohort is None or self.max_cohort >= 1, "max_cohort",
         f"must be >= 1, got {self.max_cohort}"),
        (self.max_cohort is None or (self.sampler == "poisson" and self.accountant == "pld"),
         "max_cohort", "(truncated Poisson sampling) needs sampler 'poisson' and "
         "accountant 'pld'"),
        (self.cycle_length == 1 or (self.sampler == "poisson" and self.max_cohort is None),
         "cycle_length", "(cyclic Poisson sampling) needs sampler 'poisson' and no "
         "max_cohort"),
        (self.sampler not in sampling.SCHEDULED or self.accountant == accounting.MONTE_CARLO,
         "accountant", f"{self.accountant!r} cannot account {self.sampler} sampling; use "
         "--accountant monte-carlo"),
        (self.accountant != accounting.MONTE_CARLO or (
            self.sampler in ("poisson",) + sampling.SCHEDULED and self.cycle_length == 1
            and self.max_cohort is None), "accountant",
         "monte-carlo accounts poisson, balls-in-bins and b-min-sep sampling without "
         "--cycle-length or --max-cohort"),
        (self.sampler != "b-min-sep" or self.min_separation is not None, "min_separation",
         "is b of --sampling b-min-sep; give it"),
        (self.min_separation is None or self.sampler in sampling.SCHEDULED
         or self.cycle_length > 1, "min_separation",
         "needs --sampling b-min-sep, --sampling balls-in-bins or --cycle-length"),
        (self.min_separation is None or self.cycle_length == 1
         or self.min_separation <= self.cycle_length, "min_separation",
         f"{self.min_separation} rounds between a client's participations are not what "
         f"the sampler guarantees: --cycle-length {self.cycle_length} (cyclic Poisson "
         f"sampling) keeps them {self.cycle_length} apart"),
        (self.target_epsilon is None or self.target_epsilon > 0, "target_epsilon",
         f"must be > 0, got {self.target_epsilon}"),
        (0.0 < self.mc_confidence < 1.0, "mc_confidence",
         f"must be in (0, 1), got {self.mc_confidence}"),
        (self.accountant != accounting.MONTE_CARLO or self.mc_samples >= fewest,
         "mc_samples", f"{self.mc_samples} draws cannot bound delta {self.delta:g} with "
         f"probability {self.mc_confidence:g}: at least {fewest} are needed (the default "
         f"{monte_carlo.DEFAULT_SAMPLES} bounds epsilon 1 at delta 1e-5 within about 0.05)"),
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

  secure_aggregation: bool = setting(
      False, "sum every DP scheme's (and FL-SIGN's, signSGD's) messages under simulated "
      "secure aggregation: fixed-point encoding, pairwise masks mod 2^b; overflows are "
      "counted and reported", bool)
  secure_bits: int | None = setting(
      None, "b, bits per value (default: thesis 5.2.4, ceil(log2((12 S sigma + max|x|) "
      "|K| 2^f)); 22 for FL-SIGN-DP)", int)
  secure_frac_bits: int = setting(16, "f, fractional bits of the fixed-point encoding of "
                                  "real updates", int)
  secure_neighbours: int = setting(1, "d: each client shares masks with its d ring "
                                   "neighbours on each side (results do not depend on it)",
                                   int)

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

  max_dropouts: int = setting(0, "l: DP noise shares sized for |K| - l clients, so the "
                              "noise stays >= S*sigma if up to l clients fail", int)
  dropout_rate: float = setting(0.0, "each sampled client fails before sending with this "
                                "probability", options.number)

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

  client_chunk: int | None = setting(
      None, "train and sum the cohort this many clients at a time; a chunk of padding "
      "slots only is skipped (default: simulation.default_chunk's choice, "
      "docs/performance.md)", int)
  devices: int | None = setting(None, "shard each cohort's clients over this many devices "
                                "(default: every device JAX sees)", options.positive_int)

  def validate(self) -> None:
    """Raises ConfigError naming the field."""
    _check([
        (self.client_chunk is None or self.client_chunk >= 1, "client_chunk",
         f"must be >= 1, got {self.client_chunk}"),
        (self.devices is None or self.devices >= 1, "devices",
         f"must be >= 1, got {self.devices}"),
    ])


_TITLES = {
    "training": "training (the scheme's preset, else the data set's setting; UAI Table 5)",
    "privacy": "privacy (client-level DP, docs/privacy.md)",
    "secure": "secure aggregation (UAI Sec. 3.2.2; thesis 5.2.4)",
    "dropouts": "client failures (thesis 5.2.5)",
    "execution": "execution (docs/performance.md)",
}

# RunConfig's parts by field name (a front end builds each from its declared options).
PARTS = {"training": Training, "privacy": Privacy, "secure": Secure, "dropouts": Dropouts,
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
    top, parts, kinds = {}, {name: {} for name in PARTS}, {}
    for name, value in settings.items():
      owner = _OWNER.get(name)
      if owner is not None:
        parts[owner][name] = value
      elif name in features_lib.KINDS:
        kinds[name] = value
      elif name in ("ratio", "aggregator", "features", *PARTS):
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

  def fingerprint(self) -> dict:
    """The nested config as plain data, features by kind (the checkpoint's
    fingerprint)."""
    out = {"ratio": self.ratio, "aggregator": None if self.aggregator is None
           else dataclasses.asdict(self.aggregator)}
    for name in PARTS:
      out[name] = dataclasses.asdict(getattr(self, name))
    out["features"] = {features_lib.kind_of(c): dataclasses.asdict(c) for c in self.features}
    return out

  def flat(self) -> dict:
    """Every setting by its flat name."""
    out = {"ratio": self.ratio}
    for name in PARTS:
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
    priv = self.privacy
    if priv.cycle_length * self.rate(num_clients) > 1.0 + 1e-9:
      most = int(num_clients // self.training.clients_per_round)
      raise ConfigError("cycle_length", f"{priv.cycle_length} makes groups of "
                        f"{num_clients / priv.cycle_length:g} clients, fewer than the "
                        f"{self.training.clients_per_round} a round asks (a round samples "
                        f"one group, at rate min(1, B q)): at most {most}, where each round "
                        "takes one whole group")
    bins = sampling.bins_for(self.rate(num_clients))
    if priv.sampler == "balls-in-bins":
      _check_bins(num_clients, self.training.clients_per_round, bins)
    if priv.sampler == "balls-in-bins" and (priv.min_separation or 1) > bins:
      raise ConfigError("min_separation", f"{priv.min_separation} rounds between a client's "
                        f"participations are not what the sampler guarantees: balls-in-bins "
                        f"keeps them {bins} apart")
    if priv.sampler == "b-min-sep" and priv.min_separation > (
        num_clients / self.training.clients_per_round + 1e-9):
      raise ConfigError("min_separation", f"b = {priv.min_separation} of b-min-sep cannot keep "
                        f"{self.training.clients_per_round} of {num_clients} clients a round "
                        f"(b is at most N / |K| = "
                        f"{num_clients / self.training.clients_per_round:g})")
    self.secure.validate()
    self.dropouts.validate()
    self.execution.validate()
    if self.aggregator is not None:
      self.aggregator.validate()
    features_lib.check_unique(self.features)

  def rate(self, num_clients: int) -> float:
    """q = C = clients_per_round / N."""
    return self.training.clients_per_round / num_clients

  def separation(self, num_clients: int) -> int:
    """The fewest rounds between two participations of a client that
    correlated noise assumes: ``min_separation`` where given (b-min-sep's b;
    at most what balls-in-bins or cyclic Poisson sampling guarantee), else
    what the sampling guarantees: balls-in-bins' B = round(1/q), cyclic
    Poisson's cycle; 1 otherwise."""
    priv = self.privacy
    if priv.min_separation is not None:
      return priv.min_separation
    if priv.sampler == "balls-in-bins":
      return sampling.bins_for(self.rate(num_clients))
    return priv.cycle_length

  @property
  def local(self) -> LocalTraining:
    """The client-side hyper-parameters."""
    return self.training.local


_OWNER = {f.name: part for part, cls in PARTS.items() for f in dataclasses.fields(cls)}


def option_groups() -> tuple[tuple[str, tuple[options.Option, ...]], ...]:
  """(title, options) of each part of a RunConfig, as its fields declare them
  (``fedjax_dp.options.setting``): a front end's controls, and the flag of
  each field a :class:`ConfigError` names."""
  return tuple((_TITLES[name], options.declared(cls)) for name, cls in PARTS.items())
