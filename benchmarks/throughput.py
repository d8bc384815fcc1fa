"""Clients/s of schemes in the paper setting, split by stage, against PyTorch.

The paper's Fashion-MNIST setting (CNN of 1,663,370 weights, 5 local steps of
batch 10, a fixed cohort of ``--clients-per-round`` real clients). Reports,
after a warm-up call that compiles (its extra time is the compile time):

* rounds/s and clients/s of the whole jitted round (``make_rounds_fn``,
  ``--rounds-per-call`` rounds per compiled call);
* the round split into local training (every client's SGD), compression +
  privacy (encoding, clipping, noise, the secure sum) and the server decode,
  each jitted and timed on its own;
* evaluation of the 10,000 test images, in GFLOP/s (XLA's count of the
  model's operations, on the program as lowered: a GPU's compiled count
  misses the convolutions it hands to cuDNN) next to the float32 matmul
  rate of the same devices, and the round's training rate (3 x the forward
  FLOPs of every example of every local step, over the whole round's time);
* peak memory (process RSS, and the compiled round's buffers);
* PyTorch on the same card, timed in the same process, alternating with the
  JAX round, doing the same work (the same model, clients, batch, steps and
  learning rate; every client starts from the global weights and the
  updates are summed): a plain per-client loop (what Flower/pfl-style
  simulators do; ``--torch-loop-clients``, 50 by default: its pace does not
  depend on the cohort) and ``torch.func`` (``functional_call`` + ``grad`` +
  ``vmap`` over the clients, ``--torch-func`` chunks of clients at a time;
  the strongest plain-PyTorch form), with TF32 allowed for float32 products
  and convolutions on a GPU (JAX's default precision there). The record
  names each mode, chunk, the TF32 setting and the device, and gives the
  ratio of our clients/s to each (``ratio_to_torch_func``, to the best
  chunk; ``ratio_to_torch``, to the loop).

Timings are the best of ``--repeats`` runs (the least disturbed by other
processes on a shared machine); the load average is printed with them.

  python benchmarks/throughput.py --scheme FL-TOP-DP --clients-per-round 100 --json
  python benchmarks/throughput.py --scheme all --no-torch   # every scheme, one run
  python benchmarks/throughput.py --scheme FL-STD-DP --clients-per-round 100,1000 \
      --batching map,product --model paper-cnn,paper-cnn-flax --out records.jsonl

Every combination of ``--model`` (the registered paper CNN, or the same CNN
as a flax module through ``models.from_flax``, the path a user's model
takes), ``--batching`` (how the per-client convolutions are batched over
the cohort: ``fedjax_dp.models.cohort_ops.cohort_batching``), ``--scheme``
(a comma-separated list, or ``all``) and ``--clients-per-round`` (a list;
cohorts above the data's 6,000 clients repeat them) runs one after the
other in one process, and a table compares each round (without
evaluation) with FL-STD's of the same model, batching and cohort. Above
``--split-max-clients`` the stages are not timed apart (they would hold
every client's update at once; the round sums them in chunks).
``--profile DIR`` writes a profiler trace of one more round of the last
case, and the compiled round's HLO beside it (``DIR/round.hlo.txt``), by
which ``benchmarks/trace_summary.py DIR`` reads a CPU trace's ops. ``benchmarks/gpu_suite.sh`` runs the GPU suite (issues 41, 47).

``--noise independent,banded,blt`` (issue 49) times each scheme's round with
each noise: today's fresh noise per round, or the server's noise correlated
across rounds (``features.CorrelatedNoiseConfig``: banded matrix
factorization with ``--bands``, or BLT), whose streaming inverse runs in
the round (the feature's ``begin`` and ``total`` hooks: z_t, the
strategy's buffers, the noise added to the sum) and in the privacy stage.
Banded noise needs a client's participations ``--bands`` rounds apart:
``--cycle-length b`` samples every case of the run, independent noise
included, by cyclic Poisson sampling over b groups (expected cohort
``--clients-per-round``, padded to the planned capacity), so that the cases
differ in their noise only; with ``--cycle-length 1`` (the default) the
cohort is fixed, as above. The strategy is built for the paper's
T_cl = 200 rounds (or the timed rounds, if more); the summary's ``x indep``
is each round over the same scheme's round with independent noise.

  python benchmarks/throughput.py --scheme FL-STD-DP --no-torch \
      --noise independent,banded,blt --cycle-length 4   # bands: the cycle length

PyTorch is optional (``pip install 'fedjax_dp[bench]'``); ``--no-torch``
runs JAX alone. ``--no-eval`` skips the evaluation (its compile and FLOP
count: a few seconds a case, which the GPU suite spends on other cases).
The round is set up exactly as ``simulation.run`` sets it up
(``simulation.prepare``: the scheme's setup on the public batch, its clip
norm, capacity and bit widths), so every registered scheme runs here.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pathlib
import resource
import sys
from typing import NamedTuple

from fedjax_dp import host_devices, options  # imports no JAX
from fedjax_dp.cli import types as flag_types  # imports no JAX

# One XLA CPU device per core (before JAX starts); see fedjax_dp.host_devices.
host_devices.configure()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

# benchmarks/common.py
from common import best_seconds as _best  # noqa: E402
from common import OneLineParser, check_out, load_paper_data, lowered_flops  # noqa: E402
from common import machine, matmul_gflops  # noqa: E402
import torch_cnn  # noqa: E402  (benchmarks/torch_cnn.py)
from fedjax_dp import features, sharding, simulation  # noqa: E402
from fedjax_dp.data import DataError, public_batch  # noqa: E402
from fedjax_dp.models import cohort_ops, from_flax, paper_cnn  # noqa: E402
from fedjax_dp.models.cnn import PaperCNN  # noqa: E402
from fedjax_dp.privacy import correlated, noise  # noqa: E402
from fedjax_dp.schemes import SCHEMES, get_scheme  # noqa: E402


def _peak_rss_mb() -> float:
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KB on Linux


def _device_peak_mb() -> float | None:
  """Peak bytes in use on the first device, where the backend reports it (GPU)."""
  stats = jax.devices()[0].memory_stats() or {}
  peak = stats.get("peak_bytes_in_use")
  return None if peak is None else peak / 2**20


# The rounds a run with correlated noise or cyclic sampling is planned for
# (its noise strategy, its Poisson cohorts' capacity): UAI Table 5's T_cl.
PAPER_ROUNDS = 200


class NoiseCase(NamedTuple):
  """The noise across rounds a case runs with (``--noise``) and its sampling.

  Attributes:
    noise: ``correlated.KINDS``: "independent" (fresh noise each round, the
      clients' shares), "banded" or "blt" (the server's, correlated).
    bands: b of banded noise (None: the cycle length).
    min_separation: The strategy's min-separation (None: the cycle length).
    cycle_length: 1: a fixed cohort of ``clients`` clients; b > 1: cyclic
      Poisson sampling over b groups (expected cohort ``clients``).
  """

  noise: str = "independent"
  bands: int | None = None
  min_separation: int | None = None
  cycle_length: int = 1

  def config(self) -> features.CorrelatedNoiseConfig | None:
    """The feature's config (None: independent noise)."""
    if self.noise == "independent":
      return None
    bands = (self.bands or self.cycle_length) if self.noise == "banded" else 1
    return features.CorrelatedNoiseConfig(self.noise, bands)

  def label(self) -> str:
    """"independent", "banded-4", "blt" (the record's ``noise``)."""
    config = self.config()
    return self.noise if config is None or self.noise != "banded" else \
        f"banded-{config.bands}"

  def plan_rounds(self, timed_rounds: int) -> int:
    """The rounds the run is planned for: the timed ones, or at least
    ``PAPER_ROUNDS`` where a strategy or cyclic cohorts depend on them."""
    plain = self.cycle_length == 1 and self.noise == "independent"
    return timed_rounds if plain else max(timed_rounds, PAPER_ROUNDS)


