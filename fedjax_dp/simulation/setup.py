"""The server's work before round 1: validation, setup, S, slots, and the run's :class:`Plan`."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp import features as features_lib
from fedjax_dp import keys, sampling, sharding
from fedjax_dp.data import ClientData
from fedjax_dp.errors import ConfigError
from fedjax_dp.models import FlatModel
from fedjax_dp.privacy import accounting, secure_aggregation
from fedjax_dp.schemes.base import Scheme, SetupData, Traits
from fedjax_dp.simulation.config import Privacy, RunConfig
from fedjax_dp.simulation import plan as plan_lib
from fedjax_dp.simulation.plan import Communication, Plan
from fedjax_dp.simulation.round import ServerState

# Cohorts above this many slots are trained and summed AUTO_CHUNK at a time.
AUTO_CHUNK_ABOVE = 256
AUTO_CHUNK = 128
# On a CPU the cohort goes CPU_CHUNK_PER_DEVICE slots a device at a time: a
# chunk of padding slots only (a Poisson cohort smaller than its capacity) is
# then skipped, not trained, and smaller chunks cost nothing there
# (docs/performance.md, "Padding slots are not trained"). Where chunks would train more
# slots over the planned rounds than one piece (a cohort that is always
# full, such as thesis Table 8.3's 10 clients), the cohort goes in one piece.
CPU_CHUNK_PER_DEVICE = 4


def default_chunk(capacity: int, devices: int, robust: bool,
                  cohort_sizes: np.ndarray) -> int | None:
  """The slots trained and summed at a time when ``client_chunk`` is None.

  Args:
    capacity: The cohort's slots.
    devices: The devices the slots are sharded over.
    robust: A robust aggregator (it needs every update at once).
    cohort_sizes: The planned rounds' cohort sizes: on a CPU the chunks are
      used only if they train fewer slots over these rounds than one piece
      does (every chunk holding a sampled client is trained).
  """
  if robust:
    return None
  if jax.default_backend() == "cpu":
    chunk = CPU_CHUNK_PER_DEVICE * devices
    if capacity <= chunk:
      return None
    filled = np.minimum(np.asarray(cohort_sizes), capacity)
    if np.sum(-(-filled // chunk) * chunk) >= capacity * filled.size:
      return None
    return chunk
  return AUTO_CHUNK if capacity > AUTO_CHUNK_ABOVE else None


def communication(traits: Traits, cfg: RunConfig, capacity: int,
                  clip_norm: float | None, largest: int | None = None) -> Communication:
  """Secure-aggregation settings and bits per value up and down.

  Secure aggregation applies to DP schemes and to schemes with bounded
  integer messages (FL-SIGN, signSGD); the bit width is ``--secure-bits`` or
  thesis 5.2.4's ``ceil(log2((12 S sigma + max|x|) |K| 2^f))``, never less
  than the largest cohort's noiseless sum needs
  (``secure_aggregation.bit_width``). |K| is ``capacity``, the run's
  expected cohort (the thesis' C N), and |K|max is ``largest`` (default
  |K|), the largest planned one, each with the features' slots; the run
  leaves the cohort's padding to the device count out of both. S sigma is
  the aggregate noise std, max|x| the
  largest noiseless coordinate (1 for signs, S after clipping) and 2^f the
  fixed-point scale (1 for integers). Without it a value costs 32 bits, or
  the scheme's own figure (1 for a sign; the thesis modulus for FL-SIGN-DP,
  whose Alg. 9 always encrypts).
  """
  sec = cfg.secure
  integer = traits.integer_messages
  scale = 1.0 if integer else float(2 ** sec.secure_frac_bits)
  max_abs = traits.max_abs_value or clip_norm
  noise_std = clip_norm * cfg.privacy.noise_multiplier if traits.dp else 0.0

  def formula(scale):
    return secure_aggregation.bit_width(noise_std, max_abs, capacity, scale,
                                        max(largest or capacity, capacity))

  secure = sec.secure_aggregation and (traits.dp or integer)
  bits = (sec.secure_bits or formula(scale)) if secure else None
  up = traits.upstream_bits
  if bits is not None:
    up = bits
  elif up is None:
    up = formula(1.0)
  return Communication(bits, scale if secure else 1.0,
                       None if (not secure or integer) else sec.secure_frac_bits, up,
                       traits.downstream_bits)


class Prepared(NamedTuple):
  """What :func:`prepare` returns: ``state, plan = prepare(...)``.

  Attributes:
    state: The initial server state.
    plan: The run resolved once (:class:`~fedjax_dp.simulation.plan.Plan`).
  """

  state: ServerState
  plan: Plan


def _check_clients(data: ClientData) -> None:
  """Rejects a client without examples (every row the padding label -1).

  Padded clients of unequal size (``fedjax_dp.data.partitioning``) are
  otherwise fine: local training draws only real rows and the losses ignore
  padding; client-level DP clips a client's whole update whatever its size;
  and record-level DP (CDP-LQ) samples every row with the accounted rate
  q = |B| / width, a padding row adding a zero gradient.
  """
  sizes = np.asarray(jnp.sum(data.y >= 0, axis=1))
  if sizes.min() < 1:
    raise ValueError(f"client {int(np.argmin(sizes))} holds no examples (all its labels "
                     "are the padding label -1)")


def clip_norm_of(scheme: Scheme, privacy: Privacy, setup_data: SetupData,
                 state: Any) -> tuple[float, str]:
  """S of a DP run, and where it came from (the record's ``clip_source``).

  The one place S is decided: a scheme of fixed sensitivity computes its own
  (``Traits.sensitivity_reason``; a given S does not apply); else the given
  ``privacy.clip_norm`` ("given"); else S calibrated on public data (UAI
  Sec. 4), at the run's ratio or at ``privacy.clip_ratio`` for every ratio
  (Fed-SMP Sec. 6.2).
  """
  if scheme.traits.fixed_sensitivity:
    return float(scheme.calibrate_clip(setup_data, state)), scheme.traits.sensitivity_reason
  if privacy.clip_norm is not None:
    return float(privacy.clip_norm), "given"
  ratio = privacy.clip_ratio
  if ratio is None:
    return float(scheme.calibrate_clip(setup_data, state)), "calibrated (UAI Sec. 4)"
  source = f"calibrated at r = {ratio:g} for every ratio (Fed-SMP Sec. 6.2)"
  if ratio == setup_data.ratio:
    return float(scheme.calibrate_clip(setup_data, state)), source
  at = setup_data._replace(ratio=ratio)
  return float(scheme.calibrate_clip(at, scheme.setup(at))), source


def validate(cfg: RunConfig, scheme: Scheme, model: FlatModel, num_clients: int,
             samples_per_client: int, run_key: jax.Array, *,
             sigma_calibrated: bool = False) -> Plan:
  """Checks a config with a scheme, a model and the data's shape, and starts
  the run's Plan (cheap: before the server's setup).

  With ``Privacy.target_epsilon`` (a DP scheme) the config's sigma is a
  placeholder (``Plan.sigma_pending``: the features' checks of sigma wait)
  unless ``sigma_calibrated``: :func:`prepare` passes it once it has
  calibrated sigma.

  Returns:
    The :class:`~fedjax_dp.simulation.plan.Plan` with S, the capacity, the
    features and the constants still open (:func:`prepare` fills them; its
    features checked it as a ``features.RunView``).

  Raises:
    ConfigError: One line naming the field (a plain ValueError for the data).
  """
  cfg.validate(num_clients)
  n = model.num_params
  scheme.validate(n, cfg.ratio)
  optimizer = cfg.training.local_optimizer
  if optimizer not in scheme.traits.local_optimizers:
    raise ConfigError("local_optimizer", f"{optimizer!r} does not apply to {scheme.name}, "
                      f"which trains with {' or '.join(scheme.traits.local_optimizers)}")
  metric = cfg.training.selection_metric
  if metric != "accuracy" and model.loss_name != "sigmoid_ce":
    raise ConfigError("selection_metric", f"{metric!r} needs a binary model; {model.name} "
                      "is evaluated by accuracy")
  _check_aggregator(cfg, scheme)
  k = scheme.num_kept(n, cfg.ratio)
  priv = cfg.privacy
  mesh = sharding.client_mesh(cfg.execution.devices)
  mechanism = features_lib.mechanism(
      cfg, scheme.mechanism(priv.noise_multiplier, k, cfg.local, samples_per_client))
  plan = Plan(config=cfg, scheme=scheme, num_clients=num_clients, num_kept=k,
              num_params=n, samples_per_client=samples_per_client,
              noise_multiplier=priv.noise_multiplier if scheme.traits.dp else 0.0,
              sigma_pending=(scheme.traits.dp and priv.target_epsilon is not None
                             and not sigma_calibrated),
              mesh=mesh, mechanism=mechanism, run_key=run_key)
  features_lib.check(cfg, plan)
  accounting.check_mechanism(mechanism, priv.accountant, priv.sampler)
  return plan


def _check_aggregator(cfg: RunConfig, scheme: Scheme) -> None:
  """A robust aggregator needs every individual update in the clear."""
  if cfg.aggregator is None or not cfg.aggregator.robust:
    return
  name = cfg.aggregator.name
  if cfg.secure.secure_aggregation:
    raise ConfigError("aggregator", f"{name} needs the individual updates, which secure "
                      "aggregation hides (thesis Sec. 3.3.2)")
  if scheme.traits.dp:
    raise ConfigError("aggregator", f"{name} needs the individual updates; {scheme.name}'s "
                      "noise shares are sized for a sum, so its epsilon would not hold")
  if cfg.execution.client_chunk is not None:
    raise ConfigError("aggregator", f"{name} needs every update at once; client_chunk "
                      "streams a sum")


def prepare(model: FlatModel, scheme: Scheme, data: ClientData,
            public: tuple[np.ndarray, np.ndarray], cfg: RunConfig | Plan) -> Prepared:
  """Validates, then runs the server's work before round 1 and fills the run's Plan.

  ``cfg`` is the run's config, or the Plan :func:`validate` started for it
  (a front end that checks every run before the first starts): that one is
  not validated again when it is of this scheme, a model of as many weights
  and the data's shape.

  With ``Privacy.target_epsilon`` (a DP scheme), sigma is first calibrated
  on the run as resolved (``record.calibrated_sigma``: its accountant,
  sampler, capacity and noise strategy), then the run is resolved again
  with that sigma, which the config then holds.

  w0, the scheme's setup on public data, S (the user's, calibrated, or the
  scheme's fixed sensitivity), the features (built once), the cohort
  capacity, the noise shares, the device mesh, bit widths and chunks.

  Returns:
    ``state, plan``: the initial :class:`ServerState` and the
    :class:`~fedjax_dp.simulation.plan.Plan` that the round, the features
    and the record read.

  Raises:
    ValueError: A bad setting (one line, naming the parameter).
  """
  config = cfg.config if isinstance(cfg, Plan) else cfg
  target = config.privacy.target_epsilon
  if target is None or not scheme.traits.dp:
    return _prepare(model, scheme, data, public, cfg)
  from fedjax_dp.simulation import record  # pylint: disable=import-outside-toplevel
  _, plan = _prepare(model, scheme, data, public, cfg)
  sigma = record.calibrated_sigma(plan, target)
  calibrated = validate(config.replace(noise_multiplier=sigma), scheme, model, plan.num_clients,
                        plan.samples_per_client, plan.run_key, sigma_calibrated=True)
  return _prepare(model, scheme, data, public, calibrated)


def _validated(model: FlatModel, scheme: Scheme, data: ClientData,
               cfg: RunConfig | Plan) -> Plan:
  """The run's Plan as :func:`validate` starts it: ``cfg`` itself when it is
  one of this scheme, model size and data shape (validated already)."""
  shape = (int(data.x.shape[0]), int(data.x.shape[1]))
  if isinstance(cfg, Plan):
    if (cfg.scheme is scheme and cfg.num_params == model.num_params
        and (cfg.num_clients, cfg.samples_per_client) == shape):
      return cfg
    cfg = cfg.config
  return validate(cfg, scheme, model, *shape, keys.run_key(cfg.training.seed))


def _prepare(model: FlatModel, scheme: Scheme, data: ClientData,
             public: tuple[np.ndarray, np.ndarray], cfg: RunConfig | Plan) -> Prepared:
  """:func:`prepare` at the config's sigma."""
  run = _validated(model, scheme, data, cfg)
  cfg, root = run.config, run.run_key
  num_clients, samples = run.num_clients, run.samples_per_client
  _check_clients(data)
  traits, train, priv = scheme.traits, cfg.training, cfg.privacy
  mesh, multiple, noise_multiplier = run.mesh, run.slot_multiple, run.noise_multiplier
  setup_data = SetupData(
      model=model, w0=jax.jit(model.init)(keys.purpose(root, keys.INIT)),
      public_x=jnp.asarray(public[0]), public_y=jnp.asarray(public[1]),
      key=keys.purpose(root, keys.SETUP), ratio=cfg.ratio, init_steps=train.init_steps,
      local=cfg.local, run_key=root, num_clients=num_clients, samples_per_client=samples,
      rounds=train.rounds, noise_multiplier=noise_multiplier, num_shares=(0, 0))
  scheme_state = scheme.setup(setup_data)
  clip_norm, clip_source = (clip_norm_of(scheme, priv, setup_data, scheme_state)
                            if traits.dp else (None, None))
  features = features_lib.build(cfg, dataclasses.replace(run, clip_norm=clip_norm))
  mechanism = functools.reduce(lambda m, f: f.accounted(m), features, run.mechanism)
  sampling_keys = jax.vmap(lambda t: keys.round_keys(root, t).sampling
                           )(jnp.arange(1, train.rounds + 1))
  share = plan_lib.sampler_share(features, root, num_clients)
  schedule = plan_lib.schedule(cfg, num_clients, root)
  sizes = sampling.planned_cohort_sizes(sampling_keys, num_clients, run.rate, priv.sampler,
                                        share, cycle_length=priv.cycle_length,
                                        schedule=schedule)
  capacity = sampling.capacity_for(sizes, num_clients, multiple=multiple)
  if priv.max_cohort is not None:  # truncated Poisson: keep a random subset
    capacity = min(capacity, priv.max_cohort)
  # The features' states and slots: the noise shares are sized for every slot.
  inits = [f.init() for f in features]
  extra = sum(slots for _, slots in inits)
  dropouts = cfg.dropouts.max_dropouts if traits.dp else 0
  num_shares = (max(1, int(min(sizes.min(), capacity)) - dropouts),
                max(1, capacity + extra - dropouts))
  constants = _run_constants(scheme, setup_data._replace(num_shares=num_shares), clip_norm)
  client_chunk = cfg.execution.client_chunk
  if client_chunk is None:
    robust = cfg.aggregator is not None and cfg.aggregator.robust
    client_chunk = default_chunk(capacity + extra, sharding.mesh_size(mesh), robust, sizes)
  largest = min(int(sizes.max()), capacity)
  comm = communication(traits, cfg, min(train.clients_per_round, largest) + extra, clip_norm,
                       largest + extra)
  plan = dataclasses.replace(
      run, capacity=capacity, clip_norm=clip_norm, clip_source=clip_source,
      num_shares=num_shares, client_chunk=client_chunk, features=features,
      feature_slots=tuple(slots for _, slots in inits), comm=comm, mechanism=mechanism,
      scheme_constants=constants, sampling_keys=sampling_keys)
  state = ServerState(setup_data.w0, scheme_state, tuple(fstate for fstate, _ in inits))
  return Prepared(state, plan)


def _run_constants(scheme: Scheme, data: SetupData, clip_norm: float | None) -> Any:
  """The scheme's ``run_constants`` for a DP run of a scheme that declares
  ``traits.run_constants``; None otherwise."""
  if not (scheme.traits.dp and scheme.traits.run_constants):
    return None
  return scheme.run_constants(data, clip_norm)
