"""FL-SIGN, FL-SIGN-DP and signSGD: signs, majority vote, discrete Gaussian
shares and their accounting (thesis Sec. 4.1.1, 5.2, Theorems 2-3)."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import special, stats

from fedjax_dp import sampling, simulation
from fedjax_dp.privacy import accounting, dg_table
from fedjax_dp.privacy import secure_aggregation as sa
from fedjax_dp.schemes import LocalTraining, Noise, SetupData, get_scheme
from fedjax_dp.schemes.sign import random_tie_sign, table_shares
from scheme_helpers import round_plan
from tiny_model import tiny_linear

FL_SIGN, FL_SIGN_DP, SIGN_SGD = (get_scheme(n) for n in ("fl-sign", "FL-SIGN-DP", "signsgd"))


def test_sign_with_a_fair_coin_for_zeros():
  delta = jnp.concatenate([jnp.zeros(20_000), jnp.array([2.0, -0.5, 1e-30, -1e-30])])
  s = np.asarray(random_tie_sign(delta, jax.random.PRNGKey(0)))
  assert s.dtype == np.int8 and set(np.unique(s)) == {-1, 1}
  np.testing.assert_array_equal(s[-4:], [1, -1, 1, -1])
  heads = int((s[:20_000] == 1).sum())
  assert stats.binomtest(heads, 20_000).pvalue > 1e-3  # a fair coin: accepted
  assert stats.binomtest(heads, 20_000, 0.47).pvalue < 1e-6  # a biased one: rejected
  assert stats.binomtest(heads, 20_000, 0.53).pvalue < 1e-6


def test_server_takes_the_sign_of_the_vote_times_gamma():
  w = jnp.zeros(4)
  new_w, _ = FL_SIGN.server_update(w, None, jnp.array([3.0, -0.1, 0.0, 1e-9]), None)
  np.testing.assert_allclose(new_w, [0.001, -0.001, 0.0, 0.001])
  assert FL_SIGN_DP.gamma == 0.005 and SIGN_SGD.gamma == 0.001  # thesis Tables 8.1-8.2


def test_signsgd_sends_the_sign_of_one_batch_gradient(small_federation):
  data = small_federation[0]
  model = tiny_linear()
  w = model.init(jax.random.PRNGKey(0))
  x = data.x[3].astype(jnp.float32) / 255.0
  key = jax.random.PRNGKey(5)
  local = LocalTraining(steps=7, batch_size=10, lr=0.215)  # |B| = |D_k|: steps ignored
  msg = SIGN_SGD.client_message(model, w, None, x, data.y[3], key, local)
  grad = jax.grad(model.loss)(w, x, data.y[3])
  _, tie_key = jax.random.split(key)
  np.testing.assert_array_equal(msg, random_tie_sign(-grad, tie_key))
  # FL-SIGN sends the sign of a T_gd-step local update instead.
  msg_sign = FL_SIGN.client_message(model, w, None, x, data.y[3], key, local)
  assert np.mean(np.asarray(msg_sign) == np.asarray(msg)) < 0.99


@pytest.mark.parametrize("sampler", ["poisson", "fixed"])
def test_sampling_every_client_with_rate_one(sampler):
  keys = jax.random.split(jax.random.PRNGKey(0), 3)
  capacity = sampling.plan_capacity(keys, 600, 1.0, sampler)
  assert capacity == 600
  cohort = sampling.sample_cohort(keys[0], 600, 1.0, capacity, sampler)
  assert bool(cohort.mask.all()) and int(cohort.num_sampled) == 600
  assert sorted(np.asarray(cohort.indices).tolist()) == list(range(600))


def _round(scheme, data, **kw):
  model = tiny_linear()
  base = dict(num_clients=600, clients_per_round=600, capacity=600, sampler="poisson",
              num_kept=model.num_params, local_steps=1, batch_size=10, lr=0.215,
              noise_multiplier=0.0, clip_norm=1.0)
  plan = round_plan(scheme, **{**base, **kw})
  w0 = model.init(jax.random.PRNGKey(0))
  state, info = jax.jit(simulation.make_round_fn(model, plan))(
      simulation.ServerState(w0, jnp.zeros((0,), jnp.int32)), data,
      jax.random.PRNGKey(1), jnp.int32(1))
  return model, w0, np.asarray(state.weights), info


def test_signsgd_round_is_the_majority_vote_of_all_clients_in_chunks(small_federation):
  data = small_federation[0]
  model, w0, w1, info = _round(SIGN_SGD, data, client_chunk=128)
  assert int(info.num_sampled) == 600
  # The vote computed directly from every client's message.
  from fedjax_dp import keys as keys_lib
  rkey = keys_lib.round_key(jax.random.PRNGKey(1), 1)
  train_keys, _ = keys_lib.client_keys(rkey, jnp.arange(600))
  x = data.x.astype(jnp.float32) / 255.0
  local = LocalTraining(1, 10, 0.215)
  msgs = jax.vmap(lambda xk, yk, kk: SIGN_SGD.client_message(
      model, w0, None, xk, yk, kk, local))(x, data.y, train_keys)
  vote = np.sign(np.asarray(msgs, np.int64).sum(0))
  np.testing.assert_allclose(w1, np.asarray(w0) + 0.001 * vote, atol=1e-7)


K, DIM, SIGMA = 10, 20_000, 0.5


def _tables(fewest, most):
  """FL-SIGN-DP's run constants for DIM weights and rounds of fewest..most shares."""
  data = SetupData(model=None, w0=jnp.zeros(DIM), public_x=None, public_y=None,
                   key=jax.random.PRNGKey(0), ratio=1.0, init_steps=0,
                   local=LocalTraining(1, 10, 0.1), noise_multiplier=SIGMA,
                   num_shares=(fewest, most))
  return FL_SIGN_DP.run_constants(data, math.sqrt(DIM))


