"""A run's configuration (``simulation.config``): each part's checks, flat
settings routed to their parts, and what a config says of itself."""

import dataclasses
import json
import math

import pytest

from fedjax_dp import aggregators, features, options
from fedjax_dp.errors import ConfigError
from fedjax_dp.features.adaptive_clip import AdaptiveClipConfig
from fedjax_dp.privacy import monte_carlo
from fedjax_dp.schemes.base import LocalTraining
from fedjax_dp.simulation import config as config_lib
from fedjax_dp.simulation.config import RunConfig

N = 600  # clients; 10 a round is q = 1/60
MC = dict(accountant="monte-carlo")
# Too few Monte Carlo draws for delta 1e-5 at confidence 0.99: ln(2 / 0.01) / 1e-5.
FEWEST = math.ceil(math.log(200) / 1e-5)

# (settings, field, the message after the field): one case per check, each
# failing that check alone (or first).
BAD = [
    # RunConfig and Training.
    (dict(ratio=0.0), "ratio", "must be in (0, 1], got 0.0"),
    (dict(ratio=1.5), "ratio", "must be in (0, 1], got 1.5"),
    (dict(rounds=0), "rounds", "must be >= 1, got 0"),
    (dict(clients_per_round=0), "clients_per_round", "must be >= 1, got 0"),
    (dict(clients_per_round=N + 1), "clients_per_round",
     "601 exceeds the number of clients 600"),
    (dict(local_steps=0), "local_steps", "must be >= 1, got 0"),
    (dict(batch_size=0), "batch_size", "must be >= 1, got 0"),
    (dict(lr=0.0), "lr", "must be > 0, got 0.0"),
    (dict(local_optimizer="adagrad"), "local_optimizer",
     "'adagrad' is unknown; choose one of sgd, adam"),
    (dict(init_steps=0), "init_steps", "must be >= 1, got 0"),
    (dict(eval_every=0), "eval_every", "must be >= 1, got 0"),
    (dict(selection_metric="auroc"), "selection_metric",
     "'auroc' is unknown; choose one of accuracy, balanced_accuracy"),
    # Privacy.
    (dict(noise_multiplier=-0.5), "noise_multiplier", "must be >= 0, got -0.5"),
    (dict(clip_norm=0.0), "clip_norm", "must be > 0, got 0.0"),
    (dict(clip_ratio=0.0), "clip_ratio", "must be in (0, 1], got 0.0"),
    (dict(clip_ratio=0.5, clip_norm=1.0), "clip_ratio",
     "applies to a calibrated S; clip_norm is given"),
    (dict(delta=1.0), "delta", "must be in (0, 1), got 1.0"),
    (dict(accountant="gdp"), "accountant",
     "'gdp' is unknown; choose one of moments, rdp, pld, monte-carlo"),
    (dict(sampler="shuffle"), "sampler",
     "'shuffle' is unknown; choose one of poisson, fixed, balls-in-bins, b-min-sep"),
    (dict(max_cohort=0, accountant="pld"), "max_cohort", "must be >= 1, got 0"),
    (dict(max_cohort=6), "max_cohort",
     "(truncated Poisson sampling) needs sampler 'poisson' and accountant 'pld'"),
    (dict(cycle_length=2, max_cohort=6, accountant="pld"), "cycle_length",
     "(cyclic Poisson sampling) needs sampler 'poisson' and no max_cohort"),
    (dict(sampler="balls-in-bins"), "accountant",
     "'moments' cannot account balls-in-bins sampling; use --accountant monte-carlo"),
    (dict(MC, sampler="fixed"), "accountant",
     "monte-carlo accounts poisson, balls-in-bins and b-min-sep sampling without "
     "--cycle-length or --max-cohort"),
    (dict(MC, cycle_length=2), "accountant",
     "monte-carlo accounts poisson, balls-in-bins and b-min-sep sampling without "
     "--cycle-length or --max-cohort"),
    (dict(MC, sampler="b-min-sep"), "min_separation", "is b of --sampling b-min-sep; give it"),
    (dict(min_separation=2), "min_separation",
     "needs --sampling b-min-sep, --sampling balls-in-bins or --cycle-length"),
    (dict(min_separation=5, cycle_length=3), "min_separation",
     "5 rounds between a client's participations are not what the sampler guarantees: "
     "--cycle-length 3 (cyclic Poisson sampling) keeps them 3 apart"),
    # Cyclic groups of fewer clients than a round asks: B q <= 1.
    (dict(clients_per_round=10, cycle_length=61), "cycle_length",
     "61 makes groups of 9.83607 clients, fewer than the 10 a round asks (a round samples "
     "one group, at rate min(1, B q)): at most 60, where each round takes one whole group"),
    (dict(target_epsilon=0.0), "target_epsilon", "must be > 0, got 0.0"),
    (dict(seed=2 ** 63), "seed", f"must be in [0, 2**63), got {2 ** 63}"),
    (dict(mc_seed=-1), "mc_seed", "must be in [0, 2**63 - 1), got -1"),
    (dict(mc_confidence=1.0), "mc_confidence", "must be in (0, 1), got 1.0"),
    (dict(MC, mc_samples=FEWEST - 1, delta=1e-5, mc_confidence=0.99), "mc_samples",
     f"{FEWEST - 1} draws cannot bound delta 1e-05 with probability 0.99: at least "
     f"{FEWEST} are needed (the default {monte_carlo.DEFAULT_SAMPLES} bounds epsilon 1 at "
     "delta 1e-5 within about 0.05)"),
    (dict(sampler="fixed"), "accountant",
     "'moments' assumes Poisson sampling; use accountant 'rdp' with sampler 'fixed'"),
    # The sampler's guarantee against the run's rate: q = 10/600 keeps 60 apart.
    (dict(MC, sampler="balls-in-bins", clients_per_round=10, min_separation=61),
     "min_separation", "61 rounds between a client's participations are not what the "
     "sampler guarantees: balls-in-bins keeps them 60 apart"),
    # Balls-in-bins' cohorts average N / B, the DP mean's C N only for whole B.
    (dict(MC, sampler="balls-in-bins", clients_per_round=250), "clients_per_round",
     "balls-in-bins takes one of N / |K| bins a round: 600 / 250 = 2.4 is not a whole "
     "number of bins (try 200 or 300 clients a round)"),
    (dict(MC, sampler="b-min-sep", clients_per_round=10, min_separation=61),
     "min_separation", "b = 61 of b-min-sep cannot keep 10 of 600 clients a round "
     "(b is at most N / |K| = 60)"),
    # Secure, Dropouts, Execution, the aggregator.
    (dict(secure_bits=1), "secure_bits", "must be in [2, 31], got 1"),
    (dict(secure_bits=32), "secure_bits", "must be in [2, 31], got 32"),
    (dict(secure_frac_bits=25), "secure_frac_bits", "must be in [0, 24], got 25"),
    (dict(secure_neighbours=0), "secure_neighbours", "must be >= 1, got 0"),
    (dict(max_dropouts=-1), "max_dropouts", "must be >= 0, got -1"),
    (dict(dropout_rate=1.0), "dropout_rate", "must be in [0, 1), got 1.0"),
    (dict(client_chunk=0), "client_chunk", "must be >= 1, got 0"),
    (dict(devices=0), "devices", "must be >= 1, got 0"),
    (dict(aggregator=aggregators.AggregatorConfig(name="mode")), "aggregator",
     "'mode' is unknown; choose one of " + ", ".join(aggregators.AGGREGATORS)),
]


