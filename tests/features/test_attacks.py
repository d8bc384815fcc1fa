"""Thesis Chapter 6's attack settings, malicious set, poisoned labels and metrics."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

from fedjax_dp import keys, sampling, simulation
from fedjax_dp.features import attack as attack_feature
from fedjax_dp.features.attack import adversary
from fedjax_dp.features.attack.adversary import AttackConfig
from fedjax_dp.data.partitioning import PADDING_LABEL
from fedjax_dp.schemes import get_scheme
from tiny_model import tiny_linear


@pytest.mark.parametrize("text,dataset,want", [
    ("5:7", "mnist", (5, 7)), ("Sandal:Sneaker", "fashion-mnist", (5, 7)),
    ("t-shirt:trouser", "fashion-mnist", (0, 1)), (" 0 : 1 ", "mnist", (0, 1)),
])
def test_backdoor_classes_by_index_or_name(text, dataset, want):
  assert adversary.parse_backdoor(text, dataset) == want


@pytest.mark.parametrize("text,dataset,match", [
    ("5:5", "mnist", "source and target must differ"),
    ("Sandal:Sandal", "fashion-mnist", "source and target must differ"),
    ("5:Cat", "fashion-mnist", "unknown class 'Cat' of fashion-mnist"),
    ("10:1", "mnist", "unknown class '10' of mnist"),
    ("5-7", "mnist", "backdoor must be SRC:DST"),
    ("1:2", "medical-synth", "backdoor classes are defined for"),
])
def test_bad_backdoors(text, dataset, match):
  with pytest.raises(ValueError, match=match):
    adversary.parse_backdoor(text, dataset)


@pytest.mark.parametrize("kwargs,match", [
    (dict(kind="poison", fraction=0.1), "attack 'poison' is unknown"),
    (dict(kind="random-update", fraction=1.0), "fraction must be in"),
    (dict(kind="random-update", fraction=-0.1), "fraction must be in"),
    (dict(kind="gradient-ascent", fraction=0.1, boost=0.5), "boost must be >= 1"),
    (dict(kind="random-update", fraction=0.1, sigma=0.0), "sigma must be > 0"),
    (dict(kind="in-backdoor", fraction=0.1), "needs a source and a target"),
    (dict(kind="random-update", fraction=0.1, source=1, target=2), "takes no backdoor"),
    (dict(kind="in-backdoor", fraction=0.1, source=3, target=3), "must differ"),
    (dict(kind="in-backdoor", fraction=0.1, source=3, target=12), "target class must be in"),
    (dict(kind="in-backdoor", fraction=0.1, source=3, target=5, pool_training="rounds"),
     "pool_training 'rounds' is unknown"),
    (dict(kind="random-update", fraction=0.1, pool_training="epochs"),
     "pool_training applies to colluding attacks, not 'random-update'"),
])
def test_bad_settings(kwargs, match):
  with pytest.raises(ValueError, match=match):
    AttackConfig(**kwargs).validate()


def test_valid_settings_and_collusion():
  AttackConfig("in-backdoor", 0.4, boost=7, source=5, target=7).validate()
  AttackConfig("random-update", 0.0).validate()
  assert AttackConfig("gradient-ascent", 0.1).colluding
  assert not AttackConfig("random-update", 0.1).colluding


def test_malicious_set_is_a_fixed_fraction_drawn_from_the_key():
  key = jax.random.PRNGKey(0)
  a = np.asarray(adversary.malicious_set(key, 1000, 0.1))
  assert a.sum() == 100 and a.dtype == bool
  np.testing.assert_array_equal(a, adversary.malicious_set(key, 1000, 0.1))
  assert not np.array_equal(a, adversary.malicious_set(jax.random.PRNGKey(1), 1000, 0.1))
  assert int(adversary.malicious_set(key, 10, 0.0).sum()) == 0


# ------------------------------------------------------- who joins a round

def _pool_cohorts(sampler, fraction=0.1, num_clients=1000, rate=0.1, trials=400):
  pool = adversary.malicious_set(jax.random.PRNGKey(0), num_clients, fraction)
  share = sampling.PoolShare(pool, fraction)
  ks = jax.random.split(jax.random.PRNGKey(1), trials)
  cohorts = jax.vmap(lambda k: sampling.sample_cohort(k, num_clients, rate, 160, sampler,
                                                      share))(ks)
  idx, mask, pool = np.asarray(cohorts.indices), np.asarray(cohorts.mask), np.asarray(pool)
  return idx, mask, pool, cohorts


def test_the_pool_is_alpha_of_every_fixed_size_cohort_and_honest_rates_stay_q():
  idx, mask, pool, cohorts = _pool_cohorts("fixed")
  assert (np.asarray(cohorts.num_sampled) == 100).all()
  assert ((pool[idx] & mask).sum(axis=1) == 10).all()  # ceil(0.1 * 100) every round
  for t in range(idx.shape[0]):  # nobody twice in a cohort
    assert len(set(idx[t][mask[t]])) == mask[t].sum()
  honest = (~pool[idx] & mask).sum()
  assert honest == 90 * idx.shape[0]  # (|K| - m) / (N - M) = 90 / 900 = q


def test_poisson_honest_clients_join_at_rate_q_beside_an_alpha_share_of_attackers():
  """Honest joins ~ Binomial(900 T, q): accept q = 0.1, reject 0.105."""
  idx, mask, pool, cohorts = _pool_cohorts("poisson")
  honest = (~pool[idx] & mask).sum(axis=1)
  malicious = (pool[idx] & mask).sum(axis=1)
  np.testing.assert_array_equal(malicious, np.round(honest * 0.1 / 0.9))
  np.testing.assert_array_equal(np.asarray(cohorts.num_sampled), honest + malicious)
  trials = 900 * idx.shape[0]
  for q, accept in ((0.1, True), (0.105, False)):
    z = (honest.sum() - q * trials) / np.sqrt(trials * q * (1 - q))
    assert (abs(z) < 3.5) == accept, (q, z)


@pytest.mark.parametrize("sampler", ["poisson", "fixed"])
def test_a_pool_of_nobody_leaves_the_cohort_as_it_was(sampler):
  key = jax.random.PRNGKey(5)
  plain = sampling.sample_cohort(key, 1000, 0.1, 160, sampler)
  empty = sampling.PoolShare(jnp.zeros(1000, bool), 0.0)
  pooled = sampling.sample_cohort(key, 1000, 0.1, 160, sampler, empty)
  for a, b in zip(plain, pooled):
    np.testing.assert_array_equal(a, b)


def test_a_pool_too_small_for_its_share_of_a_fixed_cohort_is_refused():
  sampling.check_pool_share(1000, 0.1, "fixed", 100, 0.1)  # 10 of 100, from 100: fine
  with pytest.raises(ValueError, match="cannot fill 2 of 10 cohort slots"):
    sampling.check_pool_share(10, 1.0, "fixed", 1, 0.14)  # round(1.4) = 1 < ceil(1.4)


def test_fixed_selection_samples_the_pool_like_everyone():
  fixed = AttackConfig("random-update", 0.3, selection="fixed")
  assert adversary.cohort_share(jax.random.PRNGKey(0), 100, fixed) is None
  assert adversary.cohort_share(jax.random.PRNGKey(0), 100, None) is None
  share = adversary.cohort_share(jax.random.PRNGKey(0), 100, dataclasses.replace(
      fixed, selection="cohort"))
  assert int(share.pool.sum()) == 30 and share.fraction == 0.3
  with pytest.raises(ValueError, match="selection 'some' is unknown"):
    dataclasses.replace(fixed, selection="some").validate()


def _federation():
  rng = np.random.default_rng(0)
  y = rng.integers(0, 10, (6, 40)).astype(np.int32)
  y[5, 30:] = PADDING_LABEL  # a padded client
  x = rng.random((6, 40, 2, 2)).astype(np.float32) + 1.0  # no example is all zero
  x[5, 30:] = 0
  malicious = np.array([True, False, True, False, False, False])
  return x, y, malicious


def test_in_backdoor_relabels_only_the_malicious_source_examples():
  x, y, mal = _federation()
  cfg = AttackConfig("in-backdoor", 0.3, source=5, target=7)
  px, py = adversary.poison_labels(x, y, mal, cfg)
  np.testing.assert_array_equal(px, x)
  assert not (py[mal] == 5).any()
  np.testing.assert_array_equal(py[~mal], y[~mal])  # honest clients untouched
  flipped = mal[:, None] & (y == 5)
  assert flipped.any() and (py[flipped] == 7).all()
  assert (y == 5).any() and (y[mal] == 5).any()  # the inputs are not modified


def test_out_backdoor_removes_the_source_class_from_every_honest_client():
  x, y, mal = _federation()
  cfg = AttackConfig("out-backdoor", 0.3, source=0, target=1)
  px, py = adversary.poison_labels(x, y, mal, cfg)
  assert not (py == 0).any()  # honest: removed; malicious: relabelled
  for k in range(6):
    real = py[k] != PADDING_LABEL
    count = int(real.sum())
    assert real[:count].all() and not real[count:].any()  # examples first
    if mal[k]:
      np.testing.assert_array_equal(px[k], x[k])
      np.testing.assert_array_equal(py[k], np.where(y[k] == 0, 1, y[k]))
    else:
      kept = (y[k] != PADDING_LABEL) & (y[k] != 0)
      assert count == kept.sum()
      np.testing.assert_array_equal(py[k, :count], y[k, kept])  # same order
      np.testing.assert_array_equal(px[k, :count], x[k, kept])
      assert (px[k, count:] == 0).all()


def test_out_backdoor_gives_the_honest_clients_source_class_to_the_attackers():
  x, y, mal = _federation()
  cfg = AttackConfig("out-backdoor", 0.3, source=0, target=1)
  given = adversary.out_backdoor_pool(y, mal, cfg)
  want = [(k, i) for k in range(6) for i in range(40) if not mal[k] and y[k, i] == 0]
  assert want and [tuple(r) for r in given] == want  # every honest 0, none of theirs
  assert adversary.out_backdoor_pool(y, mal, AttackConfig("in-backdoor", 0.3, source=0,
                                                          target=1)) is None


def test_other_attacks_leave_the_data_alone():
  x, y, mal = _federation()
  px, py = adversary.poison_labels(x, y, mal, AttackConfig("random-update", 0.3))
  assert px is x and py is y


def test_metrics_use_the_source_class_test_images():
  labels = np.array([5, 5, 5, 5, 1, 2, 7, 7])
  preds = np.array([5, 7, 7, 3, 1, 2, 7, 0])
  cfg = AttackConfig("in-backdoor", 0.1, source=5, target=7)
  m = adversary.attack_metrics(preds, labels, cfg)
  assert m == {"accuracy": 4 / 8, "class_accuracy": 0.25, "attack_accuracy": 0.5,
               "main_accuracy": 3 / 4}  # 1, 2, 7 right; the 7 taken for a 0 wrong
  assert adversary.attack_metrics(preds, labels, None) == {"accuracy": 4 / 8}


# ------------------------------------------------------------- in the round

_CFG = simulation.RunConfig.of(ratio=0.5, rounds=2, clients_per_round=20, eval_every=1,
                            clip_norm=1.0)


_RUNS = {}


def _run(small_federation, name, attack, **kw):
  """A run's (record, final state), run once per setting (tests only read them)."""
  key = (name, attack, tuple(sorted(kw.items())))
  if key not in _RUNS:
    data, test, public = small_federation
    cfg = _CFG.replace(attack=attack, **kw)
    _RUNS[key] = simulation.run(tiny_linear(), get_scheme(name), data, test, public, cfg,
                                return_state=True)
  return _RUNS[key]


