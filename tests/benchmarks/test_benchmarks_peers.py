"""benchmarks/peers.py run as a user runs it, tiny (as tests/test_entry_points.py
runs the other benchmarks): our FL-STD-DP and FL-STD beside pfl-research 0.6.0
(its multi-process simulation with DP, its default setting without) on the
paper CNN, 2 clients, one timed round; the same-work checks, the refusals, and
pfl's environment (built here with --pfl-torch shared: pfl and its old
dp-accounting pin in their own folder, this environment's torch behind them;
a few MB from the package registry instead of a second torch)."""

import json
import pathlib
import re

import pytest

import benchmark_modules

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAPER_CNN = 1_663_370


@pytest.fixture(scope="module")
def peers():
  return benchmark_modules.load("peers")


def _exit(main, capsys, argv) -> tuple[int, str]:
  try:
    code = main(argv)
  except SystemExit as exit_:
    code = exit_.code
  return code, capsys.readouterr().err


def test_peers_runs_both_sides_on_the_same_work(peers, tmp_path, capsys):
  """The records of both sides: rates, memory, machine, load, the ratio of our
  clients/s to pfl's, and the work each did (pfl's counted as it ran)."""
  pytest.importorskip("torch")  # the bench extra (CI installs it): pfl shares its torch
  out, env = tmp_path / "peers.jsonl", tmp_path / "pfl-env"
  argv = ["--clients-per-round", "2", "--repeats", "1", "--cases",
          "pfl-default,FL-STD,pfl-dp-multiproc,FL-STD-DP", "--pfl-torch", "shared",
          "--pfl-env", str(env), "--pfl-processes", "2", "--json", "--out", str(out)]
  code, err = _exit(peers.main, capsys, argv)
  assert code == 0, err
  rows = {r["case"]: r for r in map(json.loads, out.read_text().splitlines())}
  assert list(rows) == ["FL-STD-DP", "FL-STD", "pfl-dp-multiproc", "pfl-default"]
  for r in rows.values():
    assert r["clients_per_round"] == 2 and r["clients_per_sec"] > 0 and r["peak_rss_mb"] > 100
    assert r["rounds_per_sec"] == pytest.approx(1 / r["seconds_per_round"])
    assert "cores" in r["machine"] and len(r["load_average"]) == 2
    work = r["work"]
    assert (work["num_params"], work["local_steps_per_client"], work["batch_size"],
            work["lr"], work["evaluation"]) == (PAPER_CNN, 5, 10, 0.215, False)
  assert (rows["FL-STD-DP"]["work"]["clip_norm"], rows["FL-STD-DP"]["work"]["noise_multiplier"],
          rows["FL-STD"]["work"]["clip_norm"]) == (0.6, 1.54, None)
  multi, single = rows["pfl-dp-multiproc"], rows["pfl-default"]
  # pfl's work, counted: 2 clients x 5 optimizer steps each timed round, no evaluation
  # there (round 0, the warm-up, evaluates every client: the counter counts).
  for r in (multi, single):
    assert r["num_params"] == PAPER_CNN and r["local_steps_per_round"] == [10]
    assert r["clients_trained_per_round"] == [2] and r["evaluations_per_round"] == [0]
    assert r["evaluations_in_warmup"] > 0 and r["max_logit_diff"] < 1e-4
    assert r["pfl"]["pfl"] == "0.6.0" and r["pfl"]["dp_accounting"].startswith("0.5.")
    assert r["pfl"]["dp_accounting_file"].startswith(str(env))
  assert (multi["processes"], multi["threads_per_process"], single["processes"]) == (2, 1, 1)
  assert len(multi["rank_peak_rss_mb"]) == 2 and multi["launcher_peak_rss_mb"] > 0
  assert multi["config"]["privacy"] == ["CentrallyAppliedPrivacyMechanism",
                                        "GaussianMechanism"]
  assert (multi["work"]["clip_norm"], multi["work"]["noise_multiplier"]) == (0.6, 1.54)
  assert single["config"]["privacy"] == [] and single["work"]["clip_norm"] is None
  assert multi["ratio_ours_over_pfl"] == {"FL-STD-DP": pytest.approx(
      rows["FL-STD-DP"]["clients_per_sec"] / multi["clients_per_sec"])}
  assert single["ratio_ours_over_pfl"] == {"FL-STD": pytest.approx(
      rows["FL-STD"]["clients_per_sec"] / single["clients_per_sec"])}
  # The environment: reused while it holds what is asked; isolated from ours.
  again = peers.ensure_pfl_env(env, "shared")
  assert again["built"] is False and again["probe"]["torch"] == peers.installed_torch()
  import dp_accounting  # pylint: disable=import-outside-toplevel
  assert not dp_accounting.__file__.startswith(str(env))


