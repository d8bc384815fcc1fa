"""A run's record: UAI Table 1's columns, the run's details and its features'."""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any, TypedDict


from fedjax_dp import bandwidth, sampling, sharding
from fedjax_dp.compression import universal_coding
from fedjax_dp.models import FlatModel
from fedjax_dp.privacy import accounting, bisection
from fedjax_dp.simulation.plan import Plan


class Record(TypedDict, total=False):
  """The JSON-ready record of a run (``simulation.run``).

  The scheme adds its ``describe()`` and ``diagnostics`` fields, the
  accountant its own (``accounting.PrivacyReport.fields``), each round
  feature its ``record`` (dropouts: ``max_dropouts``, ``dropout_rate``,
  ``dropped_clients``, ``under_noised_rounds``; an attack: ``attack`` and
  the backdoor metrics; the audit: ``empirical_epsilon``, ``audit`` and,
  from the whole record (``Feature.review``), ``violation``;
  adaptive clipping: ``adaptive_clip``), and a coded-stream scheme its
  measured sizes.
  """

  scheme: str
  ratio: float
  best_accuracy: float
  best_round: int
  selection_metric: str
  final_accuracy: float
  downstream_kb: float
  upstream_kb: float
  measured_upstream_kb: float
  upstream_bits: float
  downstream_bits: int
  secure_aggregation: bool
  secure_bits: int | None
  secure_frac_bits: int | None
  secure_neighbours: int | None
  secure_overflows: int
  client_chunk: int | None
  aggregator: dict
  upstream_values: int
  downstream_values: int
  epsilon: float | None
  epsilon_final: float | None
  delta: float | None
  accountant: str | None
  sampler: str
  noise_multiplier: float
  clip_norm: float | None
  clip_source: str | None
  clipped_fraction: float | None
  rounds: int
  local_optimizer: str
  num_params: int
  num_clients: int
  clients_per_round: int
  capacity: int
  devices: int
  max_cohort: int | None
  truncated_rounds: int
  mean_cohort: float
  seed: int
  seconds: float
  nonfinite_round: int
  history: list
  violation: bool


def privacy_report(plan: Plan, rounds_list) -> accounting.PrivacyReport:
  """Epsilon after each round count of ``rounds_list``: the scheme's mechanism
  composed by ``fedjax_dp.privacy.accounting.report``."""
  share = plan.sampler_share(plan.run_key)
  priv = plan.config.privacy

  def participations(ts):
    return sampling.max_participations(plan.sampling_keys, plan.num_clients, plan.rate,
                                       plan.capacity, plan.sampler, ts, share,
                                       cycle_length=priv.cycle_length, schedule=schedule)

  schedule = plan.schedule(plan.run_key)
  return accounting.report(
      plan.mechanism, rounds_list, priv.delta, priv.accountant,
      accounting.Sampling(plan.rate, plan.sampler, plan.num_clients, plan.num_shares[1],
                          priv.max_cohort, participations, priv.cycle_length,
                          separation=1 if schedule is None else schedule.separation,
                          prob=1.0 if schedule is None else schedule.prob,
                          monte_carlo=(priv.mc_samples, priv.mc_confidence, priv.mc_seed)))


class TargetUnreachable(ValueError):
  """No noise multiplier up to 1e4 meets the target epsilon
  (:func:`calibrated_sigma`)."""


def calibrated_sigma(plan: Plan, target: float, tolerance: float = 1e-4) -> float:
  """The smallest sigma (to ``tolerance``, rounded up) whose epsilon after
  the run's last round, as :func:`privacy_report` computes it for this plan,
  is at most ``target``: any accountant, sampler and mechanism.

  Monte Carlo accounting calibrates on the draws of ``mc_seed + 1``, so
  that the record's epsilon (``mc_seed``'s draws) is not chosen from its
  own draws, and to 1e-3 (each evaluation costs up to a minute; cached).

  Raises:
    TargetUnreachable: One line (a ValueError): no sigma up to 1e4 reaches
      the target.
  """
  rounds = plan.config.training.rounds
  priv = plan.config.privacy
  if priv.accountant == accounting.MONTE_CARLO:
    plan = dataclasses.replace(plan, config=plan.config.replace(mc_seed=priv.mc_seed + 1))
    tolerance = max(tolerance, 1e-3)

  def eps(sigma: float) -> float:
    trial = dataclasses.replace(plan, mechanism=plan.mechanism._replace(noise_multiplier=sigma))
    try:
      return privacy_report(trial, [rounds]).epsilons[0]
    except accounting.SigmaTooSmall:  # FL-SIGN-DP's Theorem 3 says nothing there
      return math.inf

  hi = bisection.smallest(lambda s: eps(s) <= target, tolerance, top=1e4)
  if hi is None:
    raise TargetUnreachable(f"no noise multiplier up to 1e4 reaches epsilon {target:g}")
  return math.ceil(round(hi / tolerance, 6)) * tolerance


def target_missed(plan: Plan, epsilon_final: float | None) -> str | None:
  """Why the run's epsilon after its last round is above ``--target-epsilon``,
  in one line, or None. Only Monte Carlo accounting can miss: sigma is
  calibrated on the draws of ``mc_seed + 1`` and the record's bound is a
  fresh draw (``mc_seed``), so it lands on either side of the target by the
  bound's own spread; the other accountants are deterministic."""
  target = plan.config.privacy.target_epsilon
  if target is None or epsilon_final is None or epsilon_final <= target:
    return None
  return (f"{plan.scheme.name}: epsilon {epsilon_final:.4g} after the last round, above "
          f"--target-epsilon {target:g}: sigma {plan.noise_multiplier:g} was calibrated on the "
          "Monte Carlo draws of --mc-seed + 1 and the record's bound is another draw "
          "(docs/correlated-noise.md); more --mc-samples narrow the gap")


