"""The run loop: rounds compiled between evaluations, checkpoints, and ``run``."""

from __future__ import annotations

import hashlib
import os
import pathlib
import warnings
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp import checkpoint as checkpoint_lib
from fedjax_dp import distributed, keys, metrics, running_clock, sharding
from fedjax_dp import features as features_lib
from fedjax_dp.data import ClientData, as_float
from fedjax_dp.models import FlatModel
from fedjax_dp.schemes.base import Scheme
from fedjax_dp.simulation import record as record_lib
from fedjax_dp.simulation.config import RunConfig
from fedjax_dp.simulation.plan import Plan
from fedjax_dp.simulation.round import (RoundInfo, ServerState, make_rounds_fn, round_inputs,
                                        round_noise)
from fedjax_dp.simulation.setup import prepare


def make_eval_fn(model: FlatModel, batch_size: int = 250,
                 mesh: jax.sharding.Mesh | None = None):
  """Jitted ``fn(w, x) -> (predictions, scores)`` over a test set in batches.

  With a ``mesh`` (``fedjax_dp.sharding.client_mesh``) the batches are split
  over its devices and the outputs replicated over them (every process of a
  multi-process run reads them). The batch size's effect on speed is
  measured in docs/performance.md.
  """
  devices = sharding.mesh_size(mesh)

  def predict_batches(w, xb):
    return jax.lax.map(lambda b: model.predict(w, as_float(b)), xb)

  if devices > 1:
    spec = jax.sharding.PartitionSpec(sharding.AXIS)
    predict_batches = jax.shard_map(predict_batches, mesh=mesh,
                                    in_specs=(jax.sharding.PartitionSpec(), spec),
                                    out_specs=spec, check_vma=False)

  def evaluate(w, x):
    num = x.shape[0]
    pad = (-num) % (batch_size * devices)
    xb = jnp.pad(x, ((0, pad),) + ((0, 0),) * (x.ndim - 1))
    xb = xb.reshape((-1, batch_size) + x.shape[1:])
    preds, scores = predict_batches(w, xb)
    return (preds.reshape((-1,) + preds.shape[2:])[:num],
            scores.reshape((-1,) + scores.shape[2:])[:num])
  if devices > 1:
    return jax.jit(evaluate, out_shardings=sharding.replicated(mesh))
  return jax.jit(evaluate)


def make_stream_fn(model: FlatModel, plan: Plan, num_measured: int):
  """Jitted ``fn(state, data, run_key, t) -> (streams, real)``.

  The integer streams (``scheme.client_stream``) that the first
  ``num_measured`` cohort slots of round t transmit, derived with the
  round's own cohort, plan and client keys (:func:`round_inputs`), so they
  are bit for bit what those clients send in round t; ``real`` marks real
  (not padding) slots. Their coded size is measured outside ``jit``
  (CDP-LQ: bzip2). With ``plan.mesh`` both are replicated over it.
  """
  scheme, local = plan.scheme, plan.local
  num = min(num_measured, plan.capacity)

  def streams(state, data, run_key, t):
    inputs = round_inputs(plan, state, run_key, t)
    ids = inputs.cohort.indices[:num]
    keywords = plan.scheme_keywords(round_noise(plan, inputs, state.features))
    out = jax.vmap(lambda xk, yk, kk: scheme.client_stream(
        model, state.weights, inputs.shared, xk, yk, kk, local, **keywords))(
            as_float(data.x[ids]), data.y[ids], inputs.train_keys[:num])
    return out, inputs.cohort.mask[:num]

  if sharding.mesh_size(plan.mesh) > 1:
    return jax.jit(streams, out_shardings=sharding.replicated(plan.mesh))
  return jax.jit(streams)


def evaluation_metrics(model: FlatModel, labels: np.ndarray, predictions: np.ndarray,
                       scores: np.ndarray) -> dict:
  """Accuracy; for a binary model also balanced accuracy and AUROC.

  Thesis Sec. 8.4.2: balanced accuracy (TPR + TNR) / 2 at the model's
  threshold (logit 0), AUROC of the logits.
  """
  result = {"accuracy": metrics.accuracy(labels, predictions)}
  if model.loss_name == "sigmoid_ce":
    result["balanced_accuracy"] = metrics.balanced_accuracy(labels, predictions)
    result["auroc"] = metrics.auroc(labels, scores)
  return result