# One compilation per sampler: the rejection sampler (no run constants) and
# the alias tables of share counts K - 4 .. K (the run's constants).
_PRIVATIZE = {"rejection": jax.jit(FL_SIGN_DP.privatize),
              "tables": jax.jit(functools.partial(FL_SIGN_DP.privatize,
                                                  constants=_tables(K - 4, K)))}


def _noise_sum(num_shares, dropped, sampler, seed=0):
  """FL-SIGN-DP's integer sum minus the signs, for all-(+1) messages."""
  messages = jnp.ones((K, DIM), jnp.int8)
  keys = jax.random.split(jax.random.PRNGKey(seed), K)
  z, _ = _PRIVATIZE[sampler](messages, jnp.ones((K,), bool), keys,
                             Noise(1.0, SIGMA, jnp.int32(num_shares)))
  assert z.dtype == jnp.int32
  z = np.asarray(z, np.int64)
  return z[dropped:].sum(0) - (K - dropped), z


def _var_pvalues(noise, var):
  stat = np.sum(noise.astype(np.float64) ** 2) / var
  return stats.chi2.cdf(stat, noise.size), stats.chi2.sf(stat, noise.size)


@pytest.mark.parametrize("sampler", ["rejection", "tables"])
def test_fl_sign_dp_aggregate_noise_has_variance_n_sigma_squared(sampler):
  """Sum of |K| DG(sign, sqrt(n) sigma / sqrt(|K|)) shares: variance n sigma^2."""
  n, sigma, k = DIM, SIGMA, K
  noise, z = _noise_sum(k, 0, sampler)
  lo, hi = _var_pvalues(noise, n * sigma ** 2)
  assert min(lo, hi) > 5e-4
  for wrong in (1.05, 0.95):
    lo, hi = _var_pvalues(noise, n * (sigma * wrong) ** 2)
    assert min(lo, hi) < 5e-4
  # Integers centred on the signs: the mean of the shares is +1.
  assert abs(z.mean() - 1.0) < 5 * math.sqrt(n * sigma ** 2 / k / z.size) * math.sqrt(k)


@pytest.mark.parametrize("sampler", ["rejection", "tables"])
def test_fl_sign_dp_shares_survive_l_failures_only_when_scaled(sampler):
  n, sigma, k, l = DIM, SIGMA, K, 3
  scaled, _ = _noise_sum(k - l, l, sampler, seed=1)
  unscaled, _ = _noise_sum(k, l, sampler, seed=1)
  assert _var_pvalues(scaled, n * sigma ** 2)[0] > 1e-3  # not below n sigma^2
  assert _var_pvalues(unscaled, n * sigma ** 2)[0] < 1e-3  # 30% too little


