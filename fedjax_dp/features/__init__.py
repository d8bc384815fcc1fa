"""Round features: what a run adds to the plain federated round.

Each feature is one module: a frozen config dataclass (owned by the module it
configures, its fields declaring their options) and a
:class:`~fedjax_dp.features.base.Feature` built from it, whose pure
functions the round calls at fixed points (``features.base``). The feature
class declares as data what the rest of the library needs: its kind (the
name ``RunConfig.of`` takes its config by), config class, options, switch,
conflicts and PRNG purposes. ``REGISTRY`` below is the one list of them;
:func:`register` adds one from research code. Every run has the
``dropouts`` feature (its config is the ``RunConfig.dropouts`` part); the
others join when their config is in ``RunConfig.features``.
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol

from fedjax_dp import keys
from fedjax_dp.features import adaptive_clip, attack, audit, correlated_noise, dropouts
from fedjax_dp.features.adaptive_clip import AdaptiveClipConfig
from fedjax_dp.features.attack import AttackConfig
from fedjax_dp.features.audit import AuditConfig
from fedjax_dp.features.correlated_noise import CorrelatedNoiseConfig
from fedjax_dp.features.base import VIEW_FIELDS, Conflict, Feature, RunView
from fedjax_dp.round_types import At, Chunk, Noise, Observed, Trainer
from fedjax_dp.errors import ConfigError


class RunFeatures(Protocol):
  """What the registry reads of a run's config (``simulation.RunConfig`` is
  one): the dropouts' config, and the other features' configs."""

  @property
  def dropouts(self) -> Any: ...

  @property
  def features(self) -> tuple: ...


REGISTRY: dict[str, type[Feature]] = {}
KINDS: tuple[str, ...] = ()


def register(feature: type[Feature]) -> type[Feature]:
  """Adds a feature class to :data:`REGISTRY` (usable as a class decorator).

  Raises:
    ValueError: Its kind or config class is registered already, a key
      purpose is taken, or a conflict names neither a kind nor a run setting.
  """
  global KINDS
  if feature.kind in REGISTRY or feature.kind == dropouts.Dropouts.kind:
    raise ValueError(f"a feature of kind {feature.kind!r} is registered already")
  if any(f.config_type is feature.config_type for f in REGISTRY.values()):
    raise ValueError(f"{feature.config_type.__name__} configures a registered feature already")
  keys.check_purposes([p for f in (dropouts.Dropouts, *REGISTRY.values(), feature)
                       for p in f.key_purposes])
  known = set(VIEW_FIELDS) | set(REGISTRY) | {feature.kind}
  for conflict in feature.conflicts:
    if conflict.other not in known:
      raise ValueError(f"{feature.__name__} conflicts with {conflict.other!r}, which is "
                       "neither a feature kind nor a RunView field")
  REGISTRY[feature.kind] = feature
  KINDS = tuple(REGISTRY)
  return feature


def unregister(kind: str) -> None:
  """Removes a feature registered by :func:`register` (tests, notebooks)."""
  global KINDS
  del REGISTRY[kind]
  KINDS = tuple(REGISTRY)


for _feature in (attack.Attack, audit.Audit, adaptive_clip.AdaptiveClip,
                 correlated_noise.CorrelatedNoise):
  register(_feature)


def kind_of(config: Any) -> str:
  """The registered kind of a feature config (TypeError for another object)."""
  for kind, feature in REGISTRY.items():
    if type(config) is feature.config_type:
      return kind
  raise TypeError(f"{type(config).__name__} is not a registered feature config "
                  f"({', '.join(f.config_type.__name__ for f in REGISTRY.values())})")


def find(configs: tuple, kind: str) -> Any:
  """The config of this kind among ``configs``, or None."""
  wanted = REGISTRY[kind].config_type
  return next((c for c in configs if type(c) is wanted), None)


def with_kinds(configs: tuple, given: dict[str, Any]) -> tuple:
  """``configs`` with the given kinds' configs set (None removes a kind)."""
  kept = tuple(c for c in configs if kind_of(c) not in given)
  return kept + tuple(c for c in given.values() if c is not None)


def check_unique(configs: tuple) -> None:
  """Each registered kind at most once (ConfigError naming it)."""
  seen = [kind_of(c) for c in configs]
  for kind in seen:
    if seen.count(kind) > 1:
      raise ConfigError(kind, "is given more than once")


def from_options(values: Mapping[str, Any]) -> tuple:
  """The configs of the features whose options turn them on
  (``Feature.from_options``; ``values``: every option's value by name)."""
  found = (feature.from_options(values) for feature in REGISTRY.values())
  return tuple(c for c in found if c is not None)


def _present(config: RunFeatures) -> list[tuple[type[Feature], Any]]:
  """(feature class, its config) of the run's features: dropouts, then the
  others in registry order."""
  present = [(dropouts.Dropouts, config.dropouts)]
  for kind, feature in REGISTRY.items():
    found = find(config.features, kind)
    if found is not None:
      present.append((feature, found))
  return present


def kinds(config: RunFeatures) -> tuple[str, ...]:
  """The kinds of the run's features, in the order the round calls them."""
  return tuple(cls.kind for cls, _ in _present(config))


def check(config: RunFeatures, run: RunView) -> None:
  """Each of the run's features checks its config against the run (before setup)."""
  for cls, found in _present(config):
    cls.check(found, run)


def client_data(config: RunFeatures, data: Any, run_key: Any) -> Any:
  """The clients' data as the run's features leave it (``Feature.client_data``)."""
  for cls, found in _present(config):
    data = cls.client_data(found, data, run_key)
  return data


def mechanism(config: RunFeatures, released: Any) -> Any:
  """What a round releases as the run's features leave it (``Feature.mechanism``)."""
  for cls, found in _present(config):
    released = cls.mechanism(found, released)
  return released


def build(config: RunFeatures, run: RunView) -> tuple[Feature, ...]:
  """The run's features, built once (``run``: S known)."""
  return tuple(cls(found, run) for cls, found in _present(config))


__all__ = ["AdaptiveClipConfig", "At", "AttackConfig", "AuditConfig", "Chunk", "Conflict",
           "Feature", "KINDS", "Noise", "Observed", "REGISTRY", "RunFeatures", "RunView", "Trainer",
           "build", "check", "check_unique", "client_data", "CorrelatedNoiseConfig", "find",
           "from_options", "kind_of", "kinds", "mechanism", "register", "unregister",
           "with_kinds"]