def _warn(name: str, comm, counters, history: list[dict]) -> list[int]:
  """Warns of what makes a run's figures suspect; returns the rounds whose
  test outputs were NaN or infinite."""
  if counters.overflows:
    warnings.warn(f"{name}: {counters.overflows} coordinate sums overflowed the "
                  f"{comm.secure_bits}-bit secure-aggregation modulus")
  broken = [h["round"] for h in history if h.get("nonfinite")]
  if broken:
    warnings.warn(f"{name}: the model's test outputs were NaN or infinite at "
                  f"{len(broken)} of {len(history)} evaluations, first at round "
                  f"{broken[0]}; its accuracy there is that of a constant prediction")
  return broken


def best_entry(history: list[dict], metric: str) -> dict:
  """The best evaluation by ``metric`` (the earliest of ties) among those whose
  model was finite: a NaN model predicts one class, which can beat a
  diverging run's earlier rounds (all of them if none was finite)."""
  return max([h for h in history if not h.get("nonfinite")] or history,
             key=lambda h: (h[metric], -h["round"]))


def _upstream_bits(plan: Plan, coded_sizes: list) -> tuple[float, dict]:
  """Bits per upstream value and the coded streams' summary: measured coded
  bits replace the nominal figure, but not under secure aggregation, where a
  masked value is uniform mod 2^b and sent as b bits."""
  comm = plan.comm
  if plan.scheme.traits.measured_streams == 0:
    return comm.upstream_bits, {}
  coded = universal_coding.summarize(coded_sizes)
  if coded_sizes and comm.secure_bits is None:
    return coded["coded_bits_per_value"], coded
  return comm.upstream_bits, coded


def make_record(model: FlatModel, plan: Plan, trained: Any, seconds: float) -> Record:
  """The run's record (UAI Table 1's columns and the run's details)."""
  scheme, cfg, comm, counters = plan.scheme, plan.config, plan.comm, trained.counters
  train, priv = cfg.training, cfg.privacy
  dp, n, k = scheme.traits.dp, model.num_params, plan.num_kept
  history = trained.history
  best = best_entry(history, train.selection_metric)
  broken = _warn(scheme.name, comm, counters, history)
  privacy = privacy_report(plan, [best["round"], train.rounds])
  if missed := target_missed(plan, privacy.epsilons[1]):
    warnings.warn(missed)
  upstream_bits, coded = _upstream_bits(plan, trained.coded_sizes)
  down_values = scheme.num_downstream(n, cfg.ratio)
  parts = counters.participations
  client_level = plan.mechanism.kind != "none" and plan.mechanism.level == "client"
  features = {}
  for f, fstate in zip(plan.features, trained.state.features):
    features.update(f.record(fstate, best))
  record = Record(
      scheme=scheme.name,
      ratio=cfg.ratio if scheme.traits.uses_ratio else 1.0,
      best_accuracy=best["accuracy"],
      best_round=best["round"],
      selection_metric=train.selection_metric,
      **{m: best[m] for m in ("balanced_accuracy", "auroc") if m in best},
      final_accuracy=history[-1]["accuracy"],
      downstream_kb=bandwidth.cost_kb(down_values, best["round"], plan.rate,
                                      comm.downstream_bits),
      upstream_kb=bandwidth.cost_kb(k, best["round"], plan.rate, upstream_bits),
      measured_upstream_kb=bandwidth.measured_cost_kb(k, parts - counters.silent,
                                                      plan.num_clients, upstream_bits),
      upstream_bits=upstream_bits,
      downstream_bits=comm.downstream_bits,
      secure_aggregation=comm.secure_bits is not None,
      secure_bits=comm.secure_bits,
      secure_frac_bits=comm.secure_frac_bits,
      secure_neighbours=cfg.secure.secure_neighbours if comm.secure_bits else None,
      secure_overflows=counters.overflows,
      client_chunk=plan.client_chunk,
      **({"aggregator": dataclasses.asdict(plan.aggregator)} if plan.aggregator else {}),
      upstream_values=k,
      downstream_values=down_values,
      epsilon=privacy.epsilons[0],
      epsilon_final=privacy.epsilons[1],
      delta=priv.delta if dp else None,
      accountant=privacy.label,
      sampler=priv.sampler,
      noise_multiplier=plan.noise_multiplier,
      clip_norm=plan.clip_norm,
      clip_source=plan.clip_source,
      clipped_fraction=counters.clipped / max(parts, 1) if client_level else None,
      rounds=train.rounds,
      # Named where it is not the SGD every record before it used.
      **({"local_optimizer": train.local_optimizer} if train.local_optimizer != "sgd" else {}),
      num_params=n,
      num_clients=plan.num_clients,
      clients_per_round=train.clients_per_round,
      capacity=plan.capacity,
      devices=sharding.mesh_size(plan.mesh),
      max_cohort=priv.max_cohort,
      truncated_rounds=counters.truncated,
      mean_cohort=parts / train.rounds,
      seed=train.seed,
      seconds=seconds,
      **({"nonfinite_round": broken[0]} if broken else {}),
      history=history,
      **features,
      **scheme.diagnostics(trained.state.scheme_state, train.rounds),
      **scheme.describe(),
      **scheme.describe_run(plan.scheme_constants, plan.noise_multiplier),
      **privacy.fields,
      **coded,
  )
  for f in plan.features:  # what a feature decides from the whole record (the audit's violation)
    record.update(f.review(record))
  return record