def test_a_share_count_below_the_tables_is_drawn_by_the_rejection_sampler():
  """Fewer shares than any table row (a round the run did not plan): each
  share is still DG(sign, sqrt(n) sigma / sqrt(shares)), drawn on the device
  by the rejection sampler, so the K - 6 arriving shares carry n sigma^2."""
  noise, _ = _noise_sum(K - 6, 6, "tables", seed=3)
  lo, hi = _var_pvalues(noise, DIM * SIGMA ** 2)
  assert min(lo, hi) > 5e-4
  assert _var_pvalues(noise, DIM * (SIGMA * 0.95) ** 2)[1] < 5e-4
  with pytest.raises(ValueError, match="noise_multiplier 0.4 differs"):
    FL_SIGN_DP.privatize(jnp.ones((K, DIM), jnp.int8), jnp.ones((K,), bool),
                         jax.random.split(jax.random.PRNGKey(0), K),
                         Noise(1.0, 0.4, jnp.int32(K)),
                         constants=_tables(K - 4, K))


def test_table_shares_are_each_slots_own_draw_either_way():
  """All slots at once (a GPU's way) and one after the other (a CPU's) give
  the same shares: slot s's is ``sign + sample_table(keys[s])``, ties
  included (scale 2e4: about 70 of 300,000 elements), padding slots zero."""
  table = dg_table.discrete_gaussian_table([1e4, 2e4])
  slots, n = 8, 50_000
  messages = jnp.where(jax.random.bernoulli(jax.random.PRNGKey(1), 0.5, (slots, n)),
                       1, -1).astype(jnp.int8)
  mask = jnp.arange(slots) < 6
  keys = jax.random.split(jax.random.PRNGKey(2), slots)
  row = jnp.int32(1)
  draws = {v: np.asarray(jax.jit(lambda m, s, k, r, v=v: table_shares(
      m, s, k, table, r, vectorised=v, max_ties=3))(messages, mask, keys, row))
           for v in (True, False)}
  own = jax.jit(jax.vmap(lambda k: dg_table.sample_table(k, table, (n,), row)))(keys)
  expected = np.where(np.asarray(mask)[:, None], np.asarray(messages, np.int32)
                      + np.asarray(own), 0)
  values, ties = jax.vmap(lambda k: dg_table.draw_marked(k, table, n, row))(keys[:6])
  assert 30 < int(ties.sum()) < 150
  for v, draw in draws.items():
    np.testing.assert_array_equal(draw, expected, err_msg=f"vectorised={v}")


def _lowered(fn, args, platform):
  return jax.jit(fn).trace(*args).lower(lowering_platforms=(platform,)).as_text()


def test_fl_sign_dp_round_lowers_without_host_callbacks_for_gpus(small_federation):
  """The FL-SIGN-DP round (shares, the unplanned rounds' fallback, the
  server's noise) lowered for CUDA and ROCm (here, without the device) is
  device code only: no host callback. On a GPU the shares have one loop, the
  ties' (no per-slot or per-chunk control flow); on a CPU they scan."""
  data, _, public = small_federation
  cfg = simulation.RunConfig.of(rounds=2, clients_per_round=6, noise_multiplier=0.5,
                                dropout_rate=0.2, max_dropouts=2)
  model = tiny_linear()
  state, plan = simulation.prepare(model, FL_SIGN_DP, data, public, cfg)
  round_fn = simulation.make_round_fn(model, plan)
  args = (state, data, plan.run_key, jnp.int32(1))
  for platform in ("cuda", "rocm", "cpu"):
    text = _lowered(round_fn, args, platform)
    assert "custom_call" not in text or "callback" not in text, platform
  # The check sees a host callback where there is one.
  host = lambda x: jax.pure_callback(np.sin, jax.ShapeDtypeStruct((3,), jnp.float32), x)
  assert "callback" in _lowered(host, (jnp.ones(3),), "cpu")
  table = plan.scheme_constants.shares
  shares = lambda m, s, k, r: table_shares(m, s, k, table, r)
  share_args = (jnp.ones((6, 100), jnp.int8), jnp.ones((6,), bool),
                jax.random.split(jax.random.PRNGKey(0), 6), jnp.int32(0))
  for platform in ("cuda", "rocm"):
    assert _lowered(shares, share_args, platform).count("stablehlo.while") == 1
  assert _lowered(shares, share_args, "cpu").count("stablehlo.while") >= 3


