"""fedjax_dp.cli.resolve: the flags read once, layered, into nested configs."""

import argparse
import copy
import dataclasses

import pytest

from fedjax_dp import datasets, options, simulation
from fedjax_dp.cli import resolve, sweep
from fedjax_dp.cli.parser import build_parser, declared_options
from fedjax_dp.data import settings as data_settings


def _resolve(*argv, **kw) -> resolve.Request:
  return resolve.resolve(build_parser().parse_args(list(argv)), **kw)


def _run(request: resolve.Request, name: str) -> resolve.PlannedRun:
  return next(r for r in request.runs if r.scheme.name == name)


def test_layered_takes_each_name_from_the_last_layer_that_gives_it():
  assert resolve.layered({"a": 1, "b": 1, "c": 1}, {"b": 2, "c": 2}, {"c": 3, "d": None}) == {
      "a": 1, "b": 2, "c": 3}
  assert resolve.layered() == {}


def test_a_runs_settings_layer_library_then_data_set_then_preset_then_flag():
  uai = data_settings.FASHION_MNIST
  # FL-SIGN's preset (thesis Table 8.1) over the data set's; FL-TOP: the data set's;
  # the local optimiser: the library's sgd, as neither the data set nor a preset says.
  request = _resolve("--schemes", "FL-SIGN", "FL-TOP", "--lr", "0.05")
  sign, top = _run(request, "FL-SIGN"), _run(request, "FL-TOP")
  assert (sign.setting["rounds"], sign.setting["num_clients"]) == (100, 1000)
  assert (top.setting["rounds"], top.setting["num_clients"]) == (uai["rounds"],
                                                                 uai["num_clients"])
  assert sign.setting["lr"] == top.setting["lr"] == 0.05  # the flag over both
  assert sign.setting["local_optimizer"] == "sgd"
  assert top.config.training.local_optimizer == "sgd"
  # CIFAR-10's setting says adam (thesis Table 8.1); a flag says otherwise.
  (cifar,) = _resolve("--dataset", "cifar10", "--schemes", "FL-STD").runs
  assert cifar.config.training.local_optimizer == cifar.setting["local_optimizer"] == "adam"
  (flagged,) = _resolve("--dataset", "cifar10", "--schemes", "FL-STD",
                        "--local-optimizer", "sgd").runs
  assert flagged.config.training.local_optimizer == "sgd"


def test_the_data_sets_defaults_fill_the_flags_left_unset_and_flags_win():
  medical = datasets.get_dataset("medical-synth").defaults()
  request = _resolve("--dataset", "medical-synth", "--schemes", "FL-STD-DP")
  (run,) = request.runs
  assert request.values["public_size"] == medical["public_size"] == 24
  assert (run.config.privacy.noise_multiplier, run.config.privacy.delta,
          run.config.training.init_steps) == (medical["noise_multiplier"], medical["delta"],
                                              medical["init_steps"])
  request = _resolve("--dataset", "medical-synth", "--schemes", "FL-STD-DP", "--delta", "1e-6",
                     "--init-steps", "3", "--noise-multiplier", "2.5", "--public-size", "6")
  (run,) = request.runs
  assert (run.config.privacy.noise_multiplier, run.config.privacy.delta,
          run.config.training.init_steps, request.values["public_size"]) == (2.5, 1e-6, 3, 6)


def test_the_dataset_flags_are_read_from_the_declared_options():
  declared = {o.name: o.preset for o in (*datasets.OPTIONS, *declared_options())}
  assert set(resolve.DATASET_FLAGS) == set(datasets.get_dataset("mnist").defaults())
  assert all(declared[name] == "dataset" for name in resolve.DATASET_FLAGS)
  assert set(resolve.RUN_SETTINGS) == {n for n, p in declared.items() if p == "scheme"} | {
      "local_optimizer"}


