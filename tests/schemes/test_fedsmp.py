"""Fed-SMP-rand_k / -top_k, the FedAvg baselines and DP-FedAvg (Fed-SMP paper
Sec. 4, 6; Algorithm 2)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from fedjax_dp import local_training, simulation
from fedjax_dp.cli import sweep
from fedjax_dp.compression import masks
from fedjax_dp.data import holdout_indices, load_federated_with_public
from fedjax_dp.data.idx import load_dataset
from fedjax_dp.schemes import SCHEMES, LocalTraining, SetupData, get_scheme
from scheme_helpers import privatized_sum, round_plan
from tiny_model import tiny_linear

NEW = ("Fed-SMP-randk", "Fed-SMP-topk", "FedAvg-randk", "FedAvg-topk")
N_TINY = 7850


@pytest.fixture(scope="module")
def model():
  return tiny_linear()


@pytest.fixture(scope="module")
def held_out():
  """600 Fashion-MNIST clients of 9 images and 200 public images held out."""
  fed, test_x, test_y, public = load_federated_with_public("fashion-mnist", 600, 9, 200, 0)
  data = simulation.ClientData(jnp.asarray(fed.x), jnp.asarray(fed.y))
  return data, (test_x[:2000], test_y[:2000]), public


def _setup(model, ratio, public, key=0, lr=0.1, steps=2):
  return SetupData(model=model, w0=model.init(jax.random.PRNGKey(key)),
                   public_x=jnp.asarray(public[0]), public_y=jnp.asarray(public[1]),
                   key=jax.random.PRNGKey(key + 1), ratio=ratio, init_steps=1,
                   local=LocalTraining(steps, 10, lr))


def _round_fn(model, scheme, ratio, **kw):
  base = dict(num_clients=600, clients_per_round=10, capacity=24, sampler="poisson",
              num_kept=scheme.num_kept(model.num_params, ratio), local_steps=2,
              batch_size=10, lr=0.1, noise_multiplier=0.0, clip_norm=1.0)
  return jax.jit(simulation.make_round_fn(model, round_plan(scheme, **{**base, **kw})))


# --- Registry, alias, presets. ------------------------------------------------

def test_registry_alias_and_presets():
  for name in NEW + ("DP-FedAvg",):
    assert get_scheme(name.upper()).name == name
  assert get_scheme("fed-smp-randk").dp and not get_scheme("fedavg-topk").dp
  # DP-FedAvg is FL-STD-DP under the Fed-SMP paper's name.
  alias = get_scheme("dp-fedavg")
  assert dataclasses.replace(alias, name="FL-STD-DP",
                             reference=SCHEMES["FL-STD-DP"].reference) == SCHEMES["FL-STD-DP"]
  defaults = sweep.build_parser().parse_args([]).schemes
  # The main job is UAI Table 1 (+ FL-CS); Fed-SMP runs with --schemes.
  assert "FL-STD-DP" in defaults and "DP-FedAvg" not in defaults  # no duplicate run
  request = sweep.resolve(sweep.build_parser().parse_args(
      ["--schemes", "Fed-SMP-topk", "Fed-SMP-randk"]))
  top, rand = (run.setting for run in request.runs)
  assert (top["num_clients"], top["samples_per_client"], top["local_steps"]) == (6000, 9, 10)
  assert rand["samples_per_client"] == 10  # Sec. 6.1: only top_k holds data out
  assert SCHEMES["Fed-SMP-topk"].public_holdout == 1000 == SCHEMES["FedAvg-topk"].public_holdout
  assert SCHEMES["Fed-SMP-randk"].public_holdout == 0
  assert SCHEMES["Fed-SMP-randk"].lr_decay == 0.99  # Sec. 6.2
  for name in NEW:  # k values up, the full model down
    assert get_scheme(name).num_kept(1_663_370, 0.01) == 16_634
    assert get_scheme(name).num_downstream(1_663_370, 0.01) == 1_663_370


# --- Local momentum SGD, reset every round. -----------------------------------

def test_local_momentum_sgd_matches_heavy_ball_and_resets(held_out, model):
  data = held_out[0]
  x = data.x[0].astype(jnp.float32) / 255.0
  y = data.y[0]
  w0 = model.init(jax.random.PRNGKey(0))
  key = jax.random.PRNGKey(3)
  beta, lr, steps = 0.6, 0.3, 4
  lms = jax.jit(lambda w, b: local_training.local_sgd(
      model.loss, w, x, y, key, steps=steps, batch_size=5, lr=lr, momentum=b))
  zeros = jnp.zeros_like(w0)
  got = lms(w0, beta)
  grad = jax.jit(jax.grad(model.loss))
  w, v = w0, zeros  # heavy ball from a zero buffer, same batches
  for sk in jax.random.split(key, steps):
    batch = jax.random.permutation(sk, x.shape[0])[:5]
    v = beta * v + grad(w, x[batch], y[batch])
    w = w - lr * v
  np.testing.assert_allclose(got, w, atol=1e-6)
  plain = local_training.local_sgd(model.loss, w0, x, y, key, steps=steps, batch_size=5, lr=lr)
  np.testing.assert_allclose(lms(w0, 0.0), plain, atol=1e-7)
  # A client's message starts from a fresh buffer each round: it equals the
  # zero-buffer update and not one continuing last round's v.
  scheme = dataclasses.replace(SCHEMES["FedAvg-randk"], momentum=beta)
  plan = (jnp.arange(N_TINY), jnp.float32(1.0))
  msg = scheme.client_message(model, w0, plan, x, y, key, LocalTraining(steps, 5, lr))
  np.testing.assert_allclose(msg, got - w0, atol=1e-6)
  stale = w0  # heavy ball continuing from last round's buffer v
  for sk in jax.random.split(key, steps):
    batch = jax.random.permutation(sk, x.shape[0])[:5]
    v = beta * v + grad(stale, x[batch], y[batch])
    stale = stale - lr * v
  assert float(jnp.linalg.norm(msg - (stale - w0))) > 0.1 * float(jnp.linalg.norm(msg))
  # The server state carries no per-client buffer, only the round count.
  state = scheme.setup(_setup(model, 1.0, held_out[2]))
  assert {f.name for f in dataclasses.fields(state)} == {
      "indices", "round", "key", "lr", "public_x", "public_y", "model", "server_steps",
      "batch_size"}


def test_learning_rate_decays_every_round(model, held_out):
  scheme = SCHEMES["Fed-SMP-randk"]
  state = scheme.setup(_setup(model, 0.1, held_out[2]))
  k = scheme.num_kept(N_TINY, 0.1)
  w = jnp.zeros(N_TINY)
  for t in range(3):
    indices, factor = scheme.round_plan(state, jax.random.PRNGKey(t), N_TINY, k)
    assert float(factor) == pytest.approx(0.99 ** t)
    w, state = scheme.server_update(w, state, jnp.zeros(k), (indices, factor))
  assert int(state.round) == 3


# --- rand_k: a shared uniform mask, unbiased by the d/k scaling. --------------

def test_randk_mask_is_shared_uniform_and_scaling_is_unbiased():
  scheme = SCHEMES["Fed-SMP-randk"]
  n, k, draws = 2_000, 100, 2_000
  delta = jax.random.normal(jax.random.PRNGKey(0), (n,))
  state = scheme.setup(SetupData(None, jnp.zeros(n), None, None, jax.random.PRNGKey(0),
                                 k / n, 1, LocalTraining(1, 1, 0.1)))
  plan = jax.jit(lambda kk: scheme.round_plan(state, kk, n, k)[0])
  keys = jax.random.split(jax.random.PRNGKey(1), draws)
  np.testing.assert_array_equal(plan(keys[0]), plan(keys[0]))  # every client agrees
  idx = jax.vmap(plan)(keys)
  assert idx.shape == (draws, k)
  counts = np.bincount(np.asarray(idx).ravel(), minlength=n)  # uniform coordinates
  assert stats.chisquare(counts).pvalue > 1e-3
  # Rejected against a mask favouring the first half of the coordinates 1.1 : 1.
  favoured = np.where(np.arange(n) < n // 2, 1.1, 1.0)
  assert stats.chisquare(counts, favoured / favoured.sum() * counts.sum()).pvalue < 1e-6
  decoded = jax.vmap(lambda i: masks.decompress(scheme.sparsify(delta, i), i, n))(idx)
  mean = np.asarray(decoded.mean(0), np.float64)
  d = np.asarray(delta, np.float64)
  # Regression slope of the average decoded update on delta: 1 when unbiased.
  # One draw's <decoded, delta> / |delta|^2 has sd ~ sqrt(2 (1 - k/n) / k).
  slope = mean @ d / (d @ d)
  se = np.sqrt(2 * (1 - k / n) / k / draws)
  assert abs(slope - 1.0) < 4 * se
  for wrong in (1.0, 0.95 * n / k):  # no scaling, a scale 5% off
    assert abs(slope * wrong / (n / k) - 1.0) > 8 * se
  # Per coordinate: var of the mean is delta^2 (d/k - 1) / draws.
  z = (mean - d) / (np.abs(d) * np.sqrt((n / k - 1) / draws))
  assert abs(z.mean()) < 4 / np.sqrt(n)
  assert np.all(np.asarray(idx)[:, 1:] > np.asarray(idx)[:, :-1])  # sorted, distinct


# --- Noise: only on the k selected coordinates, N(0, (S sigma)^2) on the sum. --

def _chi2_pvalues(x, var):
  stat = np.sum(np.asarray(x, np.float64) ** 2) / var
  return stats.chi2.cdf(stat, x.size), stats.chi2.sf(stat, x.size)


@pytest.mark.parametrize("secure", [False, True])
def test_noise_only_on_the_mask_with_variance_s_sigma_squared(model, held_out, secure):
  """Clients that do not move (eta = 0): the update is the noise mean alone."""
  data = held_out[0]
  scheme, ratio, clip, sigma, per_round = SCHEMES["Fed-SMP-randk"], 0.5, 0.7, 1.3, 10
  k = scheme.num_kept(N_TINY, ratio)
  extra = dict(secure_bits=28, secure_scale=2.0 ** 16) if secure else {}
  fn = _round_fn(model, scheme, ratio, lr=0.0, clip_norm=clip, noise_multiplier=sigma,
                 clients_per_round=per_round, **extra)
  state0 = simulation.ServerState(jnp.zeros(N_TINY),
                                  scheme.setup(_setup(model, ratio, held_out[2])))
  run_key = jax.random.PRNGKey(7)
  sums = []
  from fedjax_dp import keys as keys_lib
  for t in range(1, 7):
    state, info = fn(state0, data, run_key, jnp.int32(t))
    delta = np.asarray(state.weights)
    mask_key = keys_lib.purpose(keys_lib.round_key(run_key, t), keys_lib.MASK)
    idx = np.asarray(scheme.round_plan(state0.scheme_state, mask_key, N_TINY, k)[0])
    off = np.ones(N_TINY, bool)
    off[idx] = False
    assert np.all(delta[off] == 0.0)  # nothing outside the round's mask
    assert int(info.num_sampled) > 0 and int(info.secure_overflow) == 0
    sums.append(delta[idx] * per_round)  # the DP server divides by C*N
  noise = np.concatenate(sums)  # 6 x 3,925 values
  lo, hi = _chi2_pvalues(noise, (clip * sigma) ** 2)
  assert min(lo, hi) > 1e-3
  for wrong in (0.95, 1.05):
    assert min(_chi2_pvalues(noise, (clip * sigma * wrong) ** 2)) < 1e-4


def test_clip_after_sparsification_to_s(model):
  scheme = SCHEMES["Fed-SMP-randk"]
  n, k = N_TINY, 100
  idx = masks.random_indices(jax.random.PRNGKey(0), n, k)
  delta = 0.01 * jax.random.normal(jax.random.PRNGKey(1), (4, n))
  msgs = jax.vmap(lambda d: scheme.sparsify(d, idx))(delta)
  # ||(d/k) delta[mask]|| is ~ sqrt(d/k) ||delta||: far above S = 0.5 here.
  assert float(jnp.linalg.norm(msgs[0])) > 0.5
  total, clipped = privatized_sum(scheme, msgs, jnp.ones(4, bool), jax.random.split(
      jax.random.PRNGKey(2), 4), 0.5, 0.0)
  assert int(clipped) == 4
  expect = sum(m * 0.5 / jnp.linalg.norm(m) for m in msgs)
  np.testing.assert_allclose(total, expect, rtol=1e-5, atol=1e-7)


# --- top_k: the server's mask from public data only. --------------------------

def test_public_set_is_held_out_of_the_clients_data(held_out):
  pub, rest = holdout_indices(60_000, 1000, 0)
  assert pub.size == 1000 and np.intersect1d(pub, rest).size == 0
  assert np.union1d(pub, rest).size == 60_000
  images, labels = load_dataset("fashion-mnist", "train", as_uint8=True)
  pub, rest = holdout_indices(60_000, 200, 0)
  public = held_out[2]
  np.testing.assert_array_equal(public[1], labels[pub])
  np.testing.assert_allclose(public[0], images[pub] / np.float32(255), atol=1e-7)
  # Every client image comes from the rest (compared by content).
  client_bytes = {bytes(im) for im in np.asarray(held_out[0].x).reshape(-1, 784)}
  rest_bytes = {bytes(im) for im in images[rest].reshape(-1, 784)}
  assert client_bytes <= rest_bytes and len(client_bytes) > 5000
  with pytest.raises(ValueError, match="left after holding out 1000"):
    load_federated_with_public("fashion-mnist", 6000, 10, 1000, 0)


def test_topk_mask_is_independent_of_client_data(model, held_out):
  data, _, public = held_out
  scheme, ratio = SCHEMES["FedAvg-topk"], 0.05
  k = scheme.num_kept(N_TINY, ratio)
  setup = _setup(model, ratio, public)
  state = scheme.setup(setup)
  s0 = simulation.ServerState(setup.w0, state)
  select = jax.jit(lambda st, w: scheme.server_topk(st, w, k=k))
  np.testing.assert_array_equal(state.indices, select(state, setup.w0))
  assert state.server_steps == 2 * 20  # T_gd passes of |B| = 10 over 200 examples
  # The same round with different client data: the same mask is used (the
  # update lies on it) and the next one is again recomputed from the new
  # global model and the public set alone.
  other = simulation.ClientData(255 - data.x, (data.y + 3) % 10)
  fn = _round_fn(model, scheme, ratio)
  masks_used, next_masks = [], []
  for d in (data, other):
    new, _ = fn(s0, d, jax.random.PRNGKey(5), jnp.int32(1))
    moved = np.flatnonzero(np.asarray(new.weights - setup.w0))
    assert moved.size > 0 and np.isin(moved, np.asarray(state.indices)).all()
    masks_used.append(np.asarray(state.indices))
    recomputed = select(dataclasses.replace(state, round=jnp.int32(1)), new.weights)
    np.testing.assert_array_equal(new.scheme_state.indices, recomputed)
    next_masks.append(np.asarray(new.scheme_state.indices))
  np.testing.assert_array_equal(*masks_used)
  fn(new, data, jax.random.PRNGKey(5), jnp.int32(2))  # round 2 reuses round 1's program
  assert fn._cache_size() == 1
  # A different public set gives a different mask: it is the public data that
  # decides.
  flipped = dataclasses.replace(state, public_y=(state.public_y + 1) % 10)
  assert np.intersect1d(select(flipped, setup.w0), state.indices).size < 0.9 * k


# --- Equivalences: DP-FedAvg == FL-STD-DP == Fed-SMP-rand_k at r = 1. ----------

def test_dp_fedavg_alias_and_randk_at_ratio_one_equal_fl_std_dp(model, held_out):
  """Same client message, same clipped and noised sum, same server step."""
  data, _, public = held_out
  x = data.x[:4].astype(jnp.float32) / 255.0
  train_keys = jax.random.split(jax.random.PRNGKey(2), 4)
  noise_keys = jax.random.split(jax.random.PRNGKey(3), 4)
  local = LocalTraining(2, 10, 0.1)
  plain = dataclasses.replace(SCHEMES["Fed-SMP-randk"], momentum=0.0, lr_decay=1.0)
  out = {}
  for name, scheme in (("FL-STD-DP", SCHEMES["FL-STD-DP"]),
                       ("DP-FedAvg", get_scheme("DP-FedAvg")), ("randk", plain)):
    setup = _setup(model, 1.0, public)
    state = scheme.setup(setup)
    plan = scheme.round_plan(state, jax.random.PRNGKey(4), N_TINY,
                             scheme.num_kept(N_TINY, 1.0))
    msgs = jax.vmap(lambda xk, yk, kk: scheme.client_message(
        model, setup.w0, plan, xk, yk, kk, local))(x, data.y[:4], train_keys)
    total, clipped = privatized_sum(scheme, msgs, jnp.ones(4, bool), noise_keys, 0.3, 0.8)
    w, _ = scheme.server_update(setup.w0, state, total / 4, plan)
    out[name] = (np.asarray(w), int(clipped))
  np.testing.assert_array_equal(out["DP-FedAvg"][0], out["FL-STD-DP"][0])
  np.testing.assert_allclose(out["randk"][0], out["FL-STD-DP"][0], atol=1e-6)
  assert out["randk"][1] == out["FL-STD-DP"][1] == out["DP-FedAvg"][1]


# --- Validation. --------------------------------------------------------------

@pytest.mark.parametrize("kwargs,match", [
    (dict(momentum=1.0), "momentum must be in"),
    (dict(momentum=-0.1), "momentum must be in"),
    (dict(lr_decay=0.0), "lr_decay must be in"),
    (dict(server_steps=0), "server_steps must be >= 1"),
    (dict(public_holdout=0), "public_holdout must be >= 1"),
])
def test_bad_scheme_options_are_rejected(kwargs, match):
  scheme = dataclasses.replace(SCHEMES["Fed-SMP-topk"], **kwargs)
  with pytest.raises(ValueError, match=match):
    scheme.validate(N_TINY, 0.1)