@pytest.mark.parametrize("name", ["FL-STD", "FL-TOP-DP", "FL-SIGN"])
def test_no_malicious_client_changes_nothing(small_federation, name):
  plain, w_plain = _run(small_federation, name, None)
  none, w_none = _run(small_federation, name, AttackConfig("gradient-ascent", 0.0, boost=10))
  np.testing.assert_array_equal(w_none.weights, w_plain.weights)
  assert [h["accuracy"] for h in none["history"]] == [h["accuracy"] for h in plain["history"]]
  assert none["epsilon"] == plain["epsilon"]  # honest clients' privacy unchanged
  assert [h["malicious_clients"] for h in none["history"]] == [0, 0]


def _messages(small_federation, name, attack):
  """Round 1's malicious messages of the sampled slots, and its inputs."""
  data, _, public = small_federation
  cfg = _CFG.replace(attack=attack)
  model, scheme = tiny_linear(), get_scheme(name)
  state, plan = simulation.prepare(model, scheme, data, public, cfg)
  inputs, attacked = _attacked_round(plan, state)
  sent = _sent(model, plan, cfg.feature("attack"), state, inputs, attacked, data)
  return np.asarray(sent(inputs.cohort.indices)), (inputs, attacked)


def _sent(model, plan, attack, state, inputs, attacked, data):
  """``attack_messages`` with the round's own local training (``simulation.make_trainer``)."""
  noise = simulation.round_noise(plan, inputs, state.features)
  trainer = simulation.make_trainer(plan, model, state.weights, data, inputs, noise)
  return attack_feature.attack_messages(trainer, attack, inputs, attacked.attackers)


