"""The public API that research code relies on (issue 48).

- docs/api.md's "Public API" section: every listed name imports, and every
  listed module's ``__all__`` is listed whole;
- the Python examples of docs/api.md and README.md run (a block after
  ``<!-- not run -->`` is an illustrative fragment and is skipped);
- the package's doctests run with the tests (``--doctest-modules``);
- ``fedjax_dp.__version__`` is pyproject's, and CHANGELOG.md has its section.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import pathlib
import re
import tomllib
import warnings

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
API_DOC = ROOT / "docs" / "api.md"
EXAMPLE_DOCS = (API_DOC, ROOT / "README.md")
NOT_RUN = "<!-- not run -->"
# The text of fedjax_dp.deprecation.warn's warnings: the docs must not use
# a deprecated spelling.
DEPRECATED = r".* is deprecated; use .* \(removed in .*\)"

_BULLET = re.compile(r"^- `(fedjax_dp(?:\.\w+)*)`: (.+)$")


def public_api(text: str | None = None) -> dict[str, list[str]]:
  """{module: [names]} from the "## Public API" section of docs/api.md.

  One bullet a module (``- `fedjax_dp.x`: `a`, `b```), continued on
  indented lines; the section ends at the next ``## `` heading.
  """
  text = API_DOC.read_text() if text is None else text
  match = re.search(r"^## Public API\n(.*?)(?=^## |\Z)", text, re.M | re.S)
  if match is None:
    raise AssertionError("docs/api.md has no '## Public API' section")
  bullets: list[str] = []
  for line in match.group(1).splitlines():
    if line.startswith("- "):
      bullets.append(line)
    elif bullets and line.startswith("  ") and line.strip():
      bullets[-1] += " " + line.strip()
  api: dict[str, list[str]] = {}
  for bullet in bullets:
    found = _BULLET.match(bullet)
    if found is None:
      raise AssertionError(f"docs/api.md, Public API: cannot read bullet {bullet!r}")
    module, rest = found.groups()
    names = re.findall(r"`([^`]+)`", rest)
    leftover = re.sub(r"`[^`]+`", "", rest).replace(",", "").strip()
    if not names or leftover:
      raise AssertionError(f"docs/api.md, Public API: {module}'s bullet should be "
                           f"backquoted names separated by commas: {rest!r}")
    if module in api:
      raise AssertionError(f"docs/api.md, Public API: {module} has two bullets")
    api[module] = names
  return api


def python_blocks(path: pathlib.Path) -> list[tuple[int, str]]:
  """(first line number, code) of each ```python block not marked not run."""
  lines = path.read_text().splitlines()
  blocks, i = [], 0
  while i < len(lines):
    if lines[i].strip() == "```python":
      start = i + 1
      end = next(j for j in range(start, len(lines)) if lines[j].strip() == "```")
      before = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()),
                    "")
      if before != NOT_RUN:
        blocks.append((start + 1, "\n".join(lines[start:end]) + "\n"))
      i = end + 1
    else:
      i += 1
  return blocks


@pytest.fixture
def deprecations_are_errors():
  with warnings.catch_warnings():
    warnings.filterwarnings("error", message=DEPRECATED, category=DeprecationWarning)
    yield


def test_the_section_reads():
  api = public_api()
  for wanted in ("fedjax_dp.simulation", "fedjax_dp.models", "fedjax_dp.schemes",
                 "fedjax_dp.privacy", "fedjax_dp.keys", "fedjax_dp.options",
                 "fedjax_dp.compression", "fedjax_dp.data", "fedjax_dp.features",
                 "fedjax_dp.aggregators", "fedjax_dp.bandwidth", "fedjax_dp.metrics"):
    assert wanted in api, f"docs/api.md, Public API: no bullet for {wanted}"
  assert {"run", "RunConfig", "Training", "Privacy"} <= set(api["fedjax_dp.simulation"])
  assert {"get_scheme", "Scheme", "Traits"} <= set(api["fedjax_dp.schemes"])


def test_the_parser_and_the_marker():
  text = ("# x\n\n## Public API\n\nwords\n\n- `fedjax_dp.a`: `b`, `C`\n"
          "- `fedjax_dp.d.e`: `f`,\n  `G`\n\n## Next\n\n- `fedjax_dp.z`: `no`\n")
  assert public_api(text) == {"fedjax_dp.a": ["b", "C"], "fedjax_dp.d.e": ["f", "G"]}
  with pytest.raises(AssertionError, match="cannot read"):
    public_api("## Public API\n- fedjax_dp.a: b\n")
  with pytest.raises(AssertionError, match="backquoted"):
    public_api("## Public API\n- `fedjax_dp.a`: `b` and c\n")


def test_python_blocks_skip_the_marked_ones(tmp_path):
  doc = tmp_path / "doc.md"
  doc.write_text("a\n\n```python\nx = 1\n```\n\n<!-- not run -->\n\n```python\n"
                 "undefined_name\n```\n\n```bash\nls\n```\n\n```python\ny = x\n```\n")
  assert python_blocks(doc) == [(4, "x = 1\n"), (18, "y = x\n")]