def round_config(clients: int, ratio: float, devices: int | None, rounds: int = 8,
                 client_chunk: int | None = None,
                 noise_case: NoiseCase = NoiseCase()) -> simulation.RunConfig:
  """The config of :func:`prepared_round`'s round (see there)."""
  cyclic = noise_case.cycle_length > 1
  return simulation.RunConfig.of(
      ratio=ratio, rounds=rounds, clients_per_round=clients,
      sampler="poisson" if cyclic else "fixed", cycle_length=noise_case.cycle_length,
      min_separation=noise_case.min_separation if cyclic else None, accountant="rdp",
      clip_norm=0.6, devices=devices, client_chunk=client_chunk,
      correlated_noise=noise_case.config())


def prepared_round(model, scheme_name: str, data, public, clients: int, ratio: float,
                   devices: int | None, rounds: int = 8,
                   client_chunk: int | None = None,
                   noise_case: NoiseCase = NoiseCase()) -> simulation.Prepared:
  """The round of ``simulation.run`` for one scheme, in the paper setting.

  UAI 2021 Table 5 (T_gd = 5, |B| = 10, eta = 0.215, sigma = 1.54), with a
  fixed cohort of ``clients`` real clients (so that clients/s is exact) and
  S = 0.6 where the scheme clips (its cost does not depend on S);
  ``client_chunk`` slots trained and summed at a time (None: the run's
  default). ``noise_case``: the noise across rounds, and cyclic Poisson
  sampling (expected cohort ``clients``) where its cycle length is above 1.
  """
  cfg = round_config(clients, ratio, devices, rounds, client_chunk, noise_case)
  return simulation.prepare(model, get_scheme(scheme_name), data, public, cfg)


def stage_fns(model, plan: simulation.Plan, run_key, t):
  """The round's stages as separate jitted functions (the round's own pieces).

  Returns:
    ``messages(state, data)``: local training and encoding of the cohort;
    ``privacy(messages)``: ``scheme.privatize`` (sharded as in the round),
    the plain sum, the shares' sum where the round draws it once
    (``Plan.noise_once``) and what the features add to it (their ``total`` hooks,
    from their round values: correlated noise's z_t, streamed through the
    strategy's inverse, and added);
    ``decode(state, total)``: ``scheme.server_update`` of the mean.
  """
  scheme = plan.scheme
  train = simulation.make_train_fn(model, plan)
  privatize_fn = simulation.make_privatize_fn(plan)

  def inputs(state):
    return simulation.round_inputs(plan, state, run_key, t)

  @jax.jit
  def messages(state, data):
    i = inputs(state)
    return train(state.weights, i.shared, data, i.cohort.indices, i.train_keys,
                 simulation.round_noise(plan, i, state.features))

  @jax.jit
  def privacy(state, msgs):
    i = inputs(state)
    round_noise = simulation.round_noise(plan, i, state.features)
    contribs, _ = privatize_fn(msgs, i.cohort.mask, i.noise_keys,
                               simulation.client_noise(plan, round_noise))
    if jnp.issubdtype(contribs.dtype, jnp.integer):
      return jnp.sum(jnp.where(i.cohort.mask[:, None], contribs, 0), axis=0)
    total = simulation.add_aggregate_noise(plan, i, round_noise,
                                           noise.masked_sum(contribs, i.cohort.mask),
                                           jnp.sum(i.cohort.mask))
    return _features_total(plan, state, i, round_noise, total)

  @jax.jit
  def decode(state, total):
    return scheme.server_update(state.weights, state.scheme_state,
                                total.astype(jnp.float32) / plan.clients_per_round,
                                inputs(state).shared)

  return messages, privacy, decode


