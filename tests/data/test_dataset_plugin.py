"""A data set of a research project's own, registered from test code and run
from the command line: its module (here, the top of this file) plus one
``datasets.register`` line, no other library file touched (issue 48, item 3).
The built-in data sets are the same: a module of ``fedjax_dp.data.sets``
each, and one line of the registry."""

import ast
import dataclasses
import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from fedjax_dp import datasets, models, options
from fedjax_dp.data import settings as data_settings
from fedjax_dp.cli import sweep as experiment
from fedjax_dp.cli import errors as cli_errors
from fedjax_dp.data.sets import base, fashion_mnist
from test_cli_options import _config_error_fields
from tiny_model import tiny_linear

ROOT = pathlib.Path(__file__).resolve().parents[2]
SETS = ROOT / "fedjax_dp" / "data" / "sets"

# --- The data set's module: its setting, loader, own option and federation builder. --------

TOY_SETTING = {"num_clients": 6, "samples_per_client": 5, "clients_per_round": 3,
               "rounds": 2, "local_steps": 1, "batch_size": 5, "lr": 0.1, "delta": 1e-5,
               "noise_multiplier": 1.0, "init_steps": 1, "public_batch": 4}
_RNG = np.random.default_rng(0)
_IMAGES = {"train": _RNG.integers(0, 256, (80, 28, 28, 1), dtype=np.uint8),
           "test": _RNG.integers(0, 256, (20, 28, 28, 1), dtype=np.uint8)}
_LABELS = {"train": _RNG.integers(0, 10, 80), "test": _RNG.integers(0, 10, 20)}


def _load(split, seed):
  del seed
  return _IMAGES[split], _LABELS[split]


def _federation(dataset, request):
  """Split by partition, the summary carrying the toy's own option."""
  fed = base.partition_federation(dataset, request)
  return fed._replace(summary={**fed.summary, "toy_tag": request.options["toy_tag"]})


TOY = base.Dataset(
    name="toy-images", model="toy-linear",
    settings=data_settings.DataSetting(TOY_SETTING, "a test's toy setting", {}),
    federation=_federation, loader=_load, holds_out_public=True,
    options=(options.Option("toy_tag", str, "plain", "a tag the summary carries"),),
    public_source="4 training images held out", about="tiny random images (a test's)",
    class_names=tuple(f"glyph{c}" for c in range(10)), class_aliases={"first": 0},
    option_defaults={"lr_decay_every": 3, "public_holdout": 4, "server_lr": 0.25})


@pytest.fixture
def toy(monkeypatch):
  monkeypatch.setitem(models.MODELS, "toy-linear", tiny_linear)
  datasets.register(TOY)  # the one line
  yield TOY
  datasets.unregister(TOY.name)


def test_a_registered_data_set_runs_from_the_command_line(toy, tmp_path, capsys):
  parser = experiment.build_parser()
  assert "toy-images" in parser.format_usage()  # --dataset's choices: the registry, now
  out = tmp_path / "out"
  code = experiment.main(["--dataset", "toy-images", "--schemes", "FL-STD", "FL-TOP-DP",
                          "--ratio", "0.1", "--quiet", "--out", str(out)])
  assert code == 0, capsys.readouterr().err
  results = json.loads((out / "results.json").read_text())
  assert results["config"]["dataset"] == "toy-images"
  runs = {r["scheme"]: r for r in results["runs"]}
  assert set(runs) == {"FL-STD", "FL-TOP-DP"}
  for run in runs.values():  # the data set's setting, its model, its split
    assert run["dataset"] == "toy-images" and run["rounds"] == 2
    assert len(run["history"]) == 2 and run["num_params"] == 7850
    assert run["samples_per_client"] == 5 and run["setting_source"] == "a test's toy setting"
    summary = run["data_summary"]
    assert summary["toy_tag"] == "plain" and summary["public_examples"] == 4
    assert summary["partition"] == "iid"
  assert runs["FL-TOP-DP"]["noise_multiplier"] == 1.0 and runs["FL-TOP-DP"]["delta"] == 1e-5
  assert (out / "results.csv").exists()


