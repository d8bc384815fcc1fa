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
:meth:`LatticeScheme.record_level_epsilon` composes with
``fedjax_dp.privacy.accounting.epsilon_curve`` (dp-accounting's PLD or RDP
accountant, or the moments accountant) over the largest number of
participations of any client in the run, and also over every round.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp import keys as keys_lib
from fedjax_dp import sampling
from fedjax_dp.compression import lattice as lattice_lib
from fedjax_dp.compression import universal_coding
from fedjax_dp.models import FlatModel
from fedjax_dp.privacy import accounting, analytic_gaussian, per_sample
from fedjax_dp.schemes.base import LocalTraining, SetupData

# Sub-purposes of a CDP-LQ client's round key (fold_in constants).
TRAIN, DITHER = 0, 1
# The poster's lattice vector size (results section: "vectors of length 5").
POSTER_LATTICE_DIM = 5


@dataclasses.dataclass(frozen=True)
class LatticeScheme:
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
    clip_norm: S, set for a run by :meth:`bind_run`.
    noise_multiplier: sigma, set by :meth:`bind_run`.
    batch_capacity: Poisson batch slots, set by :meth:`bind_run` (None:
      all records).
  """

  name: str = "CDP-LQ"
  lattice: str = "scalar"
  step: float = 0.25
  dim: int | None = None
  microbatch: int = 8
  measured_clients: int = 1
  reference: str = "poster (seed 001), Alg. 1-2"
  clip_norm: float | None = None
  noise_multiplier: float | None = None
  batch_capacity: int | None = None

  dp = True  # sample-level (record) DP, accounted by record_level_epsilon

  @property
  def uses_ratio(self) -> bool:
    """No ratio: the lattice step sets the compression."""
    return False

  @property
  def quantizer(self) -> lattice_lib.Lattice:
    """The validated :class:`~fedjax_dp.compression.lattice.Lattice`."""
    dim = self.dim
    if dim is None:
      dim = POSTER_LATTICE_DIM if self.lattice == "scalar" else 2
    return lattice_lib.make_lattice(self.lattice, self.step, dim)

  def validate(self, num_params: int, ratio: float) -> None:
    """Raises ValueError (one line) for a bad lattice or option."""
    del num_params, ratio
    self.quantizer  # pylint: disable=pointless-statement
    if self.microbatch < 1:
      raise ValueError(f"microbatch must be >= 1, got {self.microbatch}")
    if self.measured_clients < 0:
      raise ValueError(f"--lq-measured-clients must be >= 0, got {self.measured_clients}")

  def num_values(self, num_params: int, ratio: float) -> int:
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

  def bind_run(self, run_key: jax.Array, cfg, clip_norm: float, num_clients: int,
               num_records: int) -> "LatticeScheme":
    """This scheme with S, sigma and an untruncated Poisson batch capacity.

    The capacity is the largest batch any client draws in any local step of
    the run (:func:`fedjax_dp.privacy.per_sample.plan_batch_capacity`), so
    every batch is exactly Poisson.

    Args:
      run_key: The run's root key.
      cfg: The ``fedjax_dp.simulation.RunConfig``.
      clip_norm: S.
      num_clients: N.
      num_records: |D_k|.
    """
    local = LocalTraining(cfg.local_steps, cfg.batch_size, cfg.lr)
    q = self.rate(local, num_records)

    def step_keys(t):
      rkey = keys_lib.round_key(run_key, t)
      train, _ = keys_lib.client_keys(rkey, jnp.arange(num_clients))
      ks = jax.vmap(lambda k: jax.random.split(jax.random.fold_in(k, TRAIN),
                                               local.steps))(train)
      return ks.reshape(-1, ks.shape[-1])

    capacity = per_sample.plan_batch_capacity(step_keys, cfg.rounds, num_records, q,
                                              multiple=self.microbatch)
    return dataclasses.replace(self, clip_norm=float(clip_norm),
                               noise_multiplier=float(cfg.noise_multiplier),
                               batch_capacity=capacity)

  def round_plan(self, state, key, num_params, m):
    """Nothing shared beyond the model (each client's dither key is its own)."""
    return None

  def _unit(self, local: LocalTraining, num_records: int) -> float:
    """Weights per unit of v: ``lr S / (q |D_k|)``."""
    return local.lr * self.clip_norm / (self.rate(local, num_records) * num_records)

  def client_update(self, model: FlatModel, w: jax.Array, x: jax.Array, y: jax.Array,
                    key: jax.Array, local: LocalTraining) -> jax.Array:
    """v = the noisy clipped gradient sums of T_gd DP-SGD steps, in units of S."""
    if self.clip_norm is None or self.noise_multiplier is None:
      raise ValueError("CDP-LQ needs bind_run (clip norm and noise multiplier) first")
    num_records = x.shape[0]
    capacity = min(self.batch_capacity or num_records, num_records)
    w_end, _ = per_sample.local_dp_sgd(
        model.loss, w, x, y, jax.random.fold_in(key, TRAIN), steps=local.steps,
        rate=self.rate(local, num_records), capacity=capacity, lr=local.lr,
        clip_norm=self.clip_norm, noise_multiplier=self.noise_multiplier,
        microbatch=self.microbatch)
    return (w - w_end) / self._unit(local, num_records)

  def client_stream(self, model: FlatModel, w: jax.Array, plan, x: jax.Array,
                    y: jax.Array, key: jax.Array, local: LocalTraining) -> jax.Array:
    """The int32 lattice coordinates the client transmits (Alg. 1 lines 7-10)."""
    v = self.client_update(model, w, x, y, key, local)
    return lattice_lib.quantize(v, jax.random.fold_in(key, DITHER), self.quantizer)

  def client_message(self, model: FlatModel, w: jax.Array, plan, x: jax.Array,
                     y: jax.Array, key: jax.Array, local: LocalTraining) -> jax.Array:
    """The server's decoding of the client's stream, as an (n,) model update.

    ``-lr S / (q |D_k|) (Q(v + u) - u)`` (Alg. 2 line 1; the minus makes it
    a descent step).
    """
    coords = self.client_stream(model, w, plan, x, y, key, local)
    v_hat = lattice_lib.dequantize(coords, jax.random.fold_in(key, DITHER),
                                   self.quantizer, w.shape[0])
    return -self._unit(local, x.shape[0]) * v_hat

  def measure_stream(self, coords: np.ndarray, num_values: int
                     ) -> universal_coding.CodedSize:
    """bzip2-coded size of one transmitted stream (outside jit)."""
    return universal_coding.coded_size(coords, num_values)

  def contributions(self, messages, slot_mask, noise_keys, clip_norm, noise_multiplier,
                    num_shares):
    """The decoded messages themselves: the noise is already in them."""
    return messages, jnp.zeros((), jnp.int32)

  def server_noise(self, key, shape, clip_norm, noise_multiplier):
    """No server-side noise: the DP is each client's."""
    return jnp.zeros(shape, jnp.float32)

  def aggregate(self, messages, slot_mask, noise_keys, server_key, clip_norm,
                noise_multiplier):
    """The plain sum of the real clients' decoded messages."""
    total = jnp.sum(jnp.where(slot_mask[:, None], messages, 0.0), axis=0)
    return total, jnp.zeros((), jnp.int32)

  def server_update(self, w: jax.Array, state: jax.Array, mean: jax.Array,
                    plan) -> tuple[jax.Array, jax.Array]:
    """``theta += mean`` (Alg. 2 line 2, the learning rate folded in the update)."""
    return w + mean, state

  def record_level_epsilon(self, cfg, rounds_list, sampling_keys: jax.Array,
                           num_clients: int, rate: float, capacity: int,
                           num_records: int) -> tuple[list[float], str, dict]:
    """Record-level epsilon after each round count of ``rounds_list``.

    Composes ``T_gd * P`` Poisson-subsampled Gaussian steps (rate
    q = |B| / |D_k|, noise multiplier sigma, sensitivity S) with
    ``accounting.epsilon_curve`` and ``cfg.accountant``, P being the largest
    number of rounds any client took part in up to that round (the cohorts
    are recomputed from the run's sampling keys; they are public and
    independent of the data). Also returns the bound for a client in every
    round and the one-step analytical-Gaussian epsilon.

    Returns:
      ``(epsilons, label, extra record fields)``.
    """
    local = LocalTraining(cfg.local_steps, cfg.batch_size, cfg.lr)
    q = self.rate(local, num_records)
    sigma = float(cfg.noise_multiplier)
    parts = max_participations(sampling_keys, num_clients, rate, capacity, cfg.sampler,
                               list(rounds_list) + [cfg.rounds])
    steps = [cfg.local_steps * p for p in parts]  # the last: by the final round
    curve = accounting.epsilon_curve(sigma, q, steps + [cfg.local_steps * cfg.rounds],
                                     cfg.delta, cfg.accountant, "poisson")
    eps, eps_all = curve[:len(rounds_list)], curve[-1]
    step_eps = (analytic_gaussian.epsilon_for_sigma(sigma, cfg.delta) if sigma > 0
                else float("inf"))
    label = (f"record-level: {accounting.accountant_label(cfg.accountant, 'poisson')} "
             f"of records (q = |B|/|D_k| = {q:.4g}), composed over T_gd x the most "
             f"participations of any client ({steps[-1]} steps by round {cfg.rounds})")
    extra = {
        "dp_level": "record (sample-level, per participant's data)",
        "local_sampling_rate": q,
        "composed_steps": steps[-1],
        "max_participations": parts[-1],
        "epsilon_every_round": eps_all,
        "epsilon_step_agm": step_eps,
        "noise_in_steps": sigma / self.step,
        "batch_capacity": self.batch_capacity,
        "lattice": self.quantizer.kind,
        "lattice_step": self.quantizer.step,
        "lattice_dim": self.quantizer.dim,
        "lattice_error_std": float(np.sqrt(self.quantizer.error_variance)),
        "clipped_fraction": None,
    }
    return eps, label, extra


def max_participations(sampling_keys: jax.Array, num_clients: int, rate: float,
                       capacity: int, sampler: str, rounds_list) -> list[int]:
  """Largest number of rounds any client joined within rounds 1..t, per t.

  Recomputes every round's cohort from the run's sampling keys exactly as
  the round does (``sampling.sample_cohort`` with the run's capacity).
  """
  cohorts = jax.jit(jax.vmap(functools.partial(
      sampling.sample_cohort, num_clients=num_clients, rate=rate, capacity=capacity,
      sampler=sampler)))(sampling_keys)
  indices, mask = np.asarray(cohorts.indices), np.asarray(cohorts.mask)
  joined = np.zeros((indices.shape[0], num_clients), np.int32)
  rows = np.repeat(np.arange(indices.shape[0]), indices.shape[1])
  np.add.at(joined, (rows, indices.reshape(-1)), mask.reshape(-1).astype(np.int32))
  running = np.cumsum(joined, axis=0).max(axis=1)
  return [int(running[t - 1]) if t >= 1 else 0 for t in rounds_list]


CDP_LQ_SCHEMES = {"CDP-LQ": LatticeScheme()}