def test_each_run_config_is_built_nested_from_its_parts():
  (run,) = _resolve("--schemes", "FL-TOP-DP", "--ratio", "0.01", "--rounds", "9",
                    "--clip", "0.7", "--accountant", "pld", "--secure-aggregation",
                    "--client-chunk", "4", "--max-dropouts", "1").runs
  cfg = run.config
  assert isinstance(cfg, simulation.RunConfig) and cfg.ratio == 0.01
  for part, cls in simulation.config.PARTS.items():
    assert type(getattr(cfg, part)) is cls  # pylint: disable=unidiomatic-typecheck
  assert (cfg.training.rounds, cfg.privacy.clip_norm, cfg.privacy.accountant,
          cfg.secure.secure_aggregation, cfg.execution.client_chunk,
          cfg.dropouts.max_dropouts) == (9, 0.7, "pld", True, 4, 1)
  assert run.clip_source == "user"
  # Every other field at its part's declared default.
  assert cfg.privacy.sampler == simulation.Privacy().sampler
  assert cfg.training.selection_metric == datasets.get_dataset("fashion-mnist").selection_metric
  for option in options.declared(simulation.config.Secure):
    if option.setting not in ("secure_aggregation",):
      assert getattr(cfg.secure, option.setting) == option.default


def test_resolve_leaves_the_flags_as_parsed_and_its_values_read_only():
  args = build_parser().parse_args(["--schemes", "FL-STD-DP", "--dataset", "mnist"])
  before = copy.deepcopy(vars(args))
  request = resolve.resolve(args)
  assert vars(args) == before and args.delta is None  # not filled in place
  assert request.values["delta"] == 1e-5
  with pytest.raises(TypeError):
    request.values["delta"] = 1.0  # type: ignore[index]
  with pytest.raises(dataclasses.FrozenInstanceError):
    request.out = "elsewhere"  # type: ignore[misc]


def test_the_data_set_is_looked_up_once(monkeypatch):
  looked_up = []
  real = datasets.get_dataset
  monkeypatch.setattr(datasets, "get_dataset", lambda name: looked_up.append(name) or real(name))
  request = _resolve("--schemes", "FL-STD", "FL-TOP", "FL-SIGN", "--ratio", "0.01", "0.1")
  assert looked_up == ["fashion-mnist"] and len(request.runs) == 4  # FL-TOP at 2 ratios
  assert request.dataset is real("fashion-mnist")
  # Loading the runs' data looks it up no more (medical-synth: generated, no files).
  request = _resolve("--dataset", "medical-synth", "--schemes", "FL-STD", "--num-clients", "6",
                     "--clients-per-round", "2", "--test-size", "20")
  looked_up.clear()
  data = sweep.load_data(request, request.runs)
  assert looked_up == [] and data.of(request.runs[0]).data.x.shape[0] == 6


def test_the_record_config_and_checkpoints_follow_the_request(tmp_path):
  request = _resolve("--schemes", "FL-TOP", "--ratio", "0.01", "--out", str(tmp_path),
                     "--overwrite")
  config = request.config()
  assert "overwrite" not in config and config["dataset"] == request.dataset.label
  assert config["public_size"] == 10 and config["ratio"] == [0.01]
  (run,) = request.runs
  assert request.checkpoint_path(run) == tmp_path / ".checkpoints" / "FL-TOP-r0.01.npz"
  assert sweep.resolve is resolve.resolve  # the sweep's step is this one


def test_bad_combinations_are_one_line_naming_the_flags():
  with pytest.raises(ValueError, match="^--partition dirichlet needs --dirichlet-alpha$"):
    _resolve("--partition", "dirichlet")
  with pytest.raises(ValueError, match="^--clip-ratio applies to a calibrated S"):
    _resolve("--schemes", "FL-STD-DP", "--clip", "0.5", "--clip-ratio", "0.1")
  with pytest.raises(ValueError, match="^--public-size must be even on medical-synth"):
    _resolve("--dataset", "medical-synth", "--public-size", "3")
  with pytest.raises(ValueError, match="^--rounds must be >= 1, got 0$"):
    _resolve("--schemes", "FL-STD", "--rounds", "0")


def test_processes_reads_the_process_flags():
  args = argparse.Namespace(coordinator="h:1", num_processes=2, process_id=1,
                            process_timeout=30)
  got = resolve.processes(args)
  assert (got.coordinator, got.num_processes, got.process_id, got.timeout) == (
      "h:1", 2, 1, 30)