def _pfl_record(peers, **changes):
  work = {"num_params": PAPER_CNN, "clients_per_round": 2, "local_steps_per_client": 5,
          "batch_size": 10, "lr": 0.215, "optimizer": "sgd", "clip_norm": 0.6,
          "noise_multiplier": 1.54, "evaluation": False}
  rec = {"case": "pfl-dp-default", "dp": True, "clients_per_round": 2, "clients_per_sec": 4.0,
         "num_params": PAPER_CNN, "local_steps_per_round": [10],
         "clients_trained_per_round": [2], "evaluations_per_round": [0],
         "max_logit_diff": 1e-6, "max_abs_logit": 0.5, "config": {"central_lr": 1.0},
         "work": dict(work)}
  for key, value in changes.items():
    (rec if key in rec else rec["work"])[key] = value  # counted, else configured
  return rec, work


@pytest.mark.parametrize("changes, says", [
    ({"local_steps_per_round": [9]}, "local steps per round [9]"),
    ({"clients_trained_per_round": [1]}, "clients per round [1]"),
    ({"evaluations_per_round": [2]}, "evaluations in timed rounds [2]"),
    ({"num_params": 1000}, "1000 weights"),
    ({"max_logit_diff": 0.3}, "logits 0.3"),
    ({"config": {"central_lr": 0.5}}, "central learning rate 0.5"),
    ({"lr": 0.1}, "lr 0.1 (ours 0.215)"),
    ({"noise_multiplier": 1.0}, "noise_multiplier 1.0")])
def test_pfl_doing_other_work_is_refused(peers, changes, says):
  rec, work = _pfl_record(peers, **changes)
  with pytest.raises(peers.WorkMismatch, match=f"does not do our work: .*{re.escape(says)}"):
    peers.check_pfl_counts(rec, work)
  peers.check_pfl_counts(*_pfl_record(peers))  # as given: no complaint


def test_a_ratio_needs_the_same_work_on_both_sides(peers):
  """The ratio is refused where the two records' work differs."""
  rec, work = _pfl_record(peers)
  ours = {"case": "FL-STD-DP", "clients_per_sec": 8.0, "work": dict(work)}
  assert peers._ratios(rec, {("FL-STD-DP", 2): ours}) == {"FL-STD-DP": 2.0}
  for key, value in (("batch_size", 5), ("clip_norm", None), ("evaluation", True)):
    other = dict(ours, work=dict(work, **{key: value}))
    with pytest.raises(peers.WorkMismatch, match=f"would not do the same work: {key}"):
      peers._ratios(rec, {("FL-STD-DP", 2): other})


def test_passes_run_the_cases_in_turn_and_ratio_each_pass_on_its_own(peers, monkeypatch,
                                                                     capsys):
  """--passes 2: the cases run in turn twice at each cohort, each pfl record's
  ratio is against our round of its own pass, and the table ends with every
  pass's ratio and their median. The two sides are stand-ins with a set pace
  per pass (what is timed is tested above, run for real)."""
  _, work = _pfl_record(peers)
  pace = {("FL-STD-DP", 1): 8.0, ("FL-STD-DP", 2): 6.0,
          ("pfl-dp-multiproc", 1): 4.0, ("pfl-dp-multiproc", 2): 5.0}
  calls = []

  def record(case, clients, dp):
    calls.append(case)
    nth = sum(c == case for c in calls)
    return {"case": case, "dp": dp, "clients_per_round": clients,
            "clients_per_sec": pace[(case, nth)], "work": dict(work, clients_per_round=clients)}

  monkeypatch.setattr(peers.throughput, "prepared_round",
                      lambda *a, **k: (None, None))
  monkeypatch.setattr(peers, "work_of", lambda plan, clients: dict(work, clients_per_round=clients))
  monkeypatch.setattr(peers, "run_ours", lambda model, case, *a: record(case, a[2], True))
  monkeypatch.setattr(peers, "run_pfl", lambda env, case, clients, *a: record(case, clients, True))
  monkeypatch.setattr(peers, "_check_ours", lambda rec, work: None)
  monkeypatch.setattr(peers, "_emit", lambda rec, args: print(rec["case"], rec["pass"],
                                                              rec.get("ratio_ours_over_pfl")))
  args = peers.parse_args(["--clients-per-round", "2", "--cases",
                           "pfl-dp-multiproc,FL-STD-DP", "--passes", "2"])
  assert peers._measure(args, None, data=None) == 0
  out = capsys.readouterr().out.splitlines()
  assert calls == ["FL-STD-DP", "pfl-dp-multiproc"] * 2
  assert out[-6:] == ["FL-STD-DP 1 None", "pfl-dp-multiproc 1 {'FL-STD-DP': 2.0}",
                      "FL-STD-DP 2 None", "pfl-dp-multiproc 2 {'FL-STD-DP': 1.2}",
                      "ours/pfl (clients/s) in each pass:",
                      "      2  FL-STD-DP / pfl-dp-multiproc: 2.00x, 1.20x (median 1.60x)"]


