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