def measure(model, scheme_name: str, data, test_x, public, *, clients: int, ratio: float,
            rounds_per_call: int = 1, repeats: int = 3, devices: int | None = None,
            torch: bool = False, split: bool = True, profile: str | None = None,
            client_chunk: int | None = None, torch_func_chunks=(128, None),
            torch_loop_clients: int | None = 50, evaluate: bool = True,
            noise_case: NoiseCase = NoiseCase()) -> dict:
  """Times one scheme's round, its stages, evaluation and (optionally) PyTorch.

  Args:
    torch: Time PyTorch doing the same work on the same card: the per-client
      loop and ``torch.func``.
    split: Also time the round's stages on their own (they hold every
      client's update at once, where the round sums them in chunks).
    profile: Write a profiler trace of one more round to this directory.
    client_chunk: Slots the round trains and sums at a time (None: the
      run's default, ``simulation.default_chunk``).
    torch_func_chunks: Clients ``torch.func`` trains at a time, one timing
      each (None: the whole cohort at once); empty: no ``torch.func``.
    torch_loop_clients: Clients the per-client loop trains (its pace does
      not depend on the cohort; None: the whole cohort); 0: no loop.
    evaluate: Time the evaluation of the test images (and count its FLOPs).
    noise_case: The noise across rounds and the sampling (:class:`NoiseCase`).

  Returns:
    The benchmark record (see the module docstring).
  """
  load_before = os.getloadavg()
  state, plan = prepared_round(
      model, scheme_name, data, public, clients, ratio, devices,
      rounds=noise_case.plan_rounds((repeats + 2) * rounds_per_call),
      client_chunk=client_chunk, noise_case=noise_case)
  mesh, run_key = plan.mesh, plan.run_key
  if mesh is not None:
    state, data, run_key = sharding.replicate((state, data, run_key), mesh)

  rounds_fn = simulation.make_rounds_fn(model, plan, rounds_per_call)
  t_next = [1]

  def call_round():
    nonlocal state
    state, _ = rounds_fn(state, data, run_key, jnp.int32(t_next[0]))
    jax.block_until_ready(state)
    t_next[0] += rounds_per_call

  first = _best(call_round, 1)  # the whole round's first call compiles
  stages = _stage_seconds(model, plan, state, data, run_key, t_next[0], repeats) if split \
      else (None, None, None)
  seconds = dict(zip(("local_training", "privacy_sum", "server_decode"), stages))
  seconds["server_noise"] = _server_noise_seconds(plan, state, run_key, t_next[0], repeats)
  seconds["evaluation"], eval_flops = _evaluation(model, mesh, state.weights, test_x, repeats) \
      if evaluate else (None, None)
  rss_jax_mb = _peak_rss_mb()

  # The whole round and PyTorch (the loop, each torch.func chunk), alternating.
  anchor = _torch_anchor(model, plan, state, data, run_key, torch_loop_clients,
                         torch_func_chunks) if torch else None
  round_times = []
  for _ in range(repeats):
    round_times.append(_best(call_round, 1) / rounds_per_call)
    if anchor is not None:
      anchor.time_once()
  if profile is not None:
    with jax.profiler.trace(profile):
      call_round()
    # The module that ran, by which trace_summary.py reads a CPU trace's ops.
    compiled = rounds_fn.lower(state, data, run_key, jnp.int32(t_next[0])).compile()
    pathlib.Path(profile, "round.hlo.txt").write_text(compiled.as_text(), encoding="utf-8")
  seconds.update(round=min(round_times), first_call=first)
  return {
      **_round_record(model, plan, noise_case, seconds, ratio=ratio, clients=clients,
                      rounds_per_call=rounds_per_call, anchor=anchor),
      **_flops_record(plan, seconds, eval_flops, test_x.shape[0] if evaluate else None,
                      clients),
      "peak_rss_mb": rss_jax_mb,
      "device_peak_mb": _device_peak_mb(),
      "recompiled": rounds_fn._cache_size() != 1,  # pylint: disable=protected-access
      "machine": machine(),
      "load_average": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
  }


def _round_record(model, plan: simulation.Plan, noise_case: NoiseCase, seconds: dict, *,
                  ratio: float, clients: int, rounds_per_call: int,
                  anchor: _TorchAnchor | None) -> dict:
  """The record's round, rates, PyTorch and seconds fields."""
  per_round, training_s = seconds["round"], seconds["local_training"]
  torch_rec = anchor.record(clients / per_round, None if training_s is None else
                            clients / training_s) if anchor is not None else _NO_TORCH
  torch_cps = torch_rec["torch_loop_clients_per_sec"]
  return {
      "scheme": plan.scheme.name, "ratio": ratio, "clients_per_round": clients,
      "noise": noise_case.label(), "cycle_length": noise_case.cycle_length,
      "min_separation": _min_separation(plan), "sampler": plan.sampler,
      "slots": plan.slots,
      "model": model.name, "cohort_batching": cohort_ops.batching(),
      "client_chunk": plan.client_chunk,
      "rounds_per_call": rounds_per_call,
      "rounds_per_sec": 1.0 / per_round,
      "clients_per_sec": clients / per_round,
      "train_clients_per_sec": None if training_s is None else clients / training_s,
      **torch_rec,
      "seconds": {
          "round": per_round,
          "local_training": training_s,  # with the encoder C(.)
          "privacy_sum": seconds["privacy_sum"],  # privatize (clip + noise) and the sum
          "server_decode": seconds["server_decode"],
          # The round's inputs and the features' total hooks on the sum alone:
          # correlated noise's z_t, its stream and its addition; with
          # independent noise (whose shares are in privacy_sum) the inputs only.
          "server_noise": seconds["server_noise"],
          "evaluation": seconds["evaluation"],
          "compile": max(seconds["first_call"] - per_round * rounds_per_call, 0.0),
          "first_call": seconds["first_call"],
          "torch_loop": None if torch_cps is None else
                        torch_rec["torch_loop_clients"] / torch_cps,
      },
      "clip_norm": plan.clip_norm,
      "devices": sharding.mesh_size(plan.mesh),
  }


def _flops_record(plan: simulation.Plan, seconds: dict, eval_flops: float | None,
                  images: int | None, clients: int) -> dict:
  """The record's FLOP rates (None where the evaluation was not timed)."""
  example_flops = None if eval_flops is None else eval_flops / images
  # Forward + backward: 3 x the forward pass, for every example of every step.
  train_flops = None if example_flops is None else \
      3 * example_flops * plan.local.steps * plan.local.batch_size * clients
  return {
      "evaluation_gflops_per_sec": None if eval_flops is None else
                                   eval_flops / seconds["evaluation"] / 1e9,
      # The whole round's time, so a lower bound on the training's rate.
      "round_training_gflops_per_sec": None if train_flops is None else
                                       train_flops / seconds["round"] / 1e9,
      "forward_flops_per_example": example_flops,
      "evaluation_images": images,
      "matmul_gflops_per_sec": matmul_gflops(plan.mesh),
  }