class Counters(NamedTuple):
  """What the train loop counts over the rounds (from each round's RoundInfo).

  A checkpoint written before ``silent`` was counted resumes it from 0.
  """

  participations: int = 0
  truncated: int = 0
  clipped: int = 0
  overflows: int = 0
  silent: int = 0  # participations whose message never arrived (failures)

  def add(self, infos: RoundInfo, capacity: int) -> "Counters":
    """These counts plus those of the rounds in ``infos`` (stacked)."""
    sampled = np.asarray(infos.num_sampled)
    return Counters(
        self.participations + int(np.minimum(sampled, capacity).sum()),
        self.truncated + int((sampled > capacity).sum()),
        self.clipped + int(np.asarray(infos.num_clipped).sum()),
        self.overflows + int(np.asarray(infos.secure_overflow).sum()),
        self.silent + int(np.asarray(infos.num_silent).sum()))


class Trained(NamedTuple):
  """What the train loop returns."""

  state: ServerState
  history: list
  counters: Counters
  coded_sizes: list
  earlier_seconds: float = 0.0  # training time of the processes before a resume


def train_loop(model: FlatModel, state: ServerState, plan: Plan, data: ClientData,
               test: tuple[np.ndarray, np.ndarray],
               progress: Callable[[int], None] | None = None,
               checkpoint: tuple[str, str] | None = None,
               on_round: Callable[[int], None] | None = None) -> Trained:
  """The plan's rounds from ``state``, compiled ``eval_every`` at a time, test
  accuracy after each.

  ``progress(n)`` is called after each evaluation with the n rounds it
  closes (at a resume first with the checkpoint's rounds); ``on_round(t)``
  with each round's number as the round ends, from inside the compiled
  rounds (:func:`~fedjax_dp.simulation.make_rounds_fn`; at a resume first
  with the checkpoint's round, here).

  Coded-stream schemes (``traits.measured_streams``) also measure what
  some clients send in the first round of every interval. With
  ``checkpoint = (path, fingerprint)`` the loop saves its state after every
  evaluation (``fedjax_dp.checkpoint``) and, if ``path`` holds a checkpoint
  of the same run, continues from it with the numbers of an uninterrupted
  run. In a multi-process run (``fedjax_dp.distributed``) process 0 alone
  reads and writes the checkpoint; the others resume from what it read. A
  checkpoint of another run or version is refused
  (``fedjax_dp.checkpoint.Mismatch``), not overwritten.
  """
  scheme, root = plan.scheme, plan.run_key
  rounds, eval_every = plan.config.training.rounds, plan.config.training.eval_every
  eval_fn = make_eval_fn(model, mesh=plan.mesh)
  measured = scheme.traits.measured_streams
  stream_fn = make_stream_fn(model, plan, measured) if measured > 0 else None
  test_x, test_y = jnp.asarray(test[0]), np.asarray(test[1])
  history, coded_sizes, counters = [], [], Counters()
  # Seconds the process ran (running_clock: a pause by job control is left out).
  t, started, earlier = 1, running_clock.now(), 0.0
  saved = None if checkpoint is None else _resume(checkpoint, state)
  sigma, devices = float(plan.noise_multiplier), sharding.mesh_size(plan.mesh)
  if saved is not None:
    _check_resume(checkpoint[0], saved, scheme.name, sigma, devices)
    earlier = saved.seconds
    state, history, coded_sizes = saved.state, saved.history, saved.coded_sizes
    counters, t = Counters(*saved.counters), saved.round + 1
    if progress is not None:
      progress(saved.round)
    if on_round is not None:
      on_round(saved.round)
  if plan.mesh is not None:  # the placement every round call sees (one compilation)
    state, data, root, test_x = sharding.replicate((state, data, root, test_x), plan.mesh)
  compiled: dict[int, Callable] = {}
  while t <= rounds:
    chunk = min(eval_every, rounds - t + 1)
    if chunk not in compiled:
      compiled[chunk] = make_rounds_fn(model, plan, chunk, on_round)
    if stream_fn is not None:  # round t's streams, before the state is donated
      streams, real = stream_fn(state, data, root, jnp.int32(t))
      coded_sizes += [scheme.measure_stream(s, model.num_params)
                      for s, r in zip(np.asarray(streams), np.asarray(real)) if r]
    state, infos = compiled[chunk](state, data, root, jnp.int32(t))
    t += chunk
    counters = counters.add(infos, plan.capacity)
    preds, scores = map(np.asarray, eval_fn(state.weights, test_x))
    entry = {"round": t - 1, **evaluation_metrics(model, test_y, preds, scores)}
    for f, finfo in zip(plan.features, infos.features):
      entry.update(f.entry(test_y, preds, finfo))
    entry.update(scheme.diagnostics(state.scheme_state, t - 1))
    if not np.isfinite(scores).all():  # the "accuracy" is that of argmax(NaN)
      entry["nonfinite"] = True
    history.append(entry)
    if checkpoint is not None and distributed.is_main():
      checkpoint_lib.save(checkpoint[0], checkpoint[1], checkpoint_lib.Saved(
          t - 1, state, history, tuple(counters), coded_sizes,
          earlier + running_clock.now() - started, sigma, devices))
    if progress is not None:
      progress(chunk)
  return Trained(state, history, counters, coded_sizes, earlier)


