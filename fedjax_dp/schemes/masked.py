"""FL-STD, FL-TOP and the random-subset baselines, with their DP variants.

All seven are one pattern (UAI 2021, Algorithms 1-6 and Appendix D): clients
train locally, send the update restricted to a coordinate subset, and the
server adds the average to those coordinates. They differ in three choices:

| scheme     | subset                   | redrawn each round | reset off-subset |
| ---------- | ------------------------ | ------------------ | ---------------- |
| FL-STD     | all n weights            | -                  | -                |
| FL-TOP     | Top-K from public data   | no                 | yes (Alg. 2)     |
| FL-TOP-BIS | Top-K from public data   | no                 | no               |
| FL-BASIC   | random K                 | yes                | yes              |
| FL-BAS-2   | random K                 | yes                | no               |
| FL-BAS-3   | random K                 | no                 | yes              |
| FL-BAS-4   | random K                 | no                 | no               |

"Reset" means the weights outside the subset stay at their round-start value
during local SGD (UAI Algorithm 2). A -DP variant clips the compressed update
to S and adds a noise share (UAI Algorithm 3); see ``fedjax_dp.privacy``.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from fedjax_dp.compression import masks

SELECTIONS = ("full", "topk", "random")


@dataclasses.dataclass(frozen=True)
class MaskedScheme:
  """A coordinate-subset federated learning scheme.

  Attributes:
    name: Paper name, e.g. "FL-TOP-DP".
    selection: "full" (FL-STD), "topk" (server's Top-K) or "random".
    redraw: Random subset drawn anew each round from a shared seed.
    reset: Off-subset weights are kept at their round-start value during
      local SGD (UAI Algorithm 2) instead of training freely.
    dp: Clip the compressed update and add Gaussian noise shares.
    reference: Where the scheme is defined.
  """

  name: str
  selection: str
  redraw: bool
  reset: bool
  dp: bool
  reference: str

  @property
  def uses_ratio(self) -> bool:
    """Whether the compression ratio r applies (all but FL-STD)."""
    return self.selection != "full"

  @property
  def full_model_downstream(self) -> bool:
    """The server sends all n weights down (FL-STD, redrawn random subsets).

    With a fixed subset only those K weights ever change, so clients rebuild
    the model from the shared w0 and the K values (UAI Algorithm 1 line 18).
    """
    return self.selection == "full" or self.redraw

  def num_values(self, num_params: int, ratio: float) -> int:
    """Values each client sends up per round: K = r*n, or n for FL-STD."""
    return masks.num_kept(num_params, ratio) if self.uses_ratio else num_params

  def round_indices(self, fixed: jax.Array, key: jax.Array, num_params: int,
                    k: int) -> jax.Array | None:
    """This round's subset T (None for FL-STD: every coordinate).

    Args:
      fixed: The subset chosen at setup (Top-K or the fixed random subset).
      key: This round's shared mask key (the "shared seed" of UAI Sec. 4).
      num_params: n.
      k: K.
    """
    if self.selection == "full":
      return None
    if self.redraw:
      return masks.random_indices(key, num_params, k)
    return fixed

  def compress(self, delta: jax.Array, indices: jax.Array | None) -> jax.Array:
    """C(delta): the update's values on T."""
    return delta if indices is None else masks.compress(delta, indices)

  def apply_update(self, w: jax.Array, mean_update: jax.Array,
                   indices: jax.Array | None) -> jax.Array:
    """Server step ``w[T] += mean`` (UAI Algorithm 1 lines 9-13)."""
    return w + mean_update if indices is None else w.at[indices].add(mean_update)

  def grad_mask(self, indices: jax.Array | None, num_params: int) -> jax.Array | None:
    """Coordinates local SGD may move (None: all of them)."""
    if indices is None or not self.reset:
      return None
    return masks.indices_to_mask(indices, num_params)


def _variants(base: str, selection: str, redraw: bool, reset: bool,
              ref: str) -> list[MaskedScheme]:
  return [MaskedScheme(base, selection, redraw, reset, False, ref),
          MaskedScheme(base + "-DP", selection, redraw, reset, True, ref)]


MASKED_SCHEMES = {
    s.name: s for s in (
        _variants("FL-STD", "full", False, False, "UAI 2021 Alg. 4 and 6") +
        _variants("FL-TOP", "topk", False, True, "UAI 2021 Alg. 1-3") +
        _variants("FL-TOP-BIS", "topk", False, False, "UAI 2021 App. D") +
        _variants("FL-BASIC", "random", True, True, "UAI 2021 Sec. 4") +
        _variants("FL-BAS-2", "random", True, False, "UAI 2021 App. D") +
        _variants("FL-BAS-3", "random", False, True, "UAI 2021 App. D") +
        _variants("FL-BAS-4", "random", False, False, "UAI 2021 App. D"))
}


def fixed_subset(scheme: MaskedScheme, key: jax.Array, topk_scores: jax.Array | None,
                 num_params: int, k: int) -> jax.Array:
  """The subset chosen once at setup (empty when the scheme needs none).

  Args:
    scheme: The scheme.
    key: Setup key for a fixed random subset.
    topk_scores: Accumulated |grad| on public data (Top-K schemes).
    num_params: n.
    k: K.
  """
  if scheme.selection == "topk":
    return masks.topk_indices(topk_scores, k)
  if scheme.selection == "random" and not scheme.redraw:
    return masks.random_indices(key, num_params, k)
  return jnp.zeros((0,), jnp.int32)
