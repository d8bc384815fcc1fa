"""The library below, the papers' app above (issue 50).

No library module (``fedjax_dp`` outside ``paper`` and ``cli``) imports the
papers' app, ``fedjax_dp.paper``, or the command line, ``fedjax_dp.cli``:
the library's defaults are its own, and the papers' presets are applied from
above by the command line.
"""

from __future__ import annotations

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "fedjax_dp"
# The app layer: the papers' app and the command line.
APP = ("fedjax_dp.paper", "fedjax_dp.cli")


def _is_app(module: str) -> bool:
  return any(module == app or module.startswith(app + ".") for app in APP)


def app_imports(source: str, module: str = "fedjax_dp.x") -> list[str]:
  """The app-layer modules that ``source`` (the text of ``module``) imports,
  top-level or inside a function, absolute or relative."""
  found = []
  package = module.rsplit(".", 1)[0]
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, ast.Import):
      found += [alias.name for alias in node.names if _is_app(alias.name)]
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:  # relative: from the module's package
        parts = package.split(".")[:len(package.split(".")) - node.level + 1]
        base = ".".join(parts + ([base] if base else []))
      names = [base] + [f"{base}.{alias.name}" for alias in node.names]
      found += [name for name in names if _is_app(name)]
  return sorted(set(found))


def library_modules() -> dict[str, pathlib.Path]:
  """Every module of the library, by dotted name."""
  modules = {}
  for path in sorted(PACKAGE.rglob("*.py")):
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    if not _is_app(name):
      modules[name] = path
  return modules


def test_no_library_module_imports_the_papers_app():
  modules = library_modules()
  assert {"fedjax_dp.simulation.config", "fedjax_dp.schemes.sign", "fedjax_dp.data.sets.svhn",
          "fedjax_dp.models", "fedjax_dp.privacy.accounting"} <= set(modules)
  offending = {name: app_imports(path.read_text(), name) for name, path in modules.items()}
  offending = {name: found for name, found in offending.items() if found}
  assert not offending, f"library modules importing the app layer: {offending}"


def test_the_check_finds_each_way_of_importing_the_app():
  for source in ("import fedjax_dp.paper", "import fedjax_dp.paper.tables as t",
                 "from fedjax_dp import paper", "from fedjax_dp.paper import presets",
                 "from fedjax_dp import cli", "from fedjax_dp import paper, keys",
                 "def f():\n  from fedjax_dp.cli import sweep\n",
                 "from .. import paper"):
    assert app_imports(source, "fedjax_dp.schemes.sign"), source
  for source in ("from fedjax_dp import keys", "import fedjax_dp.data.settings",
                 "from fedjax_dp.schemes import presets_like", "from . import base"):
    assert not app_imports(source, "fedjax_dp.schemes.sign"), source


def module_imports(name: str, path: pathlib.Path, modules: set[str]) -> set[str]:
  """The package's modules that ``name`` (its file at ``path``) imports at
  its top level, annotation-only (``if TYPE_CHECKING:``) imports included: an
  edge to the module named, ``from package import module`` to the module."""
  package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
  found = set()

  def visit(body):
    for node in body:
      if isinstance(node, ast.If):
        visit(node.body)
        visit(node.orelse)
      elif isinstance(node, ast.Try):
        visit(node.body)
        for handler in node.handlers:
          visit(handler.body)
      elif isinstance(node, ast.Import):
        found.update(alias.name for alias in node.names if alias.name in modules)
      elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
          parts = package.split(".")[:len(package.split(".")) - node.level + 1]
          base = ".".join(parts + ([base] if base else []))
        for alias in node.names:
          full = f"{base}.{alias.name}"
          found.update({full} if full in modules else {base} & modules)

  visit(ast.parse(path.read_text()).body)
  return found - {name}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
  """The strongly connected components of more than one module (Tarjan)."""
  index, low, stack, on_stack, cycles = {}, {}, [], set(), []

  def connect(v):
    index[v] = low[v] = len(index)
    stack.append(v)
    on_stack.add(v)
    for w in graph[v]:
      if w not in index:
        connect(w)
        low[v] = min(low[v], low[w])
      elif w in on_stack:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      component = []
      while not component or component[-1] != v:
        component.append(stack.pop())
        on_stack.discard(component[-1])
      if len(component) > 1:
        cycles.append(sorted(component))

  for v in graph:
    if v not in index:
      connect(v)
  return cycles


def _all_modules() -> dict[str, pathlib.Path]:
  modules = {}
  for path in sorted(PACKAGE.rglob("*.py")):
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
  return modules


def test_the_package_has_no_import_cycle_not_even_for_annotations():
  """The round's shared types live on the ground floor (``round_types``), so
  ``features`` names ``RoundInputs`` without importing ``simulation`` (issue 61)."""
  modules = _all_modules()
  graph = {name: module_imports(name, path, set(modules)) for name, path in modules.items()}
  assert "fedjax_dp.round_types" in graph["fedjax_dp.features.attack"]
  assert import_cycles(graph) == []


def test_the_cycle_check_finds_a_type_only_cycle(tmp_path):
  modules = {"p", "p.a", "p.b", "p.c"}
  sources = {"p.a": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n  from p.b import X\n",
             "p.b": "from p import c\n", "p.c": "import p.a\n", "p": ""}
  graph = {}
  for name, source in sources.items():
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    graph[name] = module_imports(name, path, modules)
  assert graph == {"p.a": {"p.b"}, "p.b": {"p.c"}, "p.c": {"p.a"}, "p": set()}
  assert import_cycles(graph) == [["p.a", "p.b", "p.c"]]
  graph["p.c"] = set()
  assert import_cycles(graph) == []