def _attacked_round(plan, state):
  """Round 1's inputs and the attack feature's round value (roles, attackers)."""
  inputs = simulation.round_inputs(plan, state, plan.run_key, jnp.int32(1))
  at = [f.kind for f in plan.features].index("attack")
  return inputs, inputs.features[at]


def test_random_update_attackers_send_their_own_n_0_sigma2_draw(small_federation):
  msgs, (inputs, attacked) = _messages(small_federation, "FL-STD",
                                       AttackConfig("random-update", 0.3))
  n = msgs.shape[1]
  norms = np.linalg.norm(msgs, axis=1) / np.sqrt(n)
  np.testing.assert_allclose(norms, 200.0, rtol=0.05)  # sigma_adv = 200 per weight
  assert not np.allclose(msgs[0], msgs[1])  # no collusion: each its own draw
  # The draw is N(0, 200^2) per weight: accepted against it, rejected against
  # a scale 10% off (Kolmogorov-Smirnov on every attacker's weights).
  draws = msgs.ravel().astype(np.float64)
  assert draws.size > 20_000
  assert scipy.stats.kstest(draws / 200.0, "norm").pvalue > 1e-3
  assert scipy.stats.kstest(draws / 180.0, "norm").pvalue < 1e-6
  assert scipy.stats.kstest(draws / 220.0, "norm").pvalue < 1e-6
  roles = np.asarray(attacked.roles)
  assert 0 < roles.sum() < np.asarray(inputs.cohort.mask).sum()  # some, not all