def _min_separation(plan: simulation.Plan) -> int | None:
  """The correlated-noise strategy's min-separation (None: independent noise)."""
  return next((f.strategy.min_separation for f in plan.features
               if f.kind == "correlated_noise"), None)


# The record's PyTorch fields where PyTorch does not run.
_NO_TORCH = {"torch_loop_clients_per_sec": None, "ratio_to_torch": None,
             "train_ratio_to_torch": None, "torch_loop_clients": None,
             "torch_func_clients_per_sec": None, "ratio_to_torch_func": None,
             "train_ratio_to_torch_func": None, "torch_func": None, "torch": None,
             "torch_max_logit_diff": None}


class _TorchAnchor:
  """PyTorch doing the round's local training on round 1's cohort: the
  per-client loop and ``torch.func`` at each chunk, warmed up once, then timed
  once per :meth:`time_once` (beside each timed JAX round)."""

  def __init__(self, runs: dict, loop_clients: int, clients: int, info: dict, agree: float):
    self.runs, self.loop_clients, self.clients, self.info, self.agree = (
        runs, loop_clients, clients, info, agree)
    self.times = {name: [] for name in runs}
    self.errors = {}
    for name in list(self.runs):
      self._call(name)  # warm-up

  def _call(self, name):
    try:
      return _best(self.runs[name], 1)
    except RuntimeError as e:  # torch.OutOfMemoryError (a RuntimeError) and CUDA errors
      self.errors[name] = "out of memory" if "out of memory" in str(e).lower() else \
          f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
      del self.runs[name]
      _torch_free()
      return None

  def time_once(self):
    for name in list(self.runs):
      seconds = self._call(name)
      if seconds is not None:
        self.times[name].append(seconds)

  def record(self, round_cps: float, train_cps: float | None) -> dict:
    """The record's PyTorch fields, against our round's (and training's) clients/s."""
    ratio = lambda ours, theirs: None if ours is None or not theirs else ours / theirs
    loop = self.times.get("loop")
    loop_cps = self.loop_clients / min(loop) if loop else None
    funcs = []
    for name, times in self.times.items():
      if name == "loop":
        continue
      chunk = int(name.split(":")[1])
      row = {"mode": "torch.func vmap", "chunk": chunk, "clients": self.clients,
             "clients_per_sec": self.clients / min(times) if times else None,
             "seconds": min(times) if times else None}
      if name in self.errors:
        row["error"] = self.errors[name]
      funcs.append(row)
    rates = [f["clients_per_sec"] for f in funcs if f["clients_per_sec"]]
    func_cps = max(rates) if rates else None
    return {
        "torch_loop_clients_per_sec": loop_cps,
        "ratio_to_torch": ratio(round_cps, loop_cps),  # to the per-client loop
        "train_ratio_to_torch": ratio(train_cps, loop_cps),
        "torch_loop_clients": self.loop_clients if "loop" in self.times else None,
        "torch_func_clients_per_sec": func_cps,  # the best chunk's
        "ratio_to_torch_func": ratio(round_cps, func_cps),
        "train_ratio_to_torch_func": ratio(train_cps, func_cps),
        "torch_func": funcs,
        "torch": dict(self.info, loop_error=self.errors.get("loop")),
        "torch_max_logit_diff": self.agree,
    }


def _torch_free():
  """Frees PyTorch's cached GPU memory, if PyTorch is in use."""
  torch = sys.modules.get("torch")  # nothing to free where it was never imported
  if torch is not None and torch.cuda.is_available():
    torch.cuda.empty_cache()


def _torch_anchor(model, plan, state, data, run_key, loop_clients: int | None,
                  func_chunks) -> _TorchAnchor:
  """:func:`torch_loop` and :func:`torch_func` on round 1's cohort (its real
  clients: not the slots that pad it)."""
  cohort = simulation.round_inputs(plan, state, run_key, 1).cohort
  ids = np.asarray(cohort.indices)[np.asarray(cohort.mask, bool)]
  x = np.asarray(data.x)[ids].astype(np.float32) / 255.0
  y = np.asarray(data.y)[ids]
  local = plan.local
  args = (model, state.weights, x, y, local.steps, local.batch_size, local.lr)
  loop_clients = len(ids) if loop_clients is None else min(loop_clients, len(ids))
  runs, info, agree = {}, None, None
  if loop_clients:
    runs["loop"], agree = torch_loop(*args, clients=loop_clients)
  for chunk in sorted({len(ids) if c is None else min(c, len(ids)) for c in func_chunks}):
    runs[f"func:{chunk}"], agree_func, info = torch_func(*args, chunk=chunk)
    agree = agree_func if agree is None else agree
  if info is None:
    info = torch_settings()
  return _TorchAnchor(runs, loop_clients, len(ids), info, agree)


def _stage_seconds(model, plan, state, data, run_key, t: int,
                   repeats: int) -> tuple[float, float, float]:
  """Local training (with the encoder), privacy + sum and server decode of
  round ``t``, each jitted and timed on its own (best of ``repeats``)."""
  messages_fn, privacy_fn, decode_fn = stage_fns(model, plan, run_key, jnp.int32(t))
  msgs = jax.block_until_ready(messages_fn(state, data))
  total = jax.block_until_ready(privacy_fn(state, msgs))
  jax.block_until_ready(decode_fn(state, total))
  return (_best(lambda: jax.block_until_ready(messages_fn(state, data)), repeats),
          _best(lambda: jax.block_until_ready(privacy_fn(state, msgs)), repeats),
          _best(lambda: jax.block_until_ready(decode_fn(state, total)), repeats))


def _features_total(plan, state, inputs, round_noise, total: jax.Array) -> jax.Array:
  """``total`` through the features' ``total`` hooks, as the round's sum goes
  (correlated noise: its z_t streamed through the strategy and added)."""
  for f, fstate, value in zip(plan.features, state.features, inputs.features):
    total = f.total(features.At(fstate, value, inputs=inputs, noise=round_noise), total)
  return total


