"""CDP-LQ: compressive DP federated learning by dithered lattice quantization.

Poster (seed 001: Amiri, Belloum, Klous, Gommans, "Compressive Differentially-
Private Federated Learning Through Universal Vector Quantization"),
Algorithms 1-2. Each round every sampled participant

1. receives the model theta_t (Alg. 1 line 1);
2. runs T_gd local steps of DP-SGD on its own records (lines 2-6): a Poisson
   batch with rate q = |B| / |D_k| (the poster's S^po), per-example gradients
   clipped to S (``fedjax_dp.privacy.per_sample``), summed, plus the Gaussian
   perturbation ``N(0, sigma^2 S^2 I)`` (line 6: "N(0, sigma^2 C^2 I) with
   sigma = N Delta": in units of S the noise std is sigma = N Delta, i.e. N
   quantization steps); with T_gd = 1, the poster's single gradient;
3. writes its update in units of S, ``v = sum_s (G_s + z_s) / S``, splits it
   into lattice vectors of size L, adds a subtractive dither u drawn from a
   key it shares with the server and sends the integer coordinates of
   ``Q_Lambda(v + u)`` (lines 7-9; ``fedjax_dp.compression.lattice``),
   coded with bzip2 (lines 10-11; ``fedjax_dp.compression.universal_coding``).

The server (Alg. 2) decodes each stream, subtracts the dither -- leaving
``v + e`` with e uniform over the Voronoi cell and independent of v (Zamir-
Feder) -- scales back to a model update, averages over the expected cohort
and descends: ``theta += mean``.

Privacy (record level, each participant's records): the server sees a
function of the noisy gradients ``G_s + z_s`` and of data-independent keys
only, so quantization and coding are post-processing and every local step
is one Poisson-subsampled Gaussian mechanism with noise multiplier sigma
(whose exact one-step profile is the analytical Gaussian mechanism of Balle
and Wang, ``fedjax_dp.privacy.analytic_gaussian``). A record of client k is
used only by client k, so its privacy loss composes over ``T_gd`` times the
number of rounds client k took part in; the quantization noise is not
counted (conservative). Client sampling is public and gives no
amplification here (the server sees every message, the poster's local DP).
:meth:`LatticeScheme.mechanism` states this as a record-level mechanism,
which ``fedjax_dp.privacy.accounting.report`` composes (dp-accounting's PLD
or RDP accountant, or the moments accountant) over the largest number of
participations of any client in the run, and also over every round.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp import options
from fedjax_dp import keys as keys_lib
from fedjax_dp.compression import lattice as lattice_lib
from fedjax_dp.compression import universal_coding
from fedjax_dp.errors import ConfigError
from fedjax_dp.models import FlatModel
from fedjax_dp.privacy import analytic_gaussian, per_sample
from fedjax_dp.privacy.accounting import Mechanism
from fedjax_dp.schemes.base import Family, LocalTraining, Noise, Scheme, SetupData, Traits

TRAIN, DITHER = keys_lib.LQ_TRAIN, keys_lib.LQ_DITHER
# The poster's lattice vector size (results section: "vectors of length 5").
POSTER_LATTICE_DIM = 5
# The poster's compression after bzip (results section: 8.03x), stated in the record.
POSTER_COMPRESSION_FACTOR = 8.03


@dataclasses.dataclass(frozen=True)
class LatticeScheme(Scheme):
  """CDP-LQ (poster Alg. 1-2); see the module docstring.

  Attributes:
    name: "CDP-LQ".
    lattice: "scalar" or "hexagonal" (A2).
    step: Delta, the lattice step in units of the clip norm S.
    dim: L, the lattice vector size; None: 5 (the poster's) for scalar, 2
      for hexagonal.
    microbatch: Per-example gradients materialised at once per client.
    measured_clients: Clients whose coded stream is measured per measured
      round (see ``fedjax_dp.simulation.run``).
    reference: Where the scheme is defined.
    step_epsilon: If set, sigma is calibrated (analytical Gaussian mechanism)
      so that one local step is (step_epsilon, delta)-DP (the command line's
      --lq-step-epsilon; see :func:`noise_multiplier`).

  A run's S and sigma reach the clients as the round's ``noise``, and its
  Poisson batch capacity as the run's ``constants``
  (:meth:`run_constants`).
  """

  name: str = "CDP-LQ"
  lattice: str = "scalar"
  step: float = 0.25
  dim: int | None = None
  microbatch: int = 8
  measured_clients: int = 1
  reference: str = "poster (seed 001), Alg. 1-2"
  step_epsilon: float | None = None

  @property
  def traits(self) -> Traits:
    """DP (record level, in the clients' DP-SGD), no ratio, coded streams."""
    # Alg. 1 is DP-SGD: its noise is calibrated to the SGD step.
    return Traits(dp=True, uses_ratio=False, measured_streams=self.measured_clients,
                  local_optimizers=("sgd",), run_constants=True,
                  trains_by_local_update=False)  # DP-SGD of its own (per_sample)

  @property
  def quantizer(self) -> lattice_lib.Lattice:
    """The validated :class:`~fedjax_dp.compression.lattice.Lattice`."""
    dim = self.dim
    if dim is None:
      dim = POSTER_LATTICE_DIM if self.lattice == "scalar" else 2
    return lattice_lib.make_lattice(self.lattice, self.step, dim)

  def validate(self, num_params: int, ratio: float) -> None:
    """Raises ValueError (one line) for a bad lattice or option, a ConfigError
    naming the option where one is at fault (``lattice_lib.make_lattice``
    checks the same step and size)."""
    del ratio
    if not (isinstance(self.step, (int, float)) and math.isfinite(self.step) and self.step > 0):
      raise ConfigError("step", f"must be > 0, got {self.step}")
    dim = self.dim
    if dim is not None and (int(dim) != dim or dim < 1):
      raise ConfigError("dim", f"must be a positive int, got {dim}")
    if self.lattice == "hexagonal" and dim is not None and dim % 2:
      raise ConfigError("dim", f"must be even for the hexagonal lattice (L/2 copies of A2), "
                        f"got {dim}")
    # The update is cut into ceil(n / L) vectors of L: past n, one vector of
    # padding (a 2**31-long one aborted in XLA).
    if self.quantizer.dim > num_params:
      raise ConfigError("dim", f"must be at most the model's size n = {num_params}, "
                        f"got {self.quantizer.dim}")
    if self.microbatch < 1:
      raise ConfigError("microbatch", f"must be >= 1, got {self.microbatch}")
    if self.measured_clients < 0:
      raise ConfigError("measured_clients", f"must be >= 0, got {self.measured_clients}")

  def num_kept(self, num_params: int, ratio: float) -> int:
    """n values (coded as lattice integers) up per client and round."""
    return num_params

  def num_downstream(self, num_params: int, ratio: float) -> int:
    """The full model goes down (Alg. 2 line 3)."""
    return num_params

  def setup(self, data: SetupData) -> jax.Array:
    """No server state."""
    return jnp.zeros((0,), jnp.int32)

  def calibrate_clip(self, data: SetupData, state: jax.Array) -> float:
    """S = the median per-example gradient norm at w0 on the public batch.

    The poster leaves the bound S_q open; the median is the usual DP-SGD
    choice, taken here on public data only.
    """
    loss = data.model.loss
    norms = jax.jit(jax.vmap(lambda xi, yi: jnp.linalg.norm(
        jax.grad(loss)(data.w0, xi[None], yi[None]))))(data.public_x, data.public_y)
    return float(np.median(np.asarray(norms)))

  def rate(self, local: LocalTraining, num_records: int) -> float:
    """q = |B| / |D_k| (at most 1), the per-step Poisson rate."""
    return min(1.0, local.batch_size / num_records)

  def run_constants(self, data: SetupData, clip_norm: float) -> int:
    """The run's untruncated Poisson batch capacity.

    The largest batch any client draws in any local step of the run
    (:func:`fedjax_dp.privacy.per_sample.plan_batch_capacity`), so every
    batch is exactly Poisson.
    """
    del clip_norm
    local, num_records = data.local, data.samples_per_client
    q = self.rate(local, num_records)

    def step_keys(t):
      rkey = keys_lib.round_key(data.run_key, t)
      train, _ = keys_lib.client_keys(rkey, jnp.arange(data.num_clients))
      ks = jax.vmap(lambda k: jax.random.split(jax.random.fold_in(k, TRAIN),
                                               local.steps))(train)
      return ks.reshape(-1, ks.shape[-1])

    return per_sample.plan_batch_capacity(step_keys, data.rounds, num_records, q,
                                          multiple=self.microbatch)

  def round_plan(self, state, key, num_params, num_kept):
    """Nothing shared beyond the model (each client's dither key is its own)."""
    return None

  def _unit(self, local: LocalTraining, num_records: int, clip_norm) -> float:
    """Weights per unit of v: ``lr S / (q |D_k|)``."""
    return local.lr * clip_norm / (self.rate(local, num_records) * num_records)

  def client_update(self, model: FlatModel, w: jax.Array, x: jax.Array, y: jax.Array,
                    key: jax.Array, local: LocalTraining, *, noise: Noise,
                    constants: int | None) -> jax.Array:
    """v = the noisy clipped gradient sums of T_gd DP-SGD steps, in units of S.

    Args:
      noise: The round's S and sigma (``noise.num_shares`` is not used: each
        client adds its whole noise).
      constants: The run's batch capacity (:meth:`run_constants`); None: all
        of the client's records.
    """
    num_records = x.shape[0]
    capacity = min(constants or num_records, num_records)
    w_end, _ = per_sample.local_dp_sgd(
        model.loss, w, x, y, jax.random.fold_in(key, TRAIN), steps=local.steps,
        rate=self.rate(local, num_records), capacity=capacity, lr=local.lr,
        clip_norm=noise.clip_norm, noise_multiplier=noise.noise_multiplier,
        microbatch=self.microbatch)
    return (w - w_end) / self._unit(local, num_records, noise.clip_norm)

  def client_stream(self, model: FlatModel, w: jax.Array, plan, x: jax.Array,
                    y: jax.Array, key: jax.Array, local: LocalTraining, *, noise: Noise,
                    constants: int | None) -> jax.Array:
    """The int32 lattice coordinates the client transmits (Alg. 1 lines 7-10)."""
    v = self.client_update(model, w, x, y, key, local, noise=noise, constants=constants)
    return lattice_lib.quantize(v, jax.random.fold_in(key, DITHER), self.quantizer)

  def client_message(self, model: FlatModel, w: jax.Array, plan, x: jax.Array,
                     y: jax.Array, key: jax.Array, local: LocalTraining, *, noise: Noise,
                     constants: int | None) -> jax.Array:
    """The server's decoding of the client's stream, as an (n,) model update.

    ``-lr S / (q |D_k|) (Q(v + u) - u)`` (Alg. 2 line 1; the minus makes it
    a descent step).
    """
    coords = self.client_stream(model, w, plan, x, y, key, local, noise=noise,
                                constants=constants)
    v_hat = lattice_lib.dequantize(coords, jax.random.fold_in(key, DITHER),
                                   self.quantizer, w.shape[0])
    return -self._unit(local, x.shape[0], noise.clip_norm) * v_hat

  def measure_stream(self, coords: np.ndarray, num_params: int
                     ) -> universal_coding.CodedSize:
    """bzip2-coded size of one transmitted stream (outside jit)."""
    return universal_coding.coded_size(coords, num_params)

  def privatize(self, messages, slot_mask, noise_keys, noise: Noise, *, constants=None):
    """The decoded messages themselves: the noise is already in them."""
    return messages, jnp.zeros((), jnp.int32)

  def server_noise(self, key, shape, noise: Noise, *, constants=None):
    """No server-side noise: the DP is each client's."""
    return jnp.zeros(shape, jnp.float32)

  def server_update(self, w: jax.Array, state: jax.Array, mean: jax.Array,
                    plan) -> tuple[jax.Array, jax.Array]:
    """``theta += mean`` (Alg. 2 line 2, the learning rate folded in the update)."""
    return w + mean, state

  def mechanism(self, noise_multiplier: float, num_kept: int, local: LocalTraining,
                samples_per_client: int) -> Mechanism:
    """Record level: T_gd Poisson-subsampled Gaussian steps per participation.

    Rate q = |B| / |D_k|, noise multiplier sigma, sensitivity S; the
    quantization noise is not counted (conservative).
    """
    del num_kept
    return Mechanism(kind="gaussian", level="record", noise_multiplier=noise_multiplier,
                     record_rate=self.rate(local, samples_per_client),
                     steps_per_round=local.steps)

  def describe(self) -> dict:
    """The lattice and the poster's figure."""
    return {
        "lq_step_epsilon": self.step_epsilon,
        "paper_compression_factor": POSTER_COMPRESSION_FACTOR,
        "lattice": self.quantizer.kind,
        "lattice_step": self.quantizer.step,
        "lattice_dim": self.quantizer.dim,
        "lattice_error_std": float(np.sqrt(self.quantizer.error_variance)),
    }

  def describe_run(self, constants: int | None, noise_multiplier: float) -> dict:
    """The noise in lattice steps (sigma / Delta) and the batch capacity."""
    return {"noise_in_steps": noise_multiplier / self.step, "batch_capacity": constants}


CDP_LQ_SCHEMES = {"CDP-LQ": LatticeScheme()}
# Its papers' setting is the papers' app's preset (fedjax_dp.paper.presets.CDP_LQ).

_DEFAULT = CDP_LQ_SCHEMES["CDP-LQ"]


# The lattice and its measurement.
OPTIONS = (
    options.Option("lattice", str, _DEFAULT.lattice,
                   "lattice of the quantizer: scalar (Delta Z) or hexagonal (A2) (default "
                   "scalar)", choices=lattice_lib.KINDS),
    options.Option("lattice_step", options.positive, _DEFAULT.step,
                   f"Delta, the lattice step in units of the clip norm S (default "
                   f"{_DEFAULT.step:g}: noise sigma = 1 spans N = sigma/Delta = 4 steps)",
                   field="step"),
    options.Option("lattice_dim", options.positive_int, None,
                   "L, the lattice vector size (default 5, the poster's, for scalar; 2 for "
                   "hexagonal, which needs an even L)", field="dim"),
    options.Option("lq_step_epsilon", options.positive, None,
                   "calibrate CDP-LQ's sigma with the analytical Gaussian mechanism so that "
                   "one local step is (eps, --delta)-DP (overrides --noise-multiplier for "
                   "CDP-LQ)", field="step_epsilon"),
    options.Option("lq_measured_clients", int, _DEFAULT.measured_clients,
                   "clients whose bzip2-coded stream is measured in the first round of every "
                   "evaluation interval, the first of its cohort, at most all of it (default "
                   "1; 0: none)", field="measured_clients"),
    options.Option("lq_microbatch", options.positive_int, _DEFAULT.microbatch,
                   f"per-example gradients computed at once per client (memory; default "
                   f"{_DEFAULT.microbatch})", field="microbatch"),
)


def configure(scheme: Scheme, values: Mapping[str, Any]) -> Scheme:
  """CDP-LQ with the given lattice options."""
  return dataclasses.replace(scheme, lattice=values["lattice"], step=values["lattice_step"],
                             dim=values["lattice_dim"], microbatch=values["lq_microbatch"],
                             measured_clients=values["lq_measured_clients"],
                             step_epsilon=values["lq_step_epsilon"])


def noise_multiplier(scheme: Scheme, values: Mapping[str, Any]) -> float:
  """``noise_multiplier``, or the analytical Gaussian calibration of
  ``lq_step_epsilon`` at ``delta`` (Balle and Wang 2018, Alg. 1; sensitivity S)."""
  if scheme.step_epsilon is not None:
    return analytic_gaussian.sigma_for_epsilon(scheme.step_epsilon, values["delta"])
  return values["noise_multiplier"]


FAMILY = Family("CDP-LQ: dithered lattice quantization, sample-level DP (poster, seed 001, "
                "Alg. 1-2)", CDP_LQ_SCHEMES, options=OPTIONS, configure=configure,
                noise_multiplier=noise_multiplier)