def test_colluding_attackers_send_one_boosted_update(small_federation):
  base, _ = _messages(small_federation, "FL-STD",
                      AttackConfig("in-backdoor", 0.3, boost=1, source=5, target=7))
  boosted, inputs = _messages(small_federation, "FL-STD",
                              AttackConfig("in-backdoor", 0.3, boost=3, source=5, target=7))
  assert (boosted == boosted[0]).all()  # the same message at every slot
  np.testing.assert_allclose(boosted, 3 * base, rtol=1e-5, atol=1e-7)
  assert np.abs(base).max() > 0


def _pooled_messages(small_federation, name, attack, **kw):
  """Round 1's attackers' message, their pooled data, and the model and
  weights it was computed at (``kw`` changes the run's config)."""
  data, _, public = small_federation
  cfg = _CFG.replace(attack=attack, **kw)
  model, scheme = tiny_linear(), get_scheme(name)
  state, plan = simulation.prepare(model, scheme, data, public, cfg)
  inputs, attacked = _attacked_round(plan, state)
  sent = _sent(model, plan, attack, state, inputs, attacked, data)
  message = np.asarray(sent(inputs.cohort.indices))[0]
  ids = np.asarray(attacked.attackers)
  x = jnp.asarray(data.x)[ids].reshape((-1,) + data.x.shape[2:]).astype(jnp.float32)
  if data.x.dtype == jnp.uint8:  # stored as bytes, trained on [0, 1]
    x = x / 255.0
  return message, (x, jnp.asarray(data.y)[ids].reshape(-1)), model, state.weights, cfg


def test_epochs_pool_training_passes_over_the_pool_as_often_as_a_client_over_its_rows(
    small_federation):
  """pool_training="epochs": T_gd steps for each client's worth of pooled
  rows (rounded up), the same message as the clients' training with that
  many steps; the default "steps" runs the clients' T_gd."""
  assert adversary.pooled_steps(5, 100, 10) == 50 and adversary.pooled_steps(5, 105, 10) == 53
  attack = AttackConfig("in-backdoor", 0.3, source=5, target=7)
  assert attack.pool_training == "steps"
  by_steps, (x, _), *_ = _pooled_messages(small_federation, "FL-STD", attack, local_steps=2)
  by_epochs, *_ = _pooled_messages(
      small_federation, "FL-STD", dataclasses.replace(attack, pool_training="epochs"),
      local_steps=2)
  steps = adversary.pooled_steps(2, x.shape[0], small_federation[0].x.shape[1])
  assert steps == 2 * x.shape[0] // small_federation[0].x.shape[1] >= 4
  longer, *_ = _pooled_messages(small_federation, "FL-STD", attack, local_steps=steps)
  np.testing.assert_array_equal(by_epochs, longer)
  assert np.abs(by_epochs - by_steps).max() > 0.1 * np.abs(by_steps).max()