@pytest.mark.parametrize("module", sorted(public_api()))
def test_every_listed_name_imports(module, deprecations_are_errors):
  names = public_api()[module]
  mod = importlib.import_module(module)  # a deprecated module raises here
  missing = []
  for name in names:
    if hasattr(mod, name):
      continue
    try:  # a submodule not imported by its package
      importlib.import_module(f"{module}.{name}")
    except ImportError:
      missing.append(name)
  assert not missing, (f"docs/api.md lists {', '.join(missing)} in {module}, which "
                       f"has no such name")
  exported = getattr(mod, "__all__", None)
  if exported is not None:
    unlisted = sorted(set(exported) - set(names))
    assert not unlisted, (f"{module}.__all__ exports {', '.join(unlisted)}, which "
                          f"docs/api.md's Public API does not list")


# What 0.2.0 deprecated and 0.3.0 removed (CHANGELOG.md, 0.3.0's "Removed"):
# a module, or ``module:attribute``.
REMOVED = (
    "fedjax_dp.attacks", "fedjax_dp.canaries", "fedjax_dp.client", "fedjax_dp.experiment",
    "fedjax_dp.presets", "fedjax_dp.reproduction", "fedjax_dp.report",
    "fedjax_dp.schemes.masked", "fedjax_dp.simulation:RoundConfig",
    "fedjax_dp.simulation:Prepared.round_cfg", "fedjax_dp.simulation:Prepared.clip_norm",
    "fedjax_dp.features:Feature.ctx", "fedjax_dp.schemes:Scheme.num_values",
    "fedjax_dp.schemes:Scheme.bind", "fedjax_dp.data:ClientData.attacker_x",
    "fedjax_dp.sampling:Malicious", "fedjax_dp.sampling:malicious_share",
    "fedjax_dp.sampling:check_malicious",
)


@pytest.mark.parametrize("name", REMOVED)
def test_the_spellings_removed_in_0_3_0_are_gone(name):
  module, _, attribute = name.partition(":")
  if not attribute:
    with pytest.raises(ModuleNotFoundError):
      importlib.import_module(module)
    return
  found = importlib.import_module(module)
  with pytest.raises(AttributeError):
    for part in attribute.split("."):
      found = getattr(found, part)


def test_the_keywords_removed_in_0_3_0_are_refused():
  from fedjax_dp import sampling, simulation  # pylint: disable=import-outside-toplevel
  with pytest.raises(TypeError, match="rounds"):
    simulation.RunConfig(rounds=3)  # flat settings: RunConfig.of(rounds=3)
  for function in (sampling.sample_cohort, sampling.planned_cohort_sizes,
                   sampling.max_participations):
    assert "malicious" not in inspect.signature(function).parameters  # share=


@pytest.mark.parametrize("path", EXAMPLE_DOCS, ids=lambda p: p.name)
def test_the_examples_run(path, tmp_path, monkeypatch, deprecations_are_errors):
  """The file's blocks run in order in one namespace, as a reader would."""
  monkeypatch.chdir(tmp_path)
  namespace: dict = {"__name__": "__docs__"}
  blocks = python_blocks(path)
  assert blocks, f"{path.name} has no Python block to run"
  for line, code in blocks:
    where = f"{path.relative_to(ROOT)}:{line}"
    exec(compile(code, where, "exec"), namespace)  # noqa: S102
  # What the blocks defined is there: they ran to their end.
  assert set(namespace) > {"__name__", "__builtins__"}


def test_the_package_doctests_run_with_the_tests():
  """pytest collects every module's doctests (``--doctest-modules`` over the
  package, as flax does; no hand-kept list), leaving out only deprecated
  module aliases, which warn on import (issue 61), each named under a
  CHANGELOG.md "Deprecated" heading (0.3.0 removed 0.2.0's)."""
  ini = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
  assert "--doctest-modules" in ini["addopts"].split() and "fedjax_dp" in ini["testpaths"]
  spec = importlib.util.spec_from_file_location("root_conftest", ROOT / "conftest.py")
  conftest = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(conftest)
  changelog = (ROOT / "CHANGELOG.md").read_text()
  deprecated = "".join(re.findall(r"^### Deprecated.*?(?=^##)", changelog, re.M | re.S))
  ignored = [path.removesuffix(".py").replace("/", ".") for path in conftest.collect_ignore]
  assert all(f"`{name}`" in deprecated for name in ignored), ignored
  with_examples = [p for p in (ROOT / "fedjax_dp").rglob("*.py") if ">>> " in p.read_text()]
  assert len(with_examples) >= 12
  assert not {str(p.relative_to(ROOT)) for p in with_examples} & set(conftest.collect_ignore)


def _pyproject_version() -> str:
  return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_version_is_pyprojects():
  import fedjax_dp
  assert fedjax_dp.__version__ == _pyproject_version()


def test_changelog_has_the_versions_section():
  version = _pyproject_version()
  text = (ROOT / "CHANGELOG.md").read_text()
  headings = re.findall(r"^## \[([^\]]+)\]", text, re.M)
  assert version in headings, f"CHANGELOG.md has no '## [{version}]' section"
  assert "0.1.0" in headings
