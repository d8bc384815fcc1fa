"""fedjax_dp.cli: flags built from declared options, errors mapped by field.

A scheme family declares its options as data (no argparse in
``fedjax_dp.schemes``); the command line builds their flags and hands the
values back; every ConfigError a scheme or data check raises names a field
that has a flag, so no library spelling reaches the user.
"""

import argparse
import ast
import dataclasses
import pathlib

import pytest

from fedjax_dp import datasets, errors, options, schemes, simulation
from fedjax_dp.cli import sweep
from fedjax_dp.cli import errors as cli_errors
from fedjax_dp.cli import parser as cli_parser
from fedjax_dp.cli import schemes as cli_schemes
from fedjax_dp.schemes.sign import SignScheme

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "fedjax_dp"


def _imports(path: pathlib.Path) -> set[str]:
  names = set()
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.Import):
      names |= {alias.name for alias in node.names}
    elif isinstance(node, ast.ImportFrom) and node.module:
      names.add(node.module)
  return names


@pytest.mark.parametrize("path", sorted((PACKAGE / "schemes").glob("*.py")) +
                         [PACKAGE / "options.py"], ids=lambda p: p.name)
def test_no_scheme_module_imports_argparse_or_the_cli(path):
  imported = _imports(path)
  assert not {name for name in imported if name.split(".")[0] == "argparse"}
  assert not {name for name in imported if name.startswith("fedjax_dp.cli")}


def test_only_the_command_line_modules_build_flags():
  """argparse lives in fedjax_dp/cli/ (the sweep's cli/sweep.py among them),
  nowhere else in the library (distributed's process flags moved to
  cli.parser)."""
  users = {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
           if "argparse" in {n.split(".")[0] for n in _imports(p)}}
  assert "cli/sweep.py" in users
  assert {u for u in users if not u.startswith("cli/")} == set()


# --- A family of the user's: options as data, no argparse. ---------------------


@dataclasses.dataclass(frozen=True)
class ToySign(SignScheme):
  """FL-SIGN with a bound on gamma, checked by name."""

  def validate(self, num_params, ratio):
    if self.gamma >= 1:
      raise errors.ConfigError("gamma", f"must be < 1, got {self.gamma}")


TOY = ToySign("TOY-SIGN", False, False, 0.001, "a test's own scheme")
TOY_FAMILY = schemes.Family(
    "toy family (a test's)", {TOY.name: TOY},
    options=(options.Option("toy_gamma", options.positive, 0.5, "the toy's server step",
                            field="gamma"),
             options.Option("toy_mode", str, "a", "a choice", choices=("a", "b")),
             options.Option("toy_switch", bool, False, "a switch")),
    configure=lambda scheme, values: dataclasses.replace(scheme, gamma=values["toy_gamma"]))


@pytest.fixture
def toy_registered(monkeypatch):
  families = [*schemes.FAMILIES, TOY_FAMILY]
  monkeypatch.setattr(schemes, "FAMILIES", families)
  monkeypatch.setattr(cli_parser, "FAMILIES", families)
  monkeypatch.setitem(schemes.SCHEMES, TOY.name, TOY)


def test_a_family_declared_without_argparse_gets_its_flags_and_configure(toy_registered):
  parser = sweep.build_parser()
  actions = {a.option_strings[0]: a for a in parser._actions  # pylint: disable=protected-access
             if a.option_strings}
  assert actions["--toy-mode"].choices == ("a", "b") and actions["--toy-mode"].default == "a"
  assert actions["--toy-switch"].nargs == 0 and actions["--toy-switch"].default is False
  with pytest.raises(argparse.ArgumentTypeError, match="^--toy-gamma must be > 0, got 0$"):
    actions["--toy-gamma"].type("0")
  assert "toy family (a test's)" in parser.format_help()
  args = parser.parse_args(["--schemes", "toy-sign", "--toy-gamma", "0.25", "--toy-switch"])
  assert args.toy_switch and args.toy_mode == "a"
  (run,) = sweep.resolve(args, num_params=7850).runs
  assert run.scheme.name == "TOY-SIGN" and run.scheme.gamma == 0.25
  default = sweep.resolve(parser.parse_args(["--schemes", "TOY-SIGN"]), num_params=7850).runs
  assert default[0].scheme.gamma == 0.5  # the declared default
  # The same family configured by a script, without a command line.
  assert TOY_FAMILY.configure(TOY, {**TOY_FAMILY.defaults(), "toy_gamma": 0.1}).gamma == 0.1


def test_a_users_scheme_error_names_the_users_flag(toy_registered, tmp_path, capsys):
  out = tmp_path / "out"
  assert sweep.main(["--schemes", "TOY-SIGN", "--toy-gamma", "2", "--out", str(out)]) == 2
  assert capsys.readouterr().err.splitlines() == [
      "sweep.py: error: --toy-gamma must be < 1, got 2.0"]
  assert not out.exists()


# --- Errors carry their field; the command line looks its flag up. ------------


def test_flag_error_looks_the_field_up_and_keeps_anything_else():
  mapped = cli_errors.flag_error(errors.ConfigError("clip_norm", "must be > 0, got -2"))
  assert type(mapped) is ValueError and str(mapped) == "--clip must be > 0, got -2"
  unknown = errors.ConfigError("no_such_field", "is bad")
  assert cli_errors.flag_error(unknown) is unknown
  plain = ValueError("ratio must be in (0, 1]")  # a plain error keeps its message
  assert cli_errors.flag_error(plain) is plain