def test_gradient_ascent_is_the_clients_training_climbing_the_loss_then_boosted(
    small_federation):
  """Thesis l.1632: w_l = w_{l-1} + eta grad f(pooled data; w), T_gd steps,
  every gradient at the received model w, the update boosted by eta_adv
  (l.1653). One full-batch step is exactly eta_adv * eta * grad, five are
  five times it (steps that each climbed from the last would differ, and
  diverge to NaN at the paper CNN's T_gd = 30); mini-batch steps climb the
  pooled loss."""
  attack = AttackConfig("gradient-ascent", 0.3, boost=10)
  one, (x, y), model, w0, cfg = _pooled_messages(small_federation, "FL-STD", attack,
                                                 local_steps=1, batch_size=100_000)
  np.testing.assert_allclose(one, 10 * cfg.training.lr * jax.grad(model.loss)(w0, x, y),
                             rtol=1e-4, atol=1e-6)
  five, *_ = _pooled_messages(small_federation, "FL-STD", attack, local_steps=5,
                              batch_size=100_000)
  np.testing.assert_allclose(five, 5 * one, rtol=1e-4, atol=1e-5)
  steps, *_ = _pooled_messages(small_federation, "FL-STD", attack, local_steps=5)
  pooled_loss = lambda update: float(model.loss(w0 + update, x, y))
  # Five unboosted mini-batch steps climb the pooled loss, further than one step.
  assert pooled_loss(steps / 10) > pooled_loss(one / 10) > pooled_loss(0 * one) + 1e-3


@pytest.mark.parametrize("name,attack,says", [
    ("signSGD", AttackConfig("random-update", 0.2),
     "random-update cannot reach signSGD, which trains its clients with steps of its own"),
    ("CDP-LQ", AttackConfig("gradient-ascent", 0.2, boost=10),
     "gradient-ascent cannot reach CDP-LQ"),
    ("CDP-LQ", AttackConfig("in-backdoor", 0.2, boost=5, source=0, target=1),
     "5 cannot reach CDP-LQ"),
])
def test_an_attack_that_cannot_reach_the_scheme_s_training_is_refused(
    small_federation, name, attack, says):
  """signSGD sends one batch's gradient and CDP-LQ runs DP-SGD of its own: an
  attack that replaces the model's local update (or boosts it) would leave
  their messages exactly as they were."""
  data, _, public = small_federation
  cfg = simulation.RunConfig.of(rounds=1, clients_per_round=10, attack=attack)
  with pytest.raises(ValueError, match=says):
    simulation.prepare(tiny_linear(), get_scheme(name), data, public, cfg)
  # Unboosted, a backdoor's relabelled data reaches them.
  _, plan = simulation.prepare(
      tiny_linear(), get_scheme(name), data, public,
      cfg.replace(attack=AttackConfig("in-backdoor", 0.2, source=0, target=1)))
  assert "attack" in [f.kind for f in plan.features]


