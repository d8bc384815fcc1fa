"""A round feature of a research project's own, registered from test code and
run from the command line: its module plus one ``features.register`` line,
no other library file touched (issue 48, item 3)."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import pytest

from fedjax_dp import features, keys, options
from fedjax_dp.cli import sweep as experiment
from fedjax_dp.errors import ConfigError
from fedjax_dp.features import Conflict, Feature

# --- The feature's module: a config, its options, its feature class. -------------

TOY_KEY = keys.PLUGIN_BASE  # a round-level purpose of its own


@dataclasses.dataclass(frozen=True)
class ToyConfig:
  """A noisy count of the sampled clients, scaled."""

  scale: float = options.setting(1.0, "the count's scale", options.number, name="toy_scale")
  label: str = options.setting("toy", "a name in the record", name="toy_label")

  def validate(self) -> None:
    if not self.scale > 0:
      raise ConfigError("scale", f"must be > 0, got {self.scale}")


class Toy(Feature):
  """Counts the sampled clients of every round, with a little noise."""

  kind = "toy"
  config_type = ToyConfig
  title = "toy feature (a test's)"
  switch = "toy"
  options = (options.Option("toy", bool, False, "count the sampled clients"),
             *options.declared(ToyConfig))
  conflicts = (Conflict("secure_aggregation", "secure aggregation (a test's rule)"),)
  key_purposes = (keys.Purpose("round", TOY_KEY, "the toy's noise"),)

  @classmethod
  def check(cls, config, run):
    config.validate()
    super().check(config, run)

  def init(self):
    return jnp.float32(0.0), 0

  def observe(self, at, state):
    observed = at.observed
    noise = 1e-3 * jax.random.normal(keys.purpose(observed.round_key, TOY_KEY))
    return state + self.config.scale * (jnp.sum(observed.slot_mask) + noise)

  def record(self, state, best):
    del best
    return {self.config.label: float(state)}


@pytest.fixture
def toy():
  features.register(Toy)
  yield Toy
  features.unregister("toy")


_SMALL = ["--dataset", "medical-synth", "--schemes", "FL-STD", "--rounds", "2",
          "--num-clients", "60", "--samples-per-client", "10", "--batch-size", "10",
          "--clients-per-round", "3", "--local-steps", "1", "--quiet", "--test-size", "100"]


def test_a_registered_feature_runs_from_the_command_line(toy, tmp_path, capsys):
  assert "toy feature (a test's)" in experiment.build_parser().format_help()
  out = tmp_path / "out"
  code = experiment.main([*_SMALL, "--toy", "--toy-scale", "2", "--toy-label", "count",
                          "--out", str(out)])
  assert code == 0, capsys.readouterr().err
  run = json.loads((out / "results.json").read_text())["runs"][0]
  sampled = run["mean_cohort"] * run["rounds"]
  assert run["count"] == pytest.approx(2 * sampled, abs=0.05)


def test_a_registered_features_errors_name_its_flags(toy, tmp_path, capsys):
  for args, message in (
      (["--toy-scale", "3"], "--toy-scale needs --toy"),
      (["--toy", "--toy-scale", "-1"], "--toy-scale must be > 0, got -1.0"),
      (["--toy", "--secure-aggregation", "--schemes", "FL-STD-DP"],
       "--toy cannot be combined with secure aggregation (a test's rule)")):
    out = tmp_path / "out"
    assert experiment.main([*_SMALL, *args, "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"sweep.py: error: {message}"]
    assert not out.exists()


def test_registration_refuses_a_taken_kind_a_taken_key_and_an_unknown_conflict(toy):
  with pytest.raises(ValueError, match="kind 'toy' is registered already"):
    features.register(Toy)

  class Again(Toy):
    kind = "again"
    config_type = type("AgainConfig", (), {})
    key_purposes = (keys.Purpose("round", keys.ADAPTIVE_CLIP, "a copy"),)

  with pytest.raises(ValueError, match="folds 9 into the round key"):
    features.register(Again)

  class Unknown(Toy):
    kind = "unknown"
    config_type = type("UnknownConfig", (), {})
    key_purposes = ()
    conflicts = (Conflict("no_such_setting", "nothing"),)

  with pytest.raises(ValueError, match="neither a feature kind nor a RunView field"):
    features.register(Unknown)
  assert set(features.KINDS) == {"attack", "audit", "adaptive_clip", "correlated_noise", "toy"}


def test_every_declared_key_purpose_is_distinct():
  """The core's and the registered features' purposes fold distinct integers."""
  declared = [p for f in features.REGISTRY.values() for p in f.key_purposes]
  keys.check_purposes(declared)
  slots = [(p.level, p.value) for p in (*keys.CORE_PURPOSES, *declared)]
  assert len(slots) == len(set(slots)) and len(declared) == 7