def _server_noise_seconds(plan, state, run_key, t: int, repeats: int) -> float:
  """Round ``t``'s inputs (with the features' round values: correlated
  noise's z_t and its stream) and the features' ``total`` hooks on a sum of
  zeros, jitted, best of ``repeats``: what the server's noise adds to a
  round, beside the same call under independent noise (the inputs only)."""
  t = jnp.int32(t)

  @jax.jit
  def server_noise(state):
    i = simulation.round_inputs(plan, state, run_key, t)
    round_noise = simulation.round_noise(plan, i, state.features)
    return _features_total(plan, state, i, round_noise,
                           jnp.zeros((plan.num_kept,), jnp.float32))

  jax.block_until_ready(server_noise(state))
  return _best(lambda: jax.block_until_ready(server_noise(state)), repeats)


def _evaluation(model, mesh, weights, test_x, repeats: int) -> tuple[float, float | None]:
  """Seconds to evaluate the test images (best of ``repeats``), and the
  FLOPs XLA counts for it (from a 500-image batch, scaled; None if unknown)."""
  eval_fn = simulation.make_eval_fn(model, mesh=mesh)
  tx = jnp.asarray(test_x)
  jax.block_until_ready(eval_fn(weights, tx))
  seconds = _best(lambda: jax.block_until_ready(eval_fn(weights, tx)), repeats)
  batch = tx[:500]
  flops = lowered_flops(jax.jit(model.predict), weights, batch.astype(jnp.float32))
  return seconds, None if flops is None else flops * tx.shape[0] / batch.shape[0]


def torch_settings() -> dict:
  """PyTorch's device (the same card as JAX's where JAX runs on a GPU and PyTorch
  sees one) and precision, set for every PyTorch timing of this process: TF32
  allowed for float32 products and convolutions on a GPU, as JAX's default
  precision there (off on a CPU, where it does not apply)."""
  import torch  # pylint: disable=import-outside-toplevel

  on_gpu = jax.default_backend() == "gpu" and torch.cuda.is_available()
  torch.backends.cuda.matmul.allow_tf32 = on_gpu
  torch.backends.cudnn.allow_tf32 = on_gpu
  if not on_gpu:
    torch.set_num_threads(host_devices.usable_cores())  # as many as JAX's devices see
  return {"version": torch.__version__, "device": "cuda" if on_gpu else "cpu",
          "device_name": torch.cuda.get_device_name() if on_gpu else "cpu",
          "tf32": on_gpu}


def _torch_cnn(model, w0, x, y):
  """The paper CNN in PyTorch with the global weights ``w0``, and the cohort on its device.

  Returns ``(torch, device, net, global_weights, xs, ys, agree)``: the weights
  as tensors in ``net.parameters()``'s order, the images as NCHW, and the
  largest difference of the first client's logits from the JAX model's.
  """
  import torch  # pylint: disable=import-outside-toplevel

  device = torch.device(torch_settings()["device"])

  p = {k: np.asarray(v) for k, v in model.unflatten(w0).items()}
  global_weights = [
      p["conv1_w"].reshape(5, 5, 1, 32).transpose(3, 2, 0, 1), p["conv1_b"],
      p["conv2_w"].reshape(5, 5, 32, 64).transpose(3, 2, 0, 1), p["conv2_b"],
      p["dense1_w"].T, p["dense1_b"], p["dense2_w"].T, p["dense2_b"]]
  global_weights = [torch.tensor(np.ascontiguousarray(a), device=device)
                    for a in global_weights]
  net = torch_cnn.paper_cnn_class()().to(device)
  xs = torch.tensor(np.ascontiguousarray(np.asarray(x, np.float32).transpose(0, 1, 4, 2, 3)),
                    device=device)
  ys = torch.tensor(np.asarray(y, np.int64), device=device)
  with torch.no_grad():  # same function as the JAX model
    for param, g in zip(net.parameters(), global_weights):
      param.copy_(g)
    logits = net(xs[0]).cpu().numpy()
  reference = np.asarray(model.logits(w0, jnp.asarray(x[0], jnp.float32)))
  return torch, device, net, global_weights, xs, ys, float(np.abs(logits - reference).max())


def _sync(torch, device):
  if device.type == "cuda":
    torch.cuda.synchronize()  # the work queued on the card is done


def torch_loop(model, w0, x, y, steps: int, batch_size: int, lr: float,
               clients: int | None = None):
  """A plain PyTorch per-client loop computing the same updates.

  Each of the first ``clients`` clients (None: all) starts from ``w0`` and
  takes ``steps`` SGD steps on batches of ``batch_size`` of its examples
  drawn without replacement; the updates are summed.

  Returns:
    ``(run, agree)``: ``run()`` trains them and returns the summed updates (in
    ``net.parameters()``'s order); ``agree``, the largest logit difference
    from the JAX model.
  """
  torch, device, net, global_weights, xs, ys, agree = _torch_cnn(model, w0, x, y)
  import torch.nn.functional as F  # pylint: disable=import-outside-toplevel
  n = xs.shape[0] if clients is None else min(clients, xs.shape[0])
  take = min(batch_size, xs.shape[1])
  generator = torch.Generator(device=device).manual_seed(0)

  def run():
    total = [torch.zeros_like(g) for g in global_weights]
    for k in range(n):
      with torch.no_grad():
        for param, g in zip(net.parameters(), global_weights):
          param.copy_(g)
      for _ in range(steps):
        idx = torch.randperm(xs.shape[1], generator=generator, device=device)[:take]
        loss = F.cross_entropy(net(xs[k, idx]), ys[k, idx])
        net.zero_grad(set_to_none=True)
        loss.backward()
        with torch.no_grad():
          for param in net.parameters():
            param.sub_(lr * param.grad)
      with torch.no_grad():
        for acc, param, g in zip(total, net.parameters(), global_weights):
          acc.add_(param - g)
    _sync(torch, device)
    return total

  return run, agree