@pytest.mark.parametrize("settings, field, detail", BAD,
                         ids=[f"{c[1]}-{i}" for i, c in enumerate(BAD)])
def test_each_check_names_its_field_in_one_line(settings, field, detail):
  with pytest.raises(ConfigError) as error:
    RunConfig.of(**settings).validate(N)
  assert error.value.field == field and error.value.detail == detail
  assert str(error.value) == f"{field} {detail}" and "\n" not in str(error.value)


# Each check's edge, accepted: the boundary values of the ranges above.
GOOD = [
    dict(ratio=1.0), dict(clients_per_round=N), dict(clip_ratio=1.0), dict(noise_multiplier=0.0),
    dict(secure_bits=2), dict(secure_bits=31), dict(secure_frac_bits=0),
    dict(secure_frac_bits=24), dict(dropout_rate=0.0), dict(max_dropouts=0),
    dict(max_cohort=1, accountant="pld"), dict(sampler="fixed", accountant="rdp"),
    dict(cycle_length=3, min_separation=3), dict(clients_per_round=10, cycle_length=60),
    dict(MC, mc_samples=FEWEST, mc_confidence=0.99),
    dict(MC, sampler="balls-in-bins", clients_per_round=10, min_separation=60),
    dict(MC, sampler="b-min-sep", clients_per_round=10, min_separation=60),
    dict(selection_metric="balanced_accuracy"), dict(local_optimizer="adam"),
]