def _check_resume(path: str, saved: checkpoint_lib.Saved, name: str, sigma: float,
                  devices: int) -> None:
  """Refuses a checkpoint whose rounds ran at another sigma; warns of one
  whose rounds ran on another device count.

  Raises:
    checkpoint.Mismatch: A target epsilon's sigma, calibrated anew at this
      start (another machine, accountant version or Monte Carlo draw): the
      rounds kept ran at another sigma than the record's epsilon would count.
  """
  if saved.noise_multiplier not in (None, sigma):
    raise checkpoint_lib.Mismatch(path, f"of another run (its rounds ran at sigma "
                                  f"{saved.noise_multiplier:g}; this run's is {sigma:g})")
  # Every device count of a run without --devices has one key (the count is
  # not a setting), so the advice below resumes the same checkpoint.
  if saved.devices not in (None, devices):
    warnings.warn(f"{name}: resuming at round {saved.round + 1} on {devices} device(s) from a "
                  f"checkpoint whose rounds ran on {saved.devices}: the sums run in another "
                  "order from here, so the numbers are not an uninterrupted run's (run it "
                  f"where it has {saved.devices} devices to continue it as it ran: on a CPU, "
                  f"--cpu-devices {saved.devices})")


def _resume(checkpoint: tuple[str, str], state: ServerState) -> checkpoint_lib.Saved | None:
  """The run's checkpoint, if any, as process 0 reads it (every process
  resumes from the same one; ``checkpoint = (path, fingerprint)``)."""
  path, key = checkpoint
  if jax.process_count() == 1:
    return checkpoint_lib.load(path, key, state)
  found = pathlib.Path(path)
  content = distributed.broadcast_bytes(
      found.read_bytes() if distributed.is_main() and found.is_file() else None)
  return checkpoint_lib.load(path, key, state, content=content) if content else None


def checkpoint_key(model: FlatModel, scheme: Scheme, data: ClientData,
                   test: tuple[np.ndarray, np.ndarray], public: tuple[np.ndarray, np.ndarray],
                   cfg: RunConfig) -> str:
  """The fingerprint that tags a run's checkpoint (``fedjax_dp.checkpoint``):
  of the model, the scheme and every setting of it, the config, the
  clients' data, the test set and the public set, as :func:`run` is given
  them. A checkpoint is continued only by a run of the same key."""
  run_key = keys.run_key(cfg.training.seed)
  return _key(model, scheme, features_lib.client_data(cfg, data, run_key), test, public, cfg)