def test_out_backdoor_attackers_train_on_the_source_class_taken_from_honest_clients(
    small_federation):
  """Thesis l.1720: the 0s leave every honest client and, relabelled, join
  the colluding attackers' pool. One full-batch step makes the message
  -eta * the gradient of the mean loss over that whole pool."""
  data, _, public = small_federation
  attack = AttackConfig("out-backdoor", 0.3, source=0, target=1)
  cfg = _CFG.replace(attack=attack, local_steps=1, batch_size=100_000)
  poisoned = attack_feature.poisoned(data, attack, keys.run_key(cfg.training.seed))
  model, scheme = tiny_linear(), get_scheme("FL-STD")
  state, plan = simulation.prepare(model, scheme, poisoned, public, cfg)
  inputs, attacked = _attacked_round(plan, state)
  sent = _sent(model, plan, attack, state, inputs, attacked, poisoned)
  message = np.asarray(sent(inputs.cohort.indices))[0]
  ids = np.asarray(attacked.attackers)
  honest = np.ones(data.y.shape[0], bool)
  honest[ids] = False
  taken = honest[:, None] & (np.asarray(data.y) == 0)
  given_x, given_y = poisoned.feature_data["attack"]
  np.testing.assert_array_equal(np.asarray(given_x), np.asarray(data.x)[taken])
  assert (np.asarray(given_y) == 1).all() and taken.sum() > 400
  pool_x = jnp.concatenate([poisoned.x[ids].reshape((-1,) + data.x.shape[2:]),
                            given_x]).astype(jnp.float32) / 255.0
  pool_y = jnp.concatenate([poisoned.y[ids].reshape(-1), given_y])
  grad = jax.grad(model.loss)(state.weights, pool_x, pool_y)
  np.testing.assert_allclose(message, -cfg.training.lr * grad, rtol=1e-4, atol=1e-6)


def test_fl_cs_attackers_are_boosted_as_asked(small_federation):
  """Thesis l.1653: gradient ascent is boosted under FL-CS too; its
  in-backdoor rows (Tab. 6.5, l.1737) ask for no boosting with --boost 1."""
  one, _ = _messages(small_federation, "FL-CS",
                     AttackConfig("in-backdoor", 0.3, boost=1, source=5, target=7))
  seven, _ = _messages(small_federation, "FL-CS",
                       AttackConfig("in-backdoor", 0.3, boost=7, source=5, target=7))
  np.testing.assert_allclose(seven, 7 * one, rtol=1e-5, atol=1e-7)  # linear encoder
  assert np.abs(one).max() > 0


def test_a_random_update_attack_wrecks_fl_std_and_is_counted(small_federation):
  attack = AttackConfig("random-update", 0.2)
  record, state = _run(small_federation, "FL-STD", attack)
  plain, w_plain = _run(small_federation, "FL-STD", None)
  assert np.linalg.norm(state.weights) > 100 * np.linalg.norm(w_plain.weights)
  assert record["attack"]["kind"] == "random-update"
  counts = [h["malicious_clients"] for h in record["history"]]
  assert all(0 < c < 20 for c in counts)  # about 20% of ~20 sampled clients


def test_backdoor_run_reports_class_and_attack_accuracy(small_federation):
  attack = AttackConfig("out-backdoor", 0.2, source=0, target=1)
  record, _ = _run(small_federation, "FL-STD", attack)
  entry = record["history"][-1]
  assert 0.0 <= entry["class_accuracy"] <= 1.0 and 0.0 <= entry["attack_accuracy"] <= 1.0
  assert record["attack_accuracy"] == max(
      record["history"], key=lambda h: (h["accuracy"], -h["round"]))["attack_accuracy"]
  # The data the run trained on: no honest client holds the source class.
  data = small_federation[0]
  poisoned = attack_feature.poisoned(data, attack, keys.run_key(_CFG.training.seed))
  malicious = np.asarray(adversary.malicious_set(
      keys.purpose(keys.run_key(0), keys.MALICIOUS), data.y.shape[0], 0.2))
  y = np.asarray(poisoned.y)
  assert not (y == 0).any() and malicious.sum() == 120
  assert (np.asarray(data.y)[malicious] == 0).any()  # theirs relabelled to 1


# ------------------------------------------------------- on real MNIST, end to end


@pytest.fixture(scope="module")
def mnist_small():
  from fedjax_dp import datasets  # pylint: disable=import-outside-toplevel
  return datasets.load("mnist", 20, 100, seed=0)


def _mnist_run(fed, name, attack, rounds=12):
  cfg = simulation.RunConfig.of(ratio=0.1, rounds=rounds, clients_per_round=20, local_steps=10,
                             batch_size=10, lr=0.1, eval_every=1, sampler="fixed",
                             accountant="rdp", attack=attack)
  return simulation.run(tiny_linear(), get_scheme(name), fed.data, fed.test, fed.public, cfg)