@pytest.mark.parametrize("args, says", [
    (["--cases", "FL-STD-DP,pfl-nope"], "unknown case pfl-nope"),
    (["--clients-per-round", "10,0"], "expected positive integers"),
    (["--clients-per-round", "ten"], "expected positive integers"),
    (["--repeats", "0"], "--repeats must be > 0, got 0"),
    (["--passes", "0"], "--passes must be > 0, got 0"),
    (["--pfl-processes", "-2"], "--pfl-processes must be > 0, got -2"),
    (["--pfl-torch", "borrowed"], "invalid choice"),
    # At parse time (FL-TOP-DP's config refused it in a ConfigError traceback
    # after the data loaded).
    (["--cases", "FL-STD-DP", "--ratio", "0"], "--ratio must be in (0, 1], got 0.0"),
    (["--cases", "FL-STD-DP", "--ratio", "nan"], "--ratio must be in (0, 1], got nan")])
def test_bad_flags_exit_2_in_one_line(peers, args, says, capsys):
  code, err = _exit(peers.main, capsys, args)
  lines = err.strip().splitlines()
  assert code == 2 and len(lines) == 1 and says in lines[0], err


def test_an_environment_that_cannot_be_built_is_one_line(peers, tmp_path, capsys):
  """pip's failure names the command; a folder peers.py did not build is not touched."""
  pytest.importorskip("torch")
  argv = ["--cases", "pfl-default", "--pfl-torch", "shared", "--pfl-env",
          str(tmp_path / "env"), "--pfl-pip-args", f"--no-index --find-links {tmp_path}"]
  code, err = _exit(peers.main, capsys, argv)
  assert code == 2 and len(err.strip().splitlines()) == 1, err
  assert "-m pip install --disable-pip-version-check 'pfl[pytorch]==0.6.0'" in err
  assert "failed (exit 1)" in err and "Traceback" not in err
  mine = tmp_path / "mine"
  mine.mkdir()
  (mine / "keep.txt").write_text("x")
  code, err = _exit(peers.main, capsys, ["--cases", "pfl-default", "--pfl-torch", "shared",
                                         "--pfl-env", str(mine)])
  assert code == 2 and "was not built by benchmarks/peers.py" in err
  assert (mine / "keep.txt").read_text() == "x"


def test_torch_pins_and_weights_layout(peers, cnn, small_federation, monkeypatch):
  """pfl's own torch: this environment's exact build (2.13.0+cpu: pip's find-links
  hold the CPU wheel), else the bench extra's pin, the CPU wheel from PyTorch's CPU
  index where no NVIDIA device is seen; the weights as throughput.py copies them."""
  assert peers.bench_torch_pin() == "2.13.0"
  assert peers.torch_requirement("own", "2.13.0+cpu", "2.13.0") == ("torch==2.13.0+cpu", [])
  assert peers.torch_requirement("shared", "2.13.0+cu128", "2.13.0") == (
      "torch==2.13.0+cu128", [])
  monkeypatch.setattr(peers, "_nvidia_visible", lambda: False)
  assert peers.torch_requirement("own", None, "2.13.0") == (
      "torch==2.13.0+cpu", ["--extra-index-url", "https://download.pytorch.org/whl/cpu"])
  monkeypatch.setattr(peers, "_nvidia_visible", lambda: True)
  assert peers.torch_requirement("own", None, "2.13.0") == ("torch==2.13.0", [])
  with pytest.raises(peers.PflEnvError, match="there is none"):
    peers.torch_requirement("shared", None, "2.13.0")
  pytest.importorskip("torch")
  import jax  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  throughput = benchmark_modules.load("throughput")
  data, _, _ = small_federation
  w0 = cnn.init(jax.random.PRNGKey(0))
  x = np.asarray(data.x[:1], np.float32) / 255.0
  _, _, net, weights, _, _, _ = throughput._torch_cnn(cnn, w0, x, np.asarray(data.y[:1]))
  mine = peers.torch_layout(cnn, w0)
  assert list(mine) == [name for name, _ in net.named_parameters()]
  for got, want in zip(mine.values(), weights):
    np.testing.assert_array_equal(got, want.numpy())
  assert sum(a.size for a in mine.values()) == PAPER_CNN


def test_the_worker_imports_nothing_of_the_project():
  """pfl_worker.py runs in pfl's environment, which has no fedjax_dp or JAX."""
  source = (ROOT / "benchmarks" / "pfl_worker.py").read_text()
  assert "fedjax_dp" not in source.replace("``fedjax_dp``", "")
  assert "import jax" not in source