def torch_func(model, w0, x, y, steps: int, batch_size: int, lr: float, chunk: int):
  """The same updates as :func:`torch_loop`, written with ``torch.func``.

  One client's ``steps`` SGD steps are a function of its batches
  (``functional_call`` of the CNN with the weights as a dict, ``grad`` of its
  loss); ``vmap`` maps it over ``chunk`` clients at a time, and the chunks'
  updates are summed. Each step's batch is drawn as in the loop (a random
  permutation of the client's examples, its first ``batch_size``), for a
  whole chunk at once before the ``vmap``.

  Returns:
    ``(run, agree, settings)``: ``run()`` trains every client and returns the
    summed updates (in ``net.parameters()``'s order); ``agree``, the largest
    logit difference from the JAX model; ``settings``, :func:`torch_settings`.
  """
  torch, device, net, global_weights, xs, ys, agree = _torch_cnn(model, w0, x, y)
  from torch.func import functional_call, grad, vmap  # pylint: disable=import-outside-toplevel
  import torch.nn.functional as F  # pylint: disable=import-outside-toplevel
  names = [name for name, _ in net.named_parameters()]
  params = dict(zip(names, global_weights))
  take = min(batch_size, xs.shape[1])
  generator = torch.Generator(device=device).manual_seed(0)

  def loss(p, xb, yb):
    return F.cross_entropy(functional_call(net, p, (xb,)), yb)

  def one_client(xc, yc):  # (steps, take, C, H, W), (steps, take)
    p = params
    for t in range(steps):
      g = grad(loss)(p, xc[t], yc[t])
      p = {k: p[k] - lr * g[k] for k in p}
    return {k: p[k] - params[k] for k in p}

  cohort_fn = vmap(one_client)

  def run():
    total = {k: torch.zeros_like(v) for k, v in params.items()}
    for i in range(0, xs.shape[0], chunk):
      xc, yc = xs[i:i + chunk], ys[i:i + chunk]
      m = xc.shape[0]
      idx = torch.rand(m, steps, xs.shape[1], generator=generator,
                       device=device).argsort(-1)[..., :take]
      rows = torch.arange(m, device=device)[:, None, None]
      updates = cohort_fn(xc[rows, idx], yc[rows, idx])
      for k in total:
        total[k] += updates[k].sum(0)
    _sync(torch, device)
    return [total[k] for k in names]

  return run, agree, torch_settings()


def _print(rec: dict) -> None:
  """One scheme's record, in words."""
  s = rec["seconds"]
  print(f"{rec['scheme']} r={rec['ratio']:g}, {rec['model']}, {rec['clients_per_round']} "
        f"clients/round, {rec['rounds_per_call']} round(s)/call, cohort batching "
        f"{rec['cohort_batching']}, {rec['client_chunk'] or 'all'} slots a chunk on "
        f"{rec['machine']}")
  if rec.get("noise", "independent") != "independent" or rec.get("cycle_length", 1) > 1:
    separation = "" if rec["min_separation"] is None else \
        f", min-separation {rec['min_separation']}"
    print(f"  noise {rec['noise']}{separation}; {rec['sampler']} sampling, cycle length "
          f"{rec['cycle_length']}, {rec['slots']} slots")
  train = rec["round_training_gflops_per_sec"]
  train = "" if train is None else f", training {train:.0f} GFLOP/s"
  print(f"  round: {rec['rounds_per_sec']:.3f} rounds/s = {rec['clients_per_sec']:.1f} "
        f"clients/s ({s['round']:.2f} s{train}); compile {s['compile']:.1f} s; the "
        f"round's inputs and server noise {1000 * s['server_noise']:.1f} ms")
  gflops = rec["evaluation_gflops_per_sec"]
  rate = "" if gflops is None else \
      f", {gflops:.0f} GFLOP/s (matmul: {rec['matmul_gflops_per_sec']:.0f})"
  if s["local_training"] is not None:
    print(f"  split: local training + encoding {s['local_training']:.2f} s "
          f"({rec['train_clients_per_sec']:.1f} clients/s), privacy + sum "
          f"{s['privacy_sum']:.2f} s, server decode {s['server_decode']:.3f} s")
  if s["evaluation"] is not None:
    print(f"  evaluation ({rec['evaluation_images']:,} images) {s['evaluation']:.3f} s{rate}")
  if rec.get("torch"):
    t = rec["torch"]
    print(f"  PyTorch {t['version']} on {t['device_name']}, TF32 {'on' if t['tf32'] else 'off'}, "
          f"max logit difference {rec['torch_max_logit_diff']:.1e}")
  training = lambda key: "" if rec.get(key) is None else f", {rec[key]:.2f}x (training)"
  if rec["torch_loop_clients_per_sec"] is not None:
    print(f"  PyTorch per-client loop ({rec['torch_loop_clients']} clients): "
          f"{rec['torch_loop_clients_per_sec']:.1f} clients/s; JAX/loop "
          f"{rec['ratio_to_torch']:.2f}x (round){training('train_ratio_to_torch')}")
  elif rec.get("torch") and rec["torch"].get("loop_error"):
    print(f"  PyTorch per-client loop: {rec['torch']['loop_error']}")
  for f in rec.get("torch_func") or []:
    rate = f["error"] if f.get("error") else f"{f['clients_per_sec']:.1f} clients/s"
    print(f"  PyTorch {f['mode']}, {f['chunk']} clients at a time: {rate}")
  if rec.get("ratio_to_torch_func") is not None:
    print(f"  JAX/torch.func (its best chunk) {rec['ratio_to_torch_func']:.2f}x (round)"
          f"{training('train_ratio_to_torch_func')}")
  device_peak = "" if rec["device_peak_mb"] is None else \
      f", device peak {rec['device_peak_mb']:.0f} MB"
  print(f"  peak RSS {rec['peak_rss_mb']:.0f} MB{device_peak}; "
        f"load average {rec['load_average'][0]} -> {rec['load_average'][1]}", flush=True)