def test_a_registered_data_set_is_everywhere_a_built_in_one_is(toy, tmp_path, capsys):
  assert datasets.DATASETS["toy-images"].settings is TOY.settings
  assert datasets.reachable("toy-images") == ""
  fed = datasets.load("toy-images", 4, 5, seed=1, toy_tag="mine")
  assert np.asarray(fed.data.x).shape == (4, 5, 28, 28, 1) and fed.summary["toy_tag"] == "mine"
  assert fed.public[0].dtype == np.float32 and len(fed.public[1]) == 4
  with pytest.raises(ValueError, match="^toy_tag applies to toy-images only, not to mnist$"):
    datasets.load("mnist", 5, 10, toy_tag="mine")
  # Its errors reach the user as the data flags.
  out = tmp_path / "out"
  assert experiment.main(["--dataset", "toy-images", "--test-size", "21", "--schemes",
                          "FL-STD", "--out", str(out)]) == 2
  assert capsys.readouterr().err.splitlines() == [
      "sweep.py: error: --test-size must be in [1, 20] for toy-images, got 21"]
  assert not out.exists()


def test_a_taken_name_is_refused_with_one_line(toy):
  for dataset in (TOY, fashion_mnist.DATASET):
    with pytest.raises(ValueError) as raised:
      datasets.register(dataset)
    assert str(raised.value) == f"dataset {dataset.name!r} is already registered"
  with pytest.raises(ValueError, match="^dataset 'bad': a data set split by partition "
                                       "needs a loader$"):
    base.Dataset(name="bad", model="cnn", settings=TOY.settings,
                 federation=base.partition_federation)


def test_an_unregistered_data_set_is_refused_by_the_command_line(tmp_path, capsys):
  assert "toy-images" not in datasets.DATASETS
  assert experiment.main(["--dataset", "toy-images", "--out", str(tmp_path / "out")]) == 2
  assert "invalid choice: 'toy-images'" in capsys.readouterr().err


# --- A data set is one module and one registry line. --------------------------------------


def _registry() -> tuple[list[str], list[str], ast.AST]:
  """(modules imported from fedjax_dp.data.sets, registry entries' modules, the entries)."""
  tree = ast.parse((ROOT / "fedjax_dp" / "datasets.py").read_text())
  imported = [a.name for node in tree.body if isinstance(node, ast.ImportFrom)
              and node.module == "fedjax_dp.data.sets" for a in node.names]
  (assign,) = [node for node in tree.body if isinstance(node, ast.AnnAssign)
               and node.target.id == "DATASETS"]
  comp = assign.value
  assert isinstance(comp, ast.DictComp) and isinstance(comp.generators[0].iter, ast.Tuple)
  entries = comp.generators[0].iter.elts
  return imported, [e.value.id for e in entries], entries


def test_the_registry_is_one_line_per_data_set_module():
  imported, registered, entries = _registry()
  modules = sorted(p.stem for p in SETS.glob("*.py") if p.stem not in ("__init__", "base"))
  assert sorted(imported) == sorted(registered) == modules
  for entry in entries:  # `<module>.DATASET,`, one line each
    assert isinstance(entry, ast.Attribute) and entry.attr == "DATASET"
    assert entry.lineno == entry.end_lineno
  assert len({e.lineno for e in entries}) == len(entries)
  assert [d.name for d in datasets.DATASETS.values()] == [
      "fashion-mnist", "mnist", "medical-synth", "shakespeare", "svhn", "cifar10", "imdb",
      "femnist"]


@pytest.mark.parametrize("path", sorted(SETS.glob("*.py")), ids=lambda p: p.stem)
def test_a_data_set_module_needs_nothing_but_the_library_s_parts(path):
  """A data set's module imports the shared parts (``base``, the data
  loaders, presets, options, errors): not the registry, the command line, or
  another data set; its errors name fields that have a flag."""
  tree = ast.parse(path.read_text())
  imported = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and node.module:
      imported |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    elif isinstance(node, ast.Import):
      imported |= {a.name for a in node.names}
  ours = {m for m in imported if m.startswith("fedjax_dp")}
  assert not {m for m in ours if m.startswith(("fedjax_dp.cli", "fedjax_dp.datasets"))}
  others = {m for m in ours if m.startswith("fedjax_dp.data.sets.")} - {
      "fedjax_dp.data.sets.base"}
  assert not others, others
  assert _config_error_fields(path) <= set(cli_errors.DATA_FLAGS)