def test_a_run_config_error_names_its_flag(monkeypatch, tmp_path, capsys):
  """RunConfig's checks raise ConfigError naming RunConfig's field: the
  sweep reports the flag, whichever check it was."""
  def refuse(*args, **kwargs):
    raise errors.ConfigError("clip_ratio", "must be in (0, 1], got 2.0")

  monkeypatch.setattr(simulation.setup, "validate", refuse)
  out = tmp_path / "out"
  # A tiny setting: a refusal the sweep misses fails in seconds, not after a paper run.
  tiny = ["--rounds", "1", "--num-clients", "20", "--clients-per-round", "2", "--test-size", "10"]
  assert sweep.main(["--schemes", "FL-STD", *tiny, "--out", str(out)]) == 2
  assert capsys.readouterr().err.splitlines() == [
      "sweep.py: error: --clip-ratio must be in (0, 1], got 2.0"]


def _config_error_fields(path: pathlib.Path) -> set[str]:
  """Every field a module's ``ConfigError(...)`` calls can name: a string, a
  conditional of strings, or a parameter of the enclosing function (then
  its default and the strings its callers in the module pass)."""
  tree = ast.parse(path.read_text())
  functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]

  def strings(node, call) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
      return {node.value}
    if isinstance(node, ast.IfExp):
      return strings(node.body, call) | strings(node.orelse, call)
    if isinstance(node, ast.Name):
      for fn in functions:
        params = [a.arg for a in fn.args.args]
        if node.id in params and call in ast.walk(fn):
          return passed(fn, params.index(node.id), call)
    raise AssertionError(f"{path.name}:{call.lineno}: a ConfigError whose field the "
                         "test cannot read; name it with a string")

  def passed(fn, index, call) -> set[str]:
    found = set()
    defaults = fn.args.defaults
    first_default = len(fn.args.args) - len(defaults)
    if index >= first_default:
      found |= strings(defaults[index - first_default], call)
    for site in ast.walk(tree):
      if isinstance(site, ast.Call) and getattr(site.func, "id", None) == fn.name:
        if len(site.args) > index:
          found |= strings(site.args[index], call)
        found |= {s for k in site.keywords if k.arg == fn.args.args[index].arg
                  for s in strings(k.value, call)}
    return found

  return {field for node in ast.walk(tree)
          if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "ConfigError"
          for field in strings(node.args[0], node)}


@pytest.mark.parametrize("family", schemes.FAMILIES, ids=lambda f: f.title.split()[0])
def test_every_config_error_of_a_scheme_module_names_an_option(family):
  """What a family's module raises names one of the family's options (so
  the command line reports its flag), and every option sets an attribute
  of a scheme of the family."""
  module = next(iter(family.schemes.values())).__class__.__module__
  fields = _config_error_fields(PACKAGE / "schemes" / f"{module.rsplit('.', 1)[1]}.py")
  assert fields <= set(cli_schemes.field_flags(family)), module
  for option in family.options:
    assert any(hasattr(s, option.setting) for s in family.schemes.values()), option


@pytest.mark.parametrize("path", [PACKAGE / "datasets.py",
                                  PACKAGE / "data" / "partitioning.py"], ids=lambda p: p.name)
def test_every_config_error_of_a_data_check_has_a_flag(path):
  fields = _config_error_fields(path)
  assert fields and fields <= set(cli_errors.DATA_FLAGS), fields - set(cli_errors.DATA_FLAGS)


def test_a_data_error_names_its_flag(tmp_path, capsys):
  """datasets.load's ConfigError reaches the user as the flag."""
  with pytest.raises(errors.ConfigError) as raised:
    datasets.load("fashion-mnist", 10, 10, test_size=10_001)
  assert raised.value.field == "test_size"
  out = tmp_path / "out"
  assert sweep.main(["--test-size", "10001", "--out", str(out)]) == 2
  assert capsys.readouterr().err.splitlines() == [
      "sweep.py: error: --test-size must be in [1, 10000] for fashion-mnist, got 10001"]


def test_every_run_flag_reaches_the_run_config():
  """A flag given wins over the scheme's preset and the data set's setting:
  each declared run option's value is the RunConfig's field."""
  given = {"rounds": 3, "clients_per_round": 7, "local_steps": 2, "batch_size": 5,
           "lr": 0.1, "init_steps": 7, "seed": 3, "eval_every": 2, "noise_multiplier": 1.2,
           "delta": 1e-4, "accountant": "rdp", "max_dropouts": 1, "dropout_rate": 0.1,
           "secure_frac_bits": 12, "secure_neighbours": 2, "client_chunk": 8}
  args = []
  declared = {o.setting: o for _, group in simulation.config.option_groups() for o in group}
  for field, value in given.items():
    args += [declared[field].flag, str(value)]
  (run,) = sweep.resolve(sweep.build_parser().parse_args(
      [*args, "--schemes", "FL-STD-DP", "--num-clients", "60", "--secure-aggregation"]),
      num_params=7850).runs
  flat = run.config.flat()
  assert {field: flat[field] for field in given} == given


def test_the_preset_flags_are_read_from_the_declared_options():
  """The flags whose default is the scheme's preset are the options declared
  with ``preset="scheme"``, not a hand-kept list (issue 61): UAI Table 5's
  seven settings."""
  assert set(cli_parser.PRESET_FLAGS) == {"rounds", "num_clients", "samples_per_client",
                                          "clients_per_round", "local_steps", "batch_size",
                                          "lr"}
  declared = {o.name: o for o in cli_parser.declared_options()}
  assert all(declared[name].preset == "scheme" for name in cli_parser.PRESET_FLAGS)
  assert all(declared[name].default is None for name in cli_parser.PRESET_FLAGS)