def _summary(records: list[dict]) -> None:
  """The per-case table: round time (without evaluation) against FL-STD's
  round of the same model, cohort and batching; our clients/s over
  ``torch.func``'s (its best chunk) and over the per-client loop's; with
  ``--noise``, each round over the same scheme's with independent noise
  (``x indep``; the scheme's name carries the noise, e.g. FL-STD-DP+banded-4)."""
  def case(r):
    return (r.get("model"), r["clients_per_round"], r.get("cohort_batching"),
            r.get("client_chunk"), r.get("cycle_length", 1))

  noise = lambda r: r.get("noise", "independent")
  bases = {case(r): r for r in records if r["scheme"] == REFERENCE and noise(r) == "independent"}
  independent = {(r["scheme"], case(r)): r for r in records if noise(r) == "independent"}
  print(f"\n{'scheme':24s} {'clients':>7s} {'round s':>8s} {'x ' + REFERENCE:>9s} "
        f"{'clients/s':>10s} {'train s':>8s} {'privacy s':>9s} {'compile s':>9s} "
        f"{'x func':>7s} {'x loop':>7s} {'x indep':>7s} {'noise s':>8s}")
  num = lambda v, fmt: "" if v is None else format(v, fmt)
  for r in records:
    s, base = r["seconds"], bases.get(case(r))
    ratio = "" if base is None else f"{s['round'] / base['seconds']['round']:.2f}"
    plain = independent.get((r["scheme"], case(r)))
    to_plain = None if plain is None or noise(r) == "independent" else \
        s["round"] / plain["seconds"]["round"]
    name = r["scheme"] + ("" if noise(r) == "independent" else "+" + noise(r))
    print(f"{name:24s} {r['clients_per_round']:7d} {s['round']:8.2f} {ratio:>9s} "
          f"{r['clients_per_sec']:10.1f} {num(s['local_training'], '8.2f'):>8s} "
          f"{num(s['privacy_sum'], '9.2f'):>9s} {s['compile']:9.1f} "
          f"{num(r.get('ratio_to_torch_func'), '7.2f'):>7s} "
          f"{num(r.get('ratio_to_torch'), '7.2f'):>7s} {num(to_plain, '7.3f'):>7s} "
          f"{num(s.get('server_noise'), '8.4f'):>8s}")


REFERENCE = "FL-STD"  # the round every scheme is compared with
# --model: the registered paper CNN, or the same CNN as a flax module through
# the generic path every user's model takes (models.from_flax).
MODELS = {"paper-cnn": paper_cnn,
          "paper-cnn-flax": lambda: from_flax(PaperCNN(), jnp.zeros((1, 28, 28, 1)),
                                            name="paper-cnn-flax")}


def _names(value: str, known, what: str) -> list[str]:
  names = [n.strip() for n in value.split(",") if n.strip()]
  bad = [n for n in names if n not in known]
  if bad or not names:
    raise argparse.ArgumentTypeError(
        f"unknown {what} {', '.join(bad) or repr(value)} (choose from {', '.join(known)})")
  return names


def _cohorts(value: str) -> list[int]:
  try:
    sizes = [int(n) for n in value.split(",")]
  except ValueError:
    sizes = []
  if not sizes or min(sizes) < 1:
    raise argparse.ArgumentTypeError(f"expected positive integers, comma-separated: {value!r}")
  _int32(sizes, value)
  return sizes


def _chunks(value: str) -> list[int | None]:
  """--torch-func: positive integers or 'all' (None), comma-separated; 'none': []."""
  if value.strip() == "none":
    return []
  try:
    chunks = [None if n.strip() == "all" else int(n) for n in value.split(",")]
  except ValueError:
    chunks = []
  if not chunks or any(c is not None and c < 1 for c in chunks):
    raise argparse.ArgumentTypeError(
        f"expected positive integers or 'all', comma-separated, or 'none': {value!r}")
  _int32(chunks, value)
  return chunks


def _count(value: str) -> int | None:
  """--torch-loop-clients: a count >= 0, or 'all' (None)."""
  if value.strip() == "all":
    return None
  try:
    count = int(value)
  except ValueError:
    count = -1
  if count < 0:
    raise argparse.ArgumentTypeError(f"expected a count >= 0 or 'all': {value!r}")
  _int32([count], value)
  return count


def _positive(value: str) -> int:
  try:
    number = int(value)
  except ValueError:
    number = 0
  if number < 1:
    raise argparse.ArgumentTypeError(f"expected a positive integer: {value!r}")
  _int32([number], value)
  return number


def _int32(counts: list[int | None], value: str) -> None:
  """Refuses a count above ``options.INT_MAX``: jitted code holds it as int32."""
  if any(c is not None and c > options.INT_MAX for c in counts):
    raise argparse.ArgumentTypeError(f"must be at most {options.INT_MAX}, got {value!r}")