def _digest(*arrays: Any) -> str:
  """A hash of arrays' shapes, types and bytes."""
  digest = hashlib.sha256()
  for array in arrays:
    array = np.ascontiguousarray(array)
    digest.update(f"{array.shape}{array.dtype}".encode())
    digest.update(array.tobytes())
  return digest.hexdigest()


def _key(model: FlatModel, scheme: Scheme, data: ClientData,
         test: tuple[np.ndarray, np.ndarray], public: tuple[np.ndarray, np.ndarray],
         cfg: RunConfig) -> str:
  """:func:`checkpoint_key` of the data as the run's features leave it."""
  return checkpoint_lib.fingerprint(
      model.name, model.num_params, scheme.name, scheme.describe(), scheme.settings(),
      cfg.fingerprint(), data.x.shape, str(data.x.dtype),
      hashlib.sha256(np.asarray(data.y).tobytes()).hexdigest(), _digest(*test),
      _digest(*public))


def run(model: FlatModel, scheme: Scheme, data: ClientData,
        test: tuple[np.ndarray, np.ndarray], public: tuple[np.ndarray, np.ndarray],
        cfg: RunConfig | Plan, progress: Callable[[int], None] | None = None, *,
        return_state: bool = False, checkpoint: str | os.PathLike | None = None,
        on_round: Callable[[int], None] | None = None):
  """Runs one scheme for ``cfg.training.rounds`` rounds and reports like UAI Table 1.

  Four steps: :func:`~fedjax_dp.simulation.setup.prepare` (validation and
  the server's setup), :func:`train_loop`, the privacy report and
  :func:`~fedjax_dp.simulation.record.make_record`.

  Args:
    model: The model (``fedjax_dp.models``, or ``models.from_flax``).
    scheme: The scheme (``fedjax_dp.schemes.get_scheme``, or your own).
    data: Federated training data (``fedjax_dp.data.partition``).
    test: (examples, labels) of the held-out test set.
    public: (examples, labels) of the server's public batch.
    cfg: Hyper-parameters, or the Plan ``simulation.validate`` started for
      them (not validated again: :func:`~fedjax_dp.simulation.setup.prepare`).
    progress: Called after each evaluation with the number of rounds it
      closes (at a resume, first with the checkpoint's rounds).
    return_state: Also return the final :class:`ServerState`.
    checkpoint: A file to save the run to after every evaluation; a run
      started again with the same file, model, scheme, data and config
      continues from it with the same numbers. Deleted when the run ends.
      A file holding another run's checkpoint (:func:`checkpoint_key`
      differs) or another version's is refused. Several processes
      (``fedjax_dp.distributed``): process 0 alone writes it.
    on_round: Called with each round's number as the round ends, however
      many rounds an evaluation closes: from inside the compiled rounds, on
      a runtime thread (quick, must not raise; it changes no number); at a
      resume first with the checkpoint's round. Several processes: called
      on process 0 alone; give it on every process or on none.

  Returns:
    A JSON-ready record (``simulation.record.Record``). With
    ``return_state``, the pair ``(record, final ServerState)``.

  Raises:
    ValueError: A bad setting (one line, naming the parameter).
    fedjax_dp.checkpoint.Mismatch: ``checkpoint`` holds another run's
      checkpoint, or another version's (a ValueError, one line).
  """
  start = running_clock.now()
  config = cfg.config if isinstance(cfg, Plan) else cfg
  data = features_lib.client_data(config, data, keys.run_key(config.training.seed))
  state, plan = prepare(model, scheme, data, public, cfg)
  saving = None if checkpoint is None else (
      checkpoint, _key(model, scheme, data, test, public, config))
  trained = train_loop(model, state, plan, data, test, progress, saving, on_round)
  # Wall time over every process that trained this run (setup counted once),
  # less the spans a process was stopped (a paused campaign).
  record = record_lib.make_record(model, plan, trained,
                                  running_clock.now() - start + trained.earlier_seconds)
  if checkpoint is not None and distributed.is_main():
    pathlib.Path(checkpoint).unlink(missing_ok=True)
  return (record, trained.state) if return_state else record
