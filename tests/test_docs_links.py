"""The docs' relative links: every linked file exists, and every ``#anchor``
into a Markdown file names one of its headings (GitHub's slugs), so a
renamed heading cannot leave a dead link behind."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _slug(heading: str) -> str:
  """GitHub's anchor of a heading: lower case, punctuation dropped (letters,
  digits, '_', '-' and spaces kept), spaces to hyphens."""
  return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: pathlib.Path) -> set[str]:
  found, seen, fenced = set(), {}, False
  for line in path.read_text().splitlines():
    if line.startswith("```"):
      fenced = not fenced
    heading = None if fenced else re.match(r"#{1,6} (.*)", line)
    if heading:
      slug = _slug(heading.group(1))
      count = seen[slug] = seen.get(slug, -1) + 1  # repeats get -1, -2, ...
      found.add(slug if count == 0 else f"{slug}-{count}")
  return found


def _dead_links(path: pathlib.Path) -> list[str]:
  dead = []
  for link in re.findall(r"\]\(([^)\s]+)\)", path.read_text()):
    if re.match(r"[a-z]+:", link):  # https:, mailto:
      continue
    target, _, anchor = link.partition("#")
    linked = path.parent / target if target else path
    if not linked.exists():
      dead.append(f"{link} (no such file)")
    elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
      dead.append(f"{link} (no such heading)")
  return dead


def test_the_checker_finds_a_dead_file_and_a_dead_anchor(tmp_path):
  page = tmp_path / "a.md"
  page.write_text("# Calibration at the UAI setting\n\n## Trained: FL-STD-DP at ε = 1\n\n"
                  "[ok](#calibration-at-the-uai-setting) [ok](a.md#trained-fl-std-dp-at-ε--1)\n"
                  "[gone](#calibration-at-the-uai-setting-not-yet-trained) [gone](b.md)\n")
  assert _dead_links(page) == ["#calibration-at-the-uai-setting-not-yet-trained (no such heading)",
                               "b.md (no such file)"]


def test_no_dead_link_in_the_docs():
  dead = {path.name: links for path in DOCS if (links := _dead_links(path))}
  assert not dead


def _dead_names(text: str) -> list[str]:
  """The ``fedjax_dp.x.y`` names that neither import nor resolve as an
  attribute of an importable module, and the repository paths (``tests/``,
  ``fedjax_dp/``, ``benchmarks/``, ``experiments/``) that do not exist,
  in ``text``. A path said to be "since removed", and the docs' own
  example modules (``my_*``), are left out."""
  import importlib
  dead = []
  for name in sorted(set(re.findall(r"\bfedjax_dp(?:\.[A-Za-z_]\w*)+", text))):
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
      try:
        found = importlib.import_module(".".join(parts[:i]))
        break
      except ImportError:
        continue
    for attribute in parts[i:]:
      found = getattr(found, attribute, None)
    if found is None:
      dead.append(name)
  for match in re.finditer(r"\b(?:fedjax_dp|tests|benchmarks|experiments)/[\w/.\-]+\.(?:py|toml|txt|sh)",
                           text):
    path = match.group(0)
    removed = "since removed" in text[match.end():match.end() + 20]
    if not removed and not pathlib.Path(path).name.startswith("my_") and not (ROOT / path).exists():
      dead.append(path)
  return dead


def test_the_name_checker_finds_a_dead_module_attribute_and_path():
  text = ("`fedjax_dp.keys.AGGREGATE_NOISE`, `fedjax_dp.nowhere`, `fedjax_dp.keys.nothing`, "
          "`fedjax_dp/keys.py`, `tests/nothing.py`, `benchmarks/old.py` (since removed), "
          "`fedjax_dp/data/sets/my_images.py`")
  assert _dead_names(text) == ["fedjax_dp.keys.nothing", "fedjax_dp.nowhere", "tests/nothing.py"]


def test_every_module_name_and_path_in_the_docs_exists():
  """docs/api.md, docs/README.md and the others name only modules, names and
  files that exist (issue 61)."""
  dead = {doc.name: found for doc in DOCS if (found := _dead_names(doc.read_text()))}
  assert not dead, f"names in the docs that do not exist: {dead}"


def test_the_layout_names_every_module_of_the_packages_top_level():
  """docs/README.md's layout shows every room of the ground floor: each
  top-level module and package of fedjax_dp is named there (issue 61 item 6)."""
  readme = (ROOT / "docs" / "README.md").read_text()
  layout = readme[readme.index("fedjax_dp/\n"):]
  layout = layout[:layout.index("```")]
  package = ROOT / "fedjax_dp"
  rooms = [p.name for p in package.glob("*.py") if p.name != "__init__.py"]
  rooms += [f"{p.name}/" for p in package.iterdir() if (p / "__init__.py").is_file()]
  missing = [room for room in sorted(rooms) if not re.search(rf"(?<![\w/]){room}", layout)]
  assert not missing, f"modules missing from docs/README.md's layout: {missing}"