def _check_noise(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
  """--bands, --min-separation and --cycle-length against --noise (one line each)."""
  if args.bands is not None and "banded" not in args.noise:
    p.error("--bands needs --noise banded")
  if args.min_separation is not None and args.noise == ["independent"]:
    p.error("--min-separation needs --noise banded or --noise blt")
  if "blt" in args.noise and args.cycle_length < 2:
    p.error("--noise blt needs a client's rounds at least 2 apart: set --cycle-length")
  for flag, value in (("--bands", args.bands), ("--min-separation", args.min_separation)):
    if value is not None and value > args.cycle_length:
      p.error(f"{flag} {value} needs a client's participations {value} rounds apart; "
              f"--cycle-length {args.cycle_length} keeps them {args.cycle_length} apart "
              f"(set --cycle-length {value})")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
  p = OneLineParser(prog="benchmarks/throughput.py", description=__doc__.splitlines()[0])
  p.add_argument("--scheme", default="FL-TOP-DP",
                 help="a scheme, a comma-separated list, or 'all' (every registered "
                      f"scheme, {REFERENCE} first; the summary compares with {REFERENCE})")
  p.add_argument("--clients-per-round", type=_cohorts, default=[100],
                 help="cohort size, or a comma-separated list (e.g. 100,1000,10000); "
                      "above the data's 6,000 clients they repeat")
  p.add_argument("--model", type=lambda v: _names(v, MODELS, "model"), default=["paper-cnn"],
                 help=f"comma-separated: {', '.join(MODELS)} (the same CNN as a flax module)")
  p.add_argument("--batching", type=lambda v: _names(v, cohort_ops.BATCHINGS, "batching"),
                 default=["auto"],
                 help="how per-client convolution kernels are batched over the cohort, "
                      f"comma-separated: {', '.join(cohort_ops.BATCHINGS)} (auto: one client "
                      "at a time on a CPU, batched products elsewhere)")
  p.add_argument("--ratio", type=float, default=0.005)
  p.add_argument("--noise", type=lambda v: _names(v, correlated.KINDS, "noise"),
                 default=["independent"],
                 help="the noise across rounds, comma-separated: independent (fresh each "
                      "round), banded, blt (the server's, correlated: DP-FTRL by matrix "
                      "factorization; docs/correlated-noise.md); each scheme runs with each")
  p.add_argument("--bands", type=_positive, default=None,
                 help="b of --noise banded (default: --cycle-length; at most it)")
  p.add_argument("--min-separation", type=_positive, default=None,
                 help="the rounds between a client's participations the banded or BLT "
                      "strategy assumes (default: --cycle-length; at most it)")
  p.add_argument("--cycle-length", type=_positive, default=1,
                 help="1: a fixed cohort (default); b > 1: every case samples its cohorts "
                      "by cyclic Poisson sampling over b groups (expected cohort "
                      "--clients-per-round), which banded noise with b bands needs")
  p.add_argument("--rounds-per-call", type=_positive, default=1,
                 help="rounds per compiled call (rounds between evaluations)")
  p.add_argument("--repeats", type=_positive, default=3, help="timed repeats (best is kept)")
  p.add_argument("--split-max-clients",
                 type=flag_types.flagged("--split-max-clients", options.non_negative_int),
                 default=1000,
                 help="time the round's stages on their own only up to this cohort (they "
                      "hold every client's update at once)")
  p.add_argument("--client-chunk", type=flag_types.positive("--client-chunk", int),
                 default=None,
                 help="slots trained and summed at a time (default: the run's, "
                      "simulation.default_chunk)")
  p.add_argument("--devices", type=int, default=None,
                 help="shard the cohort over this many devices (default: all)")
  p.add_argument(host_devices.OPTION,
                 type=flag_types.flagged(host_devices.OPTION, host_devices.parse_count),
                 default=None,
                 help="XLA CPU devices to create (default: one per core, at most "
                      f"{host_devices.DEFAULT_MAX}; XLA_FLAGS="
                      f"{host_devices.FLAG} wins)")
  p.add_argument("--no-torch", action="store_true",
                 help="skip PyTorch (the per-client loop and torch.func)")
  p.add_argument("--torch-func", type=_chunks, default=[128, None],
                 help="torch.func: clients vmapped at a time, one timing each, "
                      "comma-separated ('all': the whole cohort at once; 'none': skip it; "
                      "default 128,all)")
  p.add_argument("--torch-loop-clients", type=_count, default=50,
                 help="clients the PyTorch per-client loop trains (its pace does not depend "
                      "on the cohort; 'all': the whole cohort; 0: skip it; default 50)")
  p.add_argument("--no-eval", action="store_true",
                 help="skip the evaluation of the test images (its compile and FLOP count)")
  p.add_argument("--profile", default=None,
                 help="write a profiler trace of one round of the last case to this directory")
  p.add_argument("--json", action="store_true", help="one JSON line per case")
  p.add_argument("--out", default=None, help="also append the JSON lines to this file")
  args = p.parse_args(argv)
  if not 0 < args.ratio <= 1:  # the scheme's config would refuse it after the data loaded
    p.error(f"--ratio must be in (0, 1], got {args.ratio}")
  _check_noise(p, args)
  check_out(p, args.out)
  return args


def main(argv: list[str] | None = None) -> None:
  args = parse_args(argv)
  if not args.no_torch and importlib.util.find_spec("torch") is None:
    print("benchmarks/throughput.py: PyTorch is not installed; install it with "
          "pip install 'fedjax_dp[bench]' (torch==2.13.0) or pass --no-torch",
          file=sys.stderr)
    sys.exit(2)
  if args.scheme == "all":
    names = [REFERENCE] + [n for n in SCHEMES if n != REFERENCE]
  else:
    names = [n.strip() for n in args.scheme.split(",") if n.strip()]
  try:
    names = [get_scheme(n).name for n in names]  # fail early, in one line, on a bad name
  except ValueError as e:
    print(f"benchmarks/throughput.py: error: {e}", file=sys.stderr)
    sys.exit(2)
  try:
    data, test_x, _ = load_paper_data(max(args.clients_per_round))
  except DataError as e:  # missing or corrupt files: one line, as sweep.py
    print(f"benchmarks/throughput.py: error: {e}", file=sys.stderr)
    sys.exit(2)
  # A scheme's noises one after the other: their rounds are timed close in time.
  cases = [(m, b, n, c, NoiseCase(z, args.bands, args.min_separation, args.cycle_length))
           for m in args.model for b in args.batching for n in names
           for c in args.clients_per_round for z in args.noise]
  records = []
  for i, (model_name, batching, name, clients, noise_case) in enumerate(cases):
    try:
      with cohort_ops.cohort_batching(batching):
        rec = measure(MODELS[model_name](), name, data, test_x, public_batch(10, seed=0),
                      clients=clients, ratio=args.ratio,
                      rounds_per_call=args.rounds_per_call, repeats=args.repeats,
                      devices=args.devices, torch=not args.no_torch,
                      split=clients <= args.split_max_clients,
                      profile=args.profile if i == len(cases) - 1 else None,
                      client_chunk=args.client_chunk, torch_func_chunks=args.torch_func,
                      torch_loop_clients=args.torch_loop_clients,
                      evaluate=not args.no_eval, noise_case=noise_case)
    except ValueError as e:
      print(f"benchmarks/throughput.py: error: {e}", file=sys.stderr)
      sys.exit(2)
    records.append(rec)
    if args.json:
      print(json.dumps(rec), flush=True)
    else:
      _print(rec)
    if args.out:
      with open(args.out, "a", encoding="utf-8") as f:
        f.write(json.dumps(rec) + "\n")
    jax.clear_caches()  # each case's programs are compiled afresh, memory freed
  if len(records) > 1 and not args.json:
    _summary(records)


if __name__ == "__main__":
  main()