def test_the_data_set_modules_import_without_the_registry():
  code = ("import sys\n"
          "from fedjax_dp.data.sets import (cifar10, fashion_mnist, femnist, imdb,\n"
          "                                 medical_synth, mnist, shakespeare, svhn)\n"
          "names = [m.DATASET.name for m in (fashion_mnist, mnist, medical_synth,\n"
          "                                  shakespeare, svhn, cifar10, imdb, femnist)]\n"
          "assert 'fedjax_dp.datasets' not in sys.modules, 'the registry was imported'\n"
          "assert not [m for m in sys.modules if m.startswith('fedjax_dp.cli')]\n"
          "print(' '.join(names))\n")
  proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        cwd=ROOT, timeout=300)
  assert proc.returncode == 0, proc.stderr
  assert proc.stdout.split() == list(datasets.DATASETS)


def test_the_data_flags_are_the_declared_options():
  """The command line's data flags and the errors' flags come from
  ``datasets.OPTIONS``; no help states a default the option declares elsewhere."""
  parser = experiment.build_parser()
  actions = {a.option_strings[0]: a for a in parser._actions  # pylint: disable=protected-access
             if a.option_strings}
  for option in datasets.OPTIONS:
    action = actions[option.flag]
    assert action.default == option.default and action.help == option.described
    assert cli_errors.DATA_FLAGS[option.setting] == option.flag
  assert cli_errors.DATA_FLAGS["holdout"] == "--public-holdout"
  assert cli_errors.DATA_FLAGS["num_clients"] == "--num-clients"
  public = actions["--public-size"].help
  for name, dataset in datasets.DATASETS.items():
    assert name in actions["--dataset"].help
    assert f"{name} {dataset.setting['public_batch']}" in public
  assert f"(default {datasets.SHAKESPEARE_TEST_SIZE})" in actions["--test-size"].help


def test_a_data_set_owns_its_classes_and_its_scheme_options(toy):
  """Backdoor classes by name and the Fed-SMP and FL-CS options the data set
  sets live on the data set alone (issue 61): a flag still wins."""
  from fedjax_dp import schemes
  from fedjax_dp.features.attack import adversary
  from fedjax_dp.schemes import cs, fedsmp
  assert adversary.parse_class("Glyph5", "toy-images") == 5
  assert adversary.parse_class("first", "toy-images") == 0
  with pytest.raises(ValueError, match="^unknown class 'glyph10' of toy-images"):
    adversary.parse_class("glyph10", "toy-images")
  topk = schemes.get_scheme("Fed-SMP-topk")
  values = {o.name: None for o in fedsmp.OPTIONS}
  mine = fedsmp.configure(topk, {**values, "dataset": "toy-images"})
  assert (mine.lr_decay_every, mine.public_holdout) == (3, 4)
  given = fedsmp.configure(topk, {**values, "dataset": "toy-images", "lr_decay_every": 2})
  assert (given.lr_decay_every, given.public_holdout) == (2, 4)
  plain = fedsmp.configure(topk, {**values, "dataset": "fashion-mnist"})
  assert (plain.lr_decay_every, plain.public_holdout) == (1, topk.public_holdout)
  cs_values = {o.name: o.default for o in cs.OPTIONS}
  assert cs.configure(schemes.get_scheme("FL-CS"), {**cs_values, "dataset": "toy-images"}
                      ).server_lr == 0.25
  assert cs.configure(schemes.get_scheme("FL-CS"), {**cs_values, "dataset": "medical-synth"}
                      ).server_lr == 1.0
  with pytest.raises(ValueError, match="^dataset 'toy-images': class_names names 3 classes "
                                       "of 10$"):
    dataclasses.replace(TOY, class_names=("a", "b", "c"))
  with pytest.raises(ValueError, match="class_aliases name a label outside class_names$"):
    dataclasses.replace(TOY, class_aliases={"last": 10})