def test_the_run_constants_tables_cover_the_run_share_counts():
  tables = _tables(7, 12)
  assert tables.fewest_shares == 7 and tables.shares.rows == 6
  assert tables.shares.scales[0] == pytest.approx(math.sqrt(DIM) * SIGMA / math.sqrt(7))
  assert tables.shares.scales[-1] == pytest.approx(math.sqrt(DIM) * SIGMA / math.sqrt(12))
  assert tables.server.scales == pytest.approx((math.sqrt(DIM) * SIGMA,))
  # Only FL-SIGN-DP computes constants for a run: nothing without noise.
  assert FL_SIGN_DP.traits.run_constants and not FL_SIGN.traits.run_constants


# --- Accounting: thesis Lemma 1, Theorems 2-3. -------------------------------

@pytest.mark.parametrize("xi", [0.3, 0.5, 0.8])
@pytest.mark.parametrize("mu", [0.0, 0.3, 0.5])
def test_lemma_1_kappa_bounds_pdf_over_pmf(xi, mu):
  x = np.arange(-200, 201)
  z = np.sum(np.exp(-(x - mu) ** 2 / (2 * xi ** 2)))
  ratio = z / (math.sqrt(2 * math.pi) * xi)  # pdf / pmf, the same at every integer
  kappa = accounting.discrete_gaussian_kappa(xi)
  assert 1 - kappa - 1e-12 <= ratio <= 1 + kappa + 1e-12
  if mu in (0.0, 0.5):  # the extremes of theta_3: the bound is nearly attained
    assert abs(ratio - 1) > 0.9 * kappa


def _log_moments(log0, logp1, q, lam):
  """log max(E1, E2) of thesis Eq. (5.2) for the mixture (1-q) p0 + q p1 (log space)."""
  log1 = np.logaddexp(np.log1p(-q) + log0, np.log(q) + logp1) if q < 1 else logp1
  e1 = special.logsumexp(log0 + lam * (log0 - log1))
  e2 = special.logsumexp(log1 + lam * (log1 - log0))
  return max(e1, e2)


@pytest.mark.parametrize("xi,q", [(0.6, 1.0), (0.6, 0.1), (1.0, 0.05), (2.0, 0.5)])
def test_theorem_2_bound_holds_against_a_direct_computation(xi, q):
  """1-D discrete Gaussian mechanism with unit sensitivity, computed exactly."""
  x = np.arange(-60 * int(math.ceil(xi)) - 10, 60 * int(math.ceil(xi)) + 11, dtype=float)
  def logpmf(m):
    e = -(x - m) ** 2 / (2 * xi ** 2)
    return e - special.logsumexp(e)
  grid = np.linspace(x[0], x[-1], 400_001)
  dx = grid[1] - grid[0]
  logpdf = lambda m: stats.norm.logpdf(grid, m, xi) + math.log(dx)
  kappa = accounting.discrete_gaussian_kappa(xi)
  lams = np.arange(1, 33)
  alpha_dg = np.array([_log_moments(logpmf(0), logpmf(1), q, lam) for lam in lams])
  alpha_g = np.array([_log_moments(logpdf(0), logpdf(1), q, lam) for lam in lams])
  bound = alpha_g + lams * math.log1p(kappa) - (lams + 1) * math.log1p(-kappa)
  assert np.all(alpha_dg <= bound + 1e-6 * np.abs(bound) + 1e-9), (alpha_dg, bound)
  # Theorem 3's epsilon (n = 1, |K| = 1: the single-share mechanism) is at
  # least the epsilon of the exact moments, so it is a valid bound here.
  rounds, delta = 20, 1e-5
  eps_exact = np.min((rounds * alpha_dg + math.log(1 / delta)) / lams)
  eps = accounting.epsilon_discrete_gaussian(xi, q, rounds, delta, num_params=1,
                                             cohort_size=1)
  assert eps >= eps_exact - 1e-9
  gaussian = accounting.epsilon(xi, q, rounds, delta)
  assert eps > gaussian if kappa > 1e-9 else eps == pytest.approx(gaussian)


