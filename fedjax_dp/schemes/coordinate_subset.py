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
during local SGD (UAI Algorithm 2).

FL-STD(-DP) can also take a server optimiser on the mean update, as optax
transformations fed the pseudo-gradient ``-mean``: FedAvgM (server momentum,
Hsu et al. 2019) and FedAdam (Reddi et al. 2021, "Adaptive Federated
Optimization"); for -DP it post-processes the noisy mean, so the privacy is
unchanged. A -DP variant clips the compressed update
to S and adds a noise share (UAI Algorithm 3): the default
``Scheme.privatize``; see ``fedjax_dp.privacy``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import optax

from fedjax_dp import calibration, keys, options
from fedjax_dp.compression import masks
from fedjax_dp.errors import ConfigError
from fedjax_dp.models import FlatModel
from fedjax_dp.schemes.base import Family, LocalTraining, Scheme, SetupData, Traits


@dataclasses.dataclass(frozen=True)
class MaskedScheme(Scheme):
  """A coordinate-subset federated learning scheme.

  Attributes:
    name: Paper name, e.g. "FL-TOP-DP".
    selection: "full" (FL-STD), "topk" (server's Top-K) or "random".
    redraw: Random subset drawn anew each round from a shared seed.
    reset: Off-subset weights are kept at their round-start value during
      local SGD (UAI Algorithm 2) instead of training freely.
    private: Clip the compressed update and add Gaussian noise shares.
    reference: Where the scheme is defined.
    server_optimizer: "sgd" (``w += mean``, FedAvg), "fedavgm" or "fedadam"
      (full-model schemes only).
    server_lr: The server optimiser's learning rate; None: 1.0 for
      "fedavgm" (momentum 0.9), 0.01 for "fedadam" (this simulator's
      defaults; tune them).
  """

  name: str
  selection: str
  redraw: bool
  reset: bool
  private: bool
  reference: str
  server_optimizer: str = "sgd"
  server_lr: float | None = None

  @property
  def traits(self) -> Traits:
    """Real-valued messages of K = r*n values (n for FL-STD), 32 bits each;
    a subset redrawn every round moves the messages' positions."""
    return Traits(dp=self.private, uses_ratio=self.selection != "full",
                  fixed_positions=not self.redraw)

  @property
  def full_model_downstream(self) -> bool:
    """The server sends all n weights down (FL-STD, redrawn random subsets).

    With a fixed subset only those K weights ever change, so clients rebuild
    the model from the shared w0 and the K values (UAI Algorithm 1 line 18).
    """
    return self.selection == "full" or self.redraw

  def validate(self, num_params: int, ratio: float) -> None:
    """Checks the server optimiser."""
    del num_params, ratio
    if self.server_optimizer not in SERVER_OPTIMIZERS:
      raise ConfigError("server_optimizer", f"must be one of {', '.join(SERVER_OPTIMIZERS)}, "
                        f"got {self.server_optimizer!r}")
    if self.server_optimizer != "sgd" and self.selection != "full":
      raise ConfigError("server_optimizer", f"{self.server_optimizer!r} needs the full model "
                        f"(FL-STD, FL-STD-DP), not {self.name}")
    if self.server_lr is not None and not self.server_lr > 0:
      raise ConfigError("server_lr", f"must be > 0, got {self.server_lr}")
    if self.server_lr is not None and self.server_optimizer == "sgd":
      raise ConfigError("server_lr", "applies to the server optimisers fedavgm and fedadam; "
                        "sgd adds the mean update as it is")

  def server_transform(self) -> optax.GradientTransformation:
    """FedAvgM or FedAdam on the pseudo-gradient ``-mean``."""
    if self.server_optimizer == "fedavgm":
      return optax.sgd(self.server_lr or 1.0, momentum=0.9)
    return optax.adam(self.server_lr or 0.01, b1=0.9, b2=0.99, eps=1e-3)

  def num_kept(self, num_params: int, ratio: float) -> int:
    """Values each client sends up per round: K = r*n, or n for FL-STD."""
    return masks.num_kept(num_params, ratio) if self.uses_ratio else num_params

  def num_downstream(self, num_params: int, ratio: float) -> int:
    """n when the full model goes down, else K."""
    return num_params if self.full_model_downstream else self.num_kept(num_params, ratio)

  def setup(self, data: SetupData) -> jax.Array:
    """The fixed subset: Top-K from public data (UAI Sec. 3.1) or random.

    Returns:
      (K,) sorted indices; empty for FL-STD and redrawn random subsets. With
      a server optimiser, ``(indices, its optax state)``.
    """
    if self.server_optimizer != "sgd":
      self.validate(data.w0.shape[0], data.ratio)
      return (jnp.zeros((0,), jnp.int32), self.server_transform().init(data.w0))
    n = data.w0.shape[0]
    k = self.num_kept(n, data.ratio)
    if self.selection == "topk":
      scores = calibration.topk_scores(data.model, data.w0, data.public_x,
                                       data.public_y, data.init_steps, data.local.lr)
      return masks.topk_indices(scores, k)
    if self.selection == "random" and not self.redraw:
      return masks.random_indices(keys.purpose(data.key, keys.SETUP_SUBSET), n, k)
    return jnp.zeros((0,), jnp.int32)

  def calibrate_clip(self, data: SetupData, state: jax.Array) -> float:
    """S from one public-data round (UAI Sec. 4).

    The L2 norm of the compressed update of T_gd SGD steps from w0 on the
    public batch; for random subsets, the median over 100 random subsets.
    """
    n = data.w0.shape[0]
    k = self.num_kept(n, data.ratio)

    def message(train_key, indices):
      w1 = data.local.train(data.model.loss, data.w0, data.public_x, data.public_y,
                            train_key, grad_mask=self.grad_mask(indices, n))
      return self.compress(w1 - data.w0, indices)

    if self.selection == "random":
      return calibration.public_clip_norm(data.key, message,
                                          random_plan=lambda kk: masks.random_indices(kk, n, k))
    return calibration.public_clip_norm(data.key, message,
                                        None if self.selection == "full" else state)

  def round_plan(self, state: jax.Array, key: jax.Array, num_params: int,
                 num_kept: int) -> jax.Array | None:
    """This round's subset T (None for FL-STD: every coordinate).

    Args:
      state: The subset chosen at setup (Top-K or the fixed random subset).
      key: This round's shared mask key (the "shared seed" of UAI Sec. 4).
      num_params: n.
      num_kept: K.
    """
    if self.selection == "full":
      return None
    if self.redraw:
      return masks.random_indices(key, num_params, num_kept)
    return state

  def client_message(self, model: FlatModel, w: jax.Array, plan: jax.Array | None,
                     x: jax.Array, y: jax.Array, key: jax.Array,
                     local: LocalTraining) -> jax.Array:
    """Local (masked) SGD from the global model, then C(delta) = delta[T]."""
    mask = self.grad_mask(plan, w.shape[0])
    if mask is not None:  # only T moves: C(delta) = delta[T] straight from training
      return local.update(model, w, x, y, key, grad_mask=mask, grad_indices=plan,
                          only_indices=True)
    delta = local.update(model, w, x, y, key)
    return self.compress(delta, plan)

  def server_update(self, w: jax.Array, state: jax.Array, mean: jax.Array,
                    plan: jax.Array | None) -> tuple[jax.Array, jax.Array]:
    """Server step ``w[T] += mean`` (UAI Algorithm 1 lines 9-13), or the
    server optimiser's step on ``-mean``."""
    if self.server_optimizer != "sgd":
      indices, opt_state = state
      updates, opt_state = self.server_transform().update(-mean, opt_state, w)
      return optax.apply_updates(w, updates), (indices, opt_state)
    new_w = w + mean if plan is None else w.at[plan].add(mean)
    return new_w, state

  def describe(self) -> dict:
    """The server optimiser, when there is one."""
    if self.server_optimizer == "sgd":
      return {}
    return {"server_optimizer": self.server_optimizer, "server_lr": self.server_lr}

  def compress(self, delta: jax.Array, indices: jax.Array | None) -> jax.Array:
    """C(delta): the update's values on T."""
    return delta if indices is None else masks.compress(delta, indices)

  def grad_mask(self, indices: jax.Array | None, num_params: int) -> jax.Array | None:
    """Coordinates local SGD may move (None: all of them)."""
    if indices is None or not self.reset:
      return None
    return masks.indices_to_mask(indices, num_params)


SERVER_OPTIMIZERS = ("sgd", "fedavgm", "fedadam")


def _variants(base: str, selection: str, redraw: bool, reset: bool,
              ref: str) -> list[MaskedScheme]:
  """The scheme and its -DP variant."""
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




def _full_model(scheme: MaskedScheme) -> bool:
  """FL-STD(-DP): the schemes that send the whole update."""
  return scheme.selection == "full"


# The server optimiser of FL-STD / FL-STD-DP.
OPTIONS = (
    options.Option("server_optimizer", str, "sgd",
                   "FL-STD(-DP)'s server step on the mean update: sgd (FedAvg, default), "
                   "fedavgm (momentum 0.9) or fedadam (optax)", choices=SERVER_OPTIMIZERS,
                   applies_to=_full_model),
    options.Option("server_optimizer_lr", options.positive, None,
                   "its learning rate (default 1.0 for fedavgm, 0.01 for fedadam)",
                   field="server_lr", applies_to=_full_model),
)


def configure(scheme: Scheme, values: Mapping[str, Any]) -> Scheme:
  """FL-STD(-DP) with the server optimiser; the subset schemes are unchanged."""
  if scheme.selection != "full":
    return scheme
  return dataclasses.replace(scheme, server_optimizer=values["server_optimizer"],
                             server_lr=values["server_optimizer_lr"])


FAMILY = Family("FL-STD, FL-TOP, FL-TOP-BIS, FL-BASIC, FL-BAS-2/3/4 (UAI 2021)",
                MASKED_SCHEMES, options=OPTIONS, configure=configure)