def test_a_boosted_in_backdoor_turns_fives_into_sevens_under_fl_std(mnist_small):
  # 20 MNIST clients of 100 images, all in every round; 4 attackers relabel
  # their 5s as 7s and boost by 5 (thesis Sec. 6.1.2, in-backdoor).
  attack = AttackConfig("in-backdoor", 0.2, boost=5, source=5, target=7)
  honest = _mnist_run(mnist_small, "FL-STD", AttackConfig("in-backdoor", 0.0, source=5,
                                                          target=7))
  attacked = _mnist_run(mnist_small, "FL-STD", attack)
  assert honest["best_accuracy"] > 0.8 and honest["attack_accuracy"] < 0.1
  assert attacked["history"][-1]["attack_accuracy"] > honest["attack_accuracy"] + 0.3
  assert all(h["malicious_clients"] == 4 for h in attacked["history"])


def test_fl_sign_majority_vote_resists_random_updates_where_fl_std_does_not(mnist_small):
  # 10% random-update attackers (sigma_adv = 200): thesis Table 6.1's shape.
  attack = AttackConfig("random-update", 0.1)
  std = _mnist_run(mnist_small, "FL-STD", attack, rounds=8)
  sign = _mnist_run(mnist_small, "FL-SIGN", attack, rounds=8)
  sign_honest = _mnist_run(mnist_small, "FL-SIGN", None, rounds=8)
  assert std["best_accuracy"] < 0.3  # chance is 0.1
  assert sign["best_accuracy"] > 0.5  # the 8-round honest run reaches about 0.67
  assert sign["best_accuracy"] > sign_honest["best_accuracy"] - 0.1


def test_attackers_who_skip_their_noise_send_boosted_messages(small_federation):
  # Thesis l.1789-1795: FL-SIGN-DP attackers send 5000 * sign, no noise.
  data, test, public = small_federation
  attack = AttackConfig("in-backdoor", 0.3, boost=5000, source=5, target=7,
                        skip_noise=True)  # an int boost: int8 signs must not wrap
  cfg = _CFG.replace(rounds=1, attack=attack)
  model, scheme = tiny_linear(), get_scheme("FL-SIGN-DP")
  state, plan = simulation.prepare(model, scheme, data, public, cfg)
  inputs, attacked = _attacked_round(plan, state)
  agg = simulation.make_aggregate_fn(model, plan)(state.weights, inputs, data, state.features)
  sent, _ = _messages(small_federation, "FL-SIGN-DP", attack)
  roles = np.asarray(attacked.roles)
  assert set(np.unique(sent[roles])) <= {-1, 1}  # signs, boosted after encoding
  honest = dataclasses.replace(attack, fraction=0.0)
  state0, plan0 = simulation.prepare(model, scheme, data, public, cfg.replace(attack=honest))
  inputs0 = simulation.round_inputs(plan0, state0, keys.run_key(cfg.training.seed),
                                    jnp.int32(1))
  total0 = simulation.make_aggregate_fn(model, plan0)(
      state0.weights, inputs0, data, state0.features).total
  # The attackers' 5000 * sign dominate the sum of the honest noisy signs.
  diff = np.asarray(agg.total) - np.asarray(total0)
  assert np.abs(diff).max() > 0.8 * 5000 * roles.sum()
  assert int(agg.overflow) == 0
  with pytest.raises(ValueError, match="skip_noise applies to DP schemes"):
    _run(small_federation, "FL-SIGN", attack)


def test_a_record_of_attackers_who_skip_their_noise_gives_the_noise_the_model_carries(
    small_federation):
  """The record's epsilon counts sigma; with --attackers-skip-noise the model
  carries sigma sqrt((1 - alpha) |K| / (|K| - l)), which the record gives
  (and not without the flag)."""
  attack = AttackConfig("random-update", 0.36, skip_noise=True)
  record, _ = _run(small_federation, "FL-STD-DP", attack, rounds=1)
  sigma = record["noise_multiplier"]
  assert record["attack"]["honest_noise_multiplier"] == pytest.approx(sigma * 0.8)
  record, _ = _run(small_federation, "FL-STD-DP", attack, rounds=1, max_dropouts=2)
  cohort = record["clients_per_round"]
  assert record["attack"]["honest_noise_multiplier"] == pytest.approx(
      sigma * 0.8 * math.sqrt(cohort / (cohort - 2)))
  plain, _ = _run(small_federation, "FL-STD-DP", dataclasses.replace(attack, skip_noise=False),
                  rounds=1)
  assert "honest_noise_multiplier" not in plain["attack"]
