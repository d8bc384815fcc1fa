"""Round features: what a run adds to the plain federated round.

Each feature is one module: a frozen config dataclass (owned by the module it
configures) and a :class:`~fedjax_dp.features.base.Feature` built from it,
whose pure functions the round calls at fixed points (``features.base``).
``REGISTRY`` below is the one list of them: a feature's kind (the name
``RunConfig.of`` takes its config by), its config class and its feature
class. Every run has the ``dropouts`` feature (its config is the
``RunConfig.dropouts`` part); the others join when their config is in
``RunConfig.features``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from fedjax_dp import attacks, canaries
from fedjax_dp.errors import ConfigError
from fedjax_dp.features import adaptive_clip, attack, audit, dropouts
from fedjax_dp.features.base import Chunk, Context, Feature, Noise, Observed


class Entry(NamedTuple):
  """A registered feature: its config class and its feature class."""

  config: type
  feature: type


REGISTRY = {
    "attack": Entry(attacks.AttackConfig, attack.Attack),
    "audit": Entry(canaries.AuditConfig, audit.Audit),
    "adaptive_clip": Entry(adaptive_clip.AdaptiveClipConfig, adaptive_clip.AdaptiveClip),
}
KINDS = tuple(REGISTRY)


def kind_of(config: Any) -> str:
  """The registered kind of a feature config (TypeError for another object)."""
  for kind, entry in REGISTRY.items():
    if type(config) is entry.config:
      return kind
  raise TypeError(f"{type(config).__name__} is not a registered feature config "
                  f"({', '.join(e.config.__name__ for e in REGISTRY.values())})")


def find(configs: tuple, kind: str) -> Any:
  """The config of this kind among ``configs``, or None."""
  wanted = REGISTRY[kind].config
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


def build(config: Any, ctx: Context) -> tuple[Feature, ...]:
  """The run's features (``config``: a RunConfig): dropouts, then the others
  in registry order."""
  present = [dropouts.Dropouts(config.dropouts, ctx)]
  for kind, entry in REGISTRY.items():
    found = find(config.features, kind)
    if found is not None:
      present.append(entry.feature(found, ctx))
  return tuple(present)


__all__ = ["Chunk", "Context", "Entry", "Feature", "KINDS", "Noise", "Observed", "REGISTRY",
           "build", "check_unique", "find", "kind_of", "with_kinds"]