@pytest.mark.parametrize("settings", GOOD, ids=lambda s: "-".join(map(str, s.items())))
def test_the_edges_of_each_range_are_accepted(settings):
  cfg = RunConfig.of(**settings)
  assert cfg.validate(N) is None  # accepted: no ConfigError
  flat = cfg.flat()
  assert {k: flat[k] for k in settings} == settings  # each edge value kept in its part


def test_the_default_config_is_valid_with_as_many_clients_as_its_cohort():
  default = RunConfig()
  default.validate(default.training.clients_per_round)
  with pytest.raises(ConfigError, match="exceeds the number of clients"):
    default.validate(default.training.clients_per_round - 1)


def test_of_routes_each_flat_name_to_its_part():
  cfg = RunConfig.of(ratio=0.1, rounds=3, lr=0.5, noise_multiplier=1.1, sampler="fixed",
                     secure_bits=12, dropout_rate=0.2, client_chunk=8)
  assert cfg.ratio == 0.1
  assert cfg.training == config_lib.Training(rounds=3, lr=0.5)
  assert cfg.privacy == config_lib.Privacy(noise_multiplier=1.1, sampler="fixed")
  assert cfg.secure == config_lib.Secure(secure_bits=12)
  assert cfg.dropouts == config_lib.Dropouts(dropout_rate=0.2)
  assert cfg.execution == config_lib.Execution(client_chunk=8)
  assert cfg.aggregator is None and cfg.features == ()


def test_replace_changes_only_the_named_settings():
  cfg = RunConfig.of(rounds=3, lr=0.5, clip_norm=2.0)
  new = cfg.replace(lr=0.25)
  assert new.training == dataclasses.replace(cfg.training, lr=0.25)
  assert new.privacy is cfg.privacy and cfg.training.lr == 0.5  # the original kept
  # A whole part, and a flat setting of it on top of the part given.
  part = cfg.replace(training=config_lib.Training(rounds=7), lr=0.1)
  assert part.training == config_lib.Training(rounds=7, lr=0.1)


def test_an_unknown_setting_is_a_type_error():
  with pytest.raises(TypeError, match="^RunConfig has no setting 'learning_rate'$"):
    RunConfig.of(learning_rate=0.1)


def test_the_flat_names_are_unique_over_the_parts():
  """``of`` sends a name to one part: no two parts (nor the top level, nor a
  feature kind) share a field name."""
  names = [f.name for cls in config_lib.PARTS.values() for f in dataclasses.fields(cls)]
  top = ["ratio", "aggregator", "features", *config_lib.PARTS, *features.KINDS]
  assert len(set(names)) == len(names) and not set(names) & set(top)