def test_theorem_3_at_the_paper_setting_is_the_gaussian_epsilon():
  n = 1_663_370
  assert accounting.discrete_gaussian_kappa(math.sqrt(n) * 1.54) == 0.0
  assert accounting.discrete_gaussian_nu(1.54, n, 124) == 0.0
  eps = accounting.epsilon_discrete_gaussian(1.54, 1 / 60, 200, 1e-5, n, 124)
  assert eps == pytest.approx(accounting.epsilon(1.54, 1 / 60, 200, 1e-5))
  assert eps == pytest.approx(1.00, abs=0.005)
  eps_rdp = accounting.epsilon_discrete_gaussian(1.54, 1 / 60, 200, 1e-5, n, 124, "rdp")
  assert eps_rdp == pytest.approx(accounting.epsilon(1.54, 1 / 60, 200, 1e-5, "rdp"))
  # nu grows with |K| (smaller shares) and shrinks with n.
  assert (accounting.discrete_gaussian_nu(0.6, 1, 4) >
          accounting.discrete_gaussian_nu(0.6, 1, 2) > accounting.discrete_gaussian_nu(0.6, 2, 2))
  with pytest.raises(ValueError, match="moments/RDP"):
    accounting.epsilon_discrete_gaussian(1.54, 1 / 60, 200, 1e-5, n, 124, "pld")
  with pytest.raises(ValueError, match="too small"):
    accounting.epsilon_discrete_gaussian(0.1, 0.5, 10, 1e-5, 1, 100)


# --- End to end: FL-SIGN-DP under secure aggregation. --------------------------

def test_fl_sign_dp_run_reports_theorem_3_epsilon_and_bits(small_federation):
  data, test, public = small_federation
  cfg = simulation.RunConfig.of(rounds=3, clients_per_round=6, eval_every=3,
                             noise_multiplier=0.1, secure_aggregation=True,
                             clip_norm=0.1, accountant="rdp")
  model = tiny_linear()
  rec = simulation.run(model, FL_SIGN_DP, data, test, public, cfg)
  n = model.num_params
  assert rec["clip_norm"] == pytest.approx(math.sqrt(n))  # the user's 0.1 is ignored
  assert "Thm 3" in rec["accountant"] and "rdp" in rec["accountant"]
  assert rec["epsilon_final"] == pytest.approx(accounting.epsilon_discrete_gaussian(
      0.1, 6 / 600, 3, 1e-5, n, rec["capacity"], "rdp"))
  # Sized for the expected cohort (6); the largest one (at most the capacity)
  # sizes only the noiseless term, which the noise's term outweighs here.
  bits = sa.bit_width(math.sqrt(n) * 0.1, 1.0, 6)
  assert bits == sa.bit_width(math.sqrt(n) * 0.1, 1.0, 6, largest=rec["capacity"])
  assert rec["secure_bits"] == rec["upstream_bits"] == bits
  assert rec["secure_overflows"] == 0 and rec["downstream_bits"] == 32
  assert rec["client_chunk"] is None  # a small cohort is summed in one piece
  assert rec["best_accuracy"] > 0.2  # learns above chance (0.1) in 3 rounds
  # Without secure aggregation the thesis' bits are still reported (Alg. 9 encrypts);
  # FL-SIGN and signSGD send one bit, signSGD receives one.
  rec = simulation.run(model, FL_SIGN, data, test, public,
                       simulation.RunConfig.of(rounds=1, clients_per_round=6))
  assert rec["upstream_bits"] == 1 and rec["epsilon"] is None


# --- The sweep: scheme presets and validation. --------------------------------

def test_sweep_presets_apply_unless_a_flag_is_given(capsys):
  from fedjax_dp.cli import sweep
  parse = sweep.build_parser().parse_args
  runs = {r.scheme.name: r for r in sweep.resolve(
      parse(["--schemes", "FL-SIGN", "signSGD", "FL-TOP"])).runs}
  sign = runs[FL_SIGN.name].setting
  assert (sign["num_clients"], sign["clients_per_round"], sign["samples_per_client"],
          sign["local_steps"], sign["rounds"]) == (1000, 100, 60, 30, 100)  # Table 8.1
  everyone = runs[SIGN_SGD.name].setting
  assert everyone["clients_per_round"] == everyone["num_clients"] == 6000
  assert everyone["local_steps"] == 1
  top = runs["FL-TOP"].setting
  assert (top["num_clients"], top["local_steps"], top["rounds"]) == (6000, 5, 200)
  (run,) = sweep.resolve(parse(["--schemes", "FL-SIGN", "--rounds", "7",
                                "--clients-per-round", "all", "--gamma", "0.002"])).runs
  assert run.setting["rounds"] == 7 and run.setting["clients_per_round"] == 1000
  assert run.scheme.gamma == 0.002
  # The discrete Gaussian bound is a moments/RDP bound: pld is refused up front.
  code = sweep.main(["--schemes", "FL-SIGN-DP", "--accountant", "pld", "--quiet"])
  assert code == 2 and "Thm 3" in capsys.readouterr().err
