"""Test helpers: the round's aggregation for a few messages, and a round's
plan and a feature's run view built outside ``simulation.prepare``."""

import dataclasses

import jax
import jax.numpy as jnp

from fedjax_dp import simulation
from fedjax_dp.privacy import noise
from fedjax_dp.schemes import Noise
from tiny_model import tiny_linear


def privatized_sum(scheme, messages, slot_mask, noise_keys, clip_norm, noise_multiplier):
  """``(sum of scheme.privatize's contributions of the real slots, num_clipped)``.

  What the round computes with no failures and a plain sum (shares sized for
  the real clients; an empty cohort is not handled here).
  """
  num_shares = jnp.maximum(jnp.sum(slot_mask), 1)
  contribs, clipped = scheme.privatize(messages, slot_mask, noise_keys,
                                       Noise(clip_norm, noise_multiplier, num_shares))
  if jnp.issubdtype(contribs.dtype, jnp.integer):
    total = jnp.sum(jnp.where(slot_mask[:, None], contribs, 0), axis=0)
  else:
    total = noise.masked_sum(contribs, slot_mask)
  return total.astype(jnp.float32), clipped


def round_plan(scheme, *, num_clients, clients_per_round, capacity, num_kept, local_steps,
               batch_size, lr, sampler="poisson", noise_multiplier=0.0, clip_norm=1.0,
               secure_bits=None, secure_scale=1.0, client_chunk=None, mesh=None,
               features=(), feature_slots=(), scheme_constants=None, **settings):
  """A ``simulation.Plan`` built by hand, for a round outside ``simulation.prepare``.

  The local training, the cohort and sigma go to the plan's ``RunConfig``
  (``settings``: any other flat setting of ``RunConfig.of``); as ``prepare``
  resolves them, a scheme without DP gets no clip norm and sigma 0.
  """
  config = simulation.RunConfig.of(clients_per_round=clients_per_round,
                                   local_steps=local_steps, batch_size=batch_size, lr=lr,
                                   sampler=sampler, noise_multiplier=noise_multiplier,
                                   **settings)
  dp = scheme.traits.dp
  return simulation.Plan(config=config, scheme=scheme, num_clients=num_clients,
                         num_kept=num_kept, capacity=capacity,
                         clip_norm=clip_norm if dp else None,
                         noise_multiplier=noise_multiplier if dp else 0.0,
                         client_chunk=client_chunk, mesh=mesh, features=features,
                         feature_slots=feature_slots, scheme_constants=scheme_constants,
                         comm=simulation.Communication(secure_bits, secure_scale))


def run_view(scheme, config, num_clients=600, model=None, samples_per_client=10,
             run_key=None, clip_norm=None):
  """The run a feature of ``config`` reads (``features.RunView``): the Plan
  ``simulation.validate`` starts (it checks the config first), with S = ``clip_norm``."""
  model = tiny_linear() if model is None else model
  run_key = jax.random.PRNGKey(0) if run_key is None else run_key
  plan = simulation.validate(config, scheme, model, num_clients, samples_per_client, run_key)
  return dataclasses.replace(plan, clip_norm=clip_norm)


class Killed(Exception):
  """Raised by :func:`kill_after`'s progress callback: a run killed mid-way."""


def kill_after(evaluations):
  """A ``progress`` callback that kills the run at its ``evaluations``-th
  evaluation (after the checkpoint of that interval is written)."""
  seen = []

  def progress(rounds):
    seen.append(rounds)
    if len(seen) == evaluations:
      raise Killed
  return progress


def refusal(argv, out, capsys) -> str:
  """``sweep.main(argv + --out out)``'s one-line refusal: asserts exit code 2,
  one line on stderr, no traceback and nothing written to ``out``; returns the line.

  In process: tests/cli/test_cli.py's script cases show that the script's exit
  code and message are ``main``'s (an interpreter costs about 4 s).
  """
  from fedjax_dp.cli import sweep  # pylint: disable=import-outside-toplevel
  code = sweep.main([*argv, "--out", str(out)])
  err = capsys.readouterr().err
  lines = err.strip().splitlines()
  assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
  assert not out.exists()
  return lines[0]