def test_flat_has_every_setting_and_rebuilds_the_config():
  clip = AdaptiveClipConfig(clip_lr=0.1)
  cfg = RunConfig.of(ratio=0.2, rounds=4, delta=1e-3, secure_aggregation=True,
                     max_dropouts=2, devices=1, adaptive_clip=clip,
                     aggregator=aggregators.AggregatorConfig(name="median"))
  flat = cfg.flat()
  fields = {f.name for cls in config_lib.PARTS.values() for f in dataclasses.fields(cls)}
  assert set(flat) == fields | {"ratio", "aggregator", "adaptive_clip"}
  assert flat["adaptive_clip"] == dataclasses.asdict(clip)
  assert flat["aggregator"]["name"] == "median"
  settings = {k: v for k, v in flat.items() if k in fields or k == "ratio"}
  rebuilt = RunConfig.of(**settings, aggregator=cfg.aggregator, adaptive_clip=clip)
  assert rebuilt == cfg


def test_the_fingerprint_is_nested_plain_data_that_tells_configs_apart():
  cfg = RunConfig.of(rounds=4, adaptive_clip=AdaptiveClipConfig())
  fingerprint = cfg.fingerprint()
  assert set(fingerprint) == {"ratio", "aggregator", "features", *config_lib.PARTS}
  assert fingerprint["training"]["rounds"] == 4
  assert set(fingerprint["features"]) == {"adaptive_clip"}
  assert json.loads(json.dumps(fingerprint)) == fingerprint  # JSON as it is
  assert RunConfig.of(rounds=4, adaptive_clip=AdaptiveClipConfig()).fingerprint() == fingerprint
  for change in (dict(rounds=5), dict(seed=1), dict(mc_seed=1), dict(adaptive_clip=None),
                 dict(aggregator=aggregators.AggregatorConfig(name="median"))):
    assert cfg.replace(**change).fingerprint() != fingerprint, change


@pytest.mark.parametrize("cohort, settings, separation", [
    (10, dict(), 1),                                           # Poisson: no guarantee
    (10, dict(cycle_length=4), 4),                             # cyclic: the cycle
    (10, dict(cycle_length=4, min_separation=2), 2),           # the one given
    (10, dict(MC, sampler="balls-in-bins"), 60),               # round(1 / q) = 600 / 10
    (7, dict(MC, sampler="balls-in-bins"), 86),                # round(600 / 7 = 85.7)
    (10, dict(MC, sampler="b-min-sep", min_separation=5), 5),  # b
])
def test_rate_and_separation(cohort, settings, separation):
  cfg = RunConfig.of(clients_per_round=cohort, **settings)
  assert cfg.rate(N) == cohort / N
  assert cfg.separation(N) == separation


def test_local_is_the_clients_training():
  cfg = RunConfig.of(local_steps=3, batch_size=7, lr=0.05, local_optimizer="adam")
  assert cfg.local == LocalTraining(3, 7, 0.05, "adam") == cfg.training.local


def test_option_groups_declare_each_parts_settings_with_their_defaults():
  """One group per part, in order; each option sets a field of its part, and
  an option without a preset defaults to the field's default."""
  groups = config_lib.option_groups()
  assert len(groups) == len(config_lib.PARTS)
  for (title, group), (name, cls) in zip(groups, config_lib.PARTS.items()):
    assert title.startswith({"dropouts": "client failures", "secure": "secure aggregation"}
                            .get(name, name))
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    assert all(isinstance(o, options.Option) and o.setting in defaults for o in group)
    for o in group:
      assert o.default == (None if o.preset else defaults[o.setting]), o.name
  declared = {o.setting for _, group in groups for o in group}
  # Every field is a setting of the command line but the selection metric (the data set's).
  assert {f for cls in config_lib.PARTS.values() for f in
          (f.name for f in dataclasses.fields(cls))} - declared == {"selection_metric"}
