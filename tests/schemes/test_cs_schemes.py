"""FL-CS, FL-FREQ, FL-RND and their -DP variants (thesis Alg. 4-6, 11-13)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_dp import simulation
from fedjax_dp.cli import sweep as experiment
from fedjax_dp.compression import fista
from fedjax_dp.models import FlatModel
from fedjax_dp.schemes import SCHEMES, CSScheme, LocalTraining, SetupData, get_scheme

NEW = ("FL-CS", "FL-CS-DP", "FL-FREQ", "FL-FREQ-DP", "FL-RND", "FL-RND-DP")
CNN_N = 1_663_370


def _linear_model() -> FlatModel:
  """Softmax regression on 28x28 images (n = 7,850): fast to train."""
  def init(key):
    return {"w": 0.01 * jax.random.normal(key, (784, 10)), "b": jnp.zeros(10)}

  def apply(p, x):
    return x.reshape(x.shape[0], -1) @ p["w"] + p["b"]

  return FlatModel("linear", (("w", (784, 10)), ("b", (10,))), init, apply)


def _setup_data(n, ratio, key=0):
  return SetupData(model=None, w0=jnp.zeros(n), public_x=None, public_y=None,
                   key=jax.random.PRNGKey(key), ratio=ratio, init_steps=1,
                   local=LocalTraining(1, 1, 0.1))


def test_registry_and_default_sweep():
  for name in NEW:
    assert get_scheme(name.lower()).name == name
  assert get_scheme("fl-cs-dp").dp and not get_scheme("FL-CS").dp
  defaults = experiment.build_parser().parse_args([]).schemes
  assert "FL-CS" in defaults and "FL-CS-DP" in defaults  # UAI Table 1 sweep
  cs = SCHEMES["FL-CS"]  # thesis Table 8.4 setting
  assert (cs.chunks, cs.lam, cs.momentum, cs.server_lr, cs.error_feedback) == (
      200, 1e-5, 0.9, 0.35, True)


@pytest.mark.parametrize("name", NEW)
@pytest.mark.parametrize("ratio", [0.005, 0.05, 0.1, 0.2])
def test_bandwidth_is_r_n_up_and_the_model_down(name, ratio):
  # Thesis Table 4.2: r * n values up per client, the full model down.
  scheme = get_scheme(name)
  m = scheme.num_kept(CNN_N, ratio)
  assert abs(m - ratio * CNN_N) <= 200 / 2 + 1
  assert scheme.num_downstream(CNN_N, ratio) == CNN_N


@pytest.mark.parametrize("kwargs,ratio,match", [
    (dict(chunks=20_000), 0.5, "exceeds the number of weights"),
    (dict(), 0.0001, "fewer than one DCT coefficient per chunk"),
    (dict(lam=-1e-5), 0.05, r"lam must be >= 0 \(lambda\)"),
    (dict(momentum=1.0), 0.05, "rho must be in"),
    (dict(server_lr=0.0), 0.05, "eta_G must be > 0"),
    (dict(max_iters=0), 0.05, "max_iters must be an int >= 1"),
    (dict(decoder="admm"), 0.05, "decoder 'admm' is unknown"),
    (dict(dct_method="wavelet"), 0.05, "unknown DCT method"),
])
def test_bad_parameters_are_rejected(kwargs, ratio, match):
  scheme = dataclasses.replace(SCHEMES["FL-CS"], **kwargs)
  with pytest.raises(ValueError, match=match):
    scheme.validate(10_000, ratio)
  with pytest.raises(ValueError, match=match):
    scheme.setup(_setup_data(10_000, ratio))


def test_fl_cs_server_follows_algorithm_4():
  n, ratio = 5_000, 0.1
  scheme = dataclasses.replace(SCHEMES["FL-CS"], chunks=10, lam=1e-3, max_iters=5000,
                               tol=1e-5, restart=True)
  state = scheme.setup(_setup_data(n, ratio))
  op = state.op
  assert state.momentum.shape == state.e.shape == (scheme.num_kept(n, ratio),)
  rng = np.random.default_rng(0)
  w = jnp.asarray(rng.standard_normal(n), jnp.float32)
  update = jnp.asarray(rng.standard_normal(n) * (rng.random(n) < 0.02), jnp.float32)
  state = state.with_momentum(op.encode(update) * 0.5)._replace(e=op.encode(update) * 0.1)
  mean = op.encode(update)
  new_w, new = jax.jit(scheme.server_update)(w, state, mean, op)
  u = 0.9 * state.momentum + mean  # line 9 (optax.trace)
  e = 0.35 * u + state.e  # line 10
  np.testing.assert_allclose(new.momentum, u, rtol=1e-6, atol=1e-7)
  # line 11: s = D(e) is the BPDN solution (KKT), line 12: e -= C(s), line 13: w += s
  y = e.reshape(op.chunks, op.coeffs)
  assert float(fista.kkt_violation(op.forward, op.adjoint, y, new.s, 1e-3, op.mask)) < 1e-4
  np.testing.assert_allclose(new.e, e - op.encode(op.from_chunks(new.s)), atol=1e-5)
  np.testing.assert_allclose(new_w, w + op.from_chunks(new.s), atol=1e-6)
  assert 0 < int(new.iterations) == int(new.total_iterations) < 5000
  # The next round starts from this s (warm start): fewer steps than from zero.
  _, warm = scheme.server_update(new_w, new, mean * 0.01, op)
  _, cold = scheme.server_update(new_w, new._replace(s=jnp.zeros_like(new.s)),
                                 mean * 0.01, op)
  assert int(warm.iterations) < int(cold.iterations)
  assert int(warm.total_iterations) == int(new.iterations) + int(warm.iterations)


def test_noise_only_fl_cs_dp_server_keeps_the_error_bounded():
  # The FL-CS-DP collapse, in miniature: 20 rounds of pure DP noise (the
  # aggregate's share sigma S / K, UAI Table 5 and thesis Table 8.4 settings)
  # into the server of Alg. 11 with P = 200 chunks. With the chunks' zeros in
  # one block, noise in the directions no weight change reaches piled up in e
  # (||e|| 0.047 after one round, 0.24 at round 5, 1.0 at round 20, 3.3 at
  # round 100: 2.3x one round's noise norm) and the decoder chased it with ever
  # larger weight changes (||w|| 72 at round 20, 884 at round 100); with spread
  # zeros ||e|| stays at the decoder's residual (0.0038) and ||w|| is 17 at
  # round 20. 20 rounds tell the two apart on every line below (100 did too,
  # at 5x the time).
  n, ratio = 200 * 1009, 0.2  # L = 1,024 with 15 zeros per chunk, mc = 202
  scheme = SCHEMES["FL-CS-DP"]
  state = scheme.setup(_setup_data(n, ratio))
  m = state.op.num_values
  std = 1.54 * 0.47 / 100
  step = jax.jit(lambda w, st, noise: scheme.server_update(w, st, noise, st.op))
  w, norms = jnp.zeros(n), []
  for t in range(20):
    w, state = step(w, state, std * jax.random.normal(jax.random.PRNGKey(t), (m,)))
    norms.append(scheme.diagnostics(state, t + 1)["error_norm"])
  noise_norm = std * np.sqrt(m)
  assert max(norms) < 0.01 * noise_norm
  assert norms[-1] < 1.2 * norms[4]  # not growing (one block: 1.0 against 0.24)
  assert float(jnp.linalg.norm(w)) < 30  # spread: 17; one block of zeros: 72


def test_fl_freq_server_is_the_adjoint_low_pass():
  n, ratio = 3_000, 0.2
  scheme = dataclasses.replace(SCHEMES["FL-FREQ"], chunks=5)
  state = scheme.setup(_setup_data(n, ratio))
  mean = jax.random.normal(jax.random.PRNGKey(1), (state.op.num_values,))
  w = jnp.ones(n)
  new_w, new = scheme.server_update(w, state, mean, scheme.round_plan(state, None, n, 0))
  np.testing.assert_allclose(new_w, w + state.op.decode_adjoint(mean), atol=1e-6)
  np.testing.assert_array_equal(new.momentum, state.momentum)  # Alg. 6: no momentum
  # A low-pass filter: re-encoding the decoded update gives the mean back.
  np.testing.assert_allclose(state.op.encode(new_w - w), mean, atol=1e-5)


def test_fl_rnd_draws_a_new_shared_subset_each_round():
  scheme = get_scheme("FL-RND")
  n, ratio = 10_000, 0.05
  m = scheme.num_kept(n, ratio)
  run_key = jax.random.PRNGKey(0)
  plans = [scheme.round_plan(None, jax.random.fold_in(run_key, t), n, m) for t in (1, 2)]
  again = scheme.round_plan(None, jax.random.fold_in(run_key, 1), n, m)
  assert plans[0].shape == (m,) == (500,)
  np.testing.assert_array_equal(plans[0], again)  # shared seed: every client agrees
  overlap = np.intersect1d(np.asarray(plans[0]), np.asarray(plans[1])).size
  assert overlap < 0.2 * m  # independent draws overlap by ~r*m = 25
  w = jnp.zeros(n)
  new_w, _ = scheme.server_update(w, None, jnp.ones(m), plans[1])
  np.testing.assert_array_equal(np.flatnonzero(np.asarray(new_w)), np.sort(plans[1]))


@pytest.fixture(scope="module")
def linear():
  return _linear_model()


@pytest.mark.parametrize("name", NEW)
def test_every_new_scheme_learns_on_real_data(name, small_federation, linear):
  # The paper's server setting (rho = 0.9, eta_G = 0.35, lambda = 1e-5,
  # error feedback, FISTA); P = 20 chunks for the 7,850-weight model. DP runs
  # calibrate S on the public batch (UAI Sec. 4).
  data, test, public = small_federation
  scheme = get_scheme(name)
  if isinstance(scheme, CSScheme):
    scheme = dataclasses.replace(scheme, chunks=20)
  cfg = simulation.RunConfig.of(ratio=0.05, rounds=10, clients_per_round=16, eval_every=5,
                             noise_multiplier=0.3, clip_norm=None)
  record = simulation.run(linear, scheme, data, test, public, cfg)
  assert record["best_accuracy"] > 0.35, record["history"]  # chance: 0.1
  assert record["upstream_values"] == scheme.num_kept(7850, 0.05)
  assert record["downstream_values"] == 7850
  if scheme.dp:
    assert 0 < record["clip_norm"] < np.inf and 0 < record["epsilon"] < np.inf
  if name.startswith("FL-CS"):
    assert 1 <= record["decoder_iterations"] <= scheme.max_iters
    assert 1 <= record["mean_decoder_iterations"] <= scheme.max_iters
    assert "decoder_iterations" in record["history"][-1]
    assert record["history"][-1]["error_norm"] >= 0 < record["history"][-1]["update_norm"]
