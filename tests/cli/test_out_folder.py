"""One sweep's records per --out (issue 62): the same command run again keeps
its finished runs; a sweep with other settings is refused there (exit 2, one
line, nothing written) unless --overwrite, which replaces them."""

import json
import pathlib

import pytest

from fedjax_dp.cli import sweep

ARGV = ["--dataset", "medical-synth", "--schemes", "FL-STD", "--rounds", "1",
        "--num-clients", "60", "--samples-per-client", "10", "--clients-per-round", "3",
        "--local-steps", "1", "--quiet", "--test-size", "100"]


def _files(out: pathlib.Path) -> dict:
  return {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}


def _refused(argv, capsys) -> str:
  code = sweep.main(argv)
  err = capsys.readouterr().err
  lines = err.strip().splitlines()
  assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
  return lines[0]


def test_another_sweep_is_refused_where_a_sweep_keeps_its_records(tmp_path, capsys,
                                                                  monkeypatch):
  out = tmp_path / "res"
  assert sweep.main([*ARGV, "--out", str(out)]) == 0
  before = _files(out)
  assert sorted(map(str, before)) == ["results.csv", "results.json", "results.md"]
  capsys.readouterr()
  real_run = sweep.simulation.run

  # Other settings: stopped before its data is loaded; the folder is untouched.
  monkeypatch.setattr(sweep, "load_data", lambda *a: pytest.fail("data loaded"))
  other = [*ARGV, "--rounds", "2", "--seed", "1", "--out", str(out)]
  assert _refused(other, capsys) == (
      f"sweep.py: error: --out {out} holds the records of another sweep (other --rounds, "
      "--seed): choose another --out, or add --overwrite to replace them")
  assert _files(out) == before
  monkeypatch.undo()

  # The same command, its folder spelled otherwise and with a progress bar: the
  # same sweep, its finished run kept (not run again).
  monkeypatch.setattr(sweep.simulation, "run", lambda *a, **k: pytest.fail("ran again"))
  same = [a for a in ARGV if a != "--quiet"] + ["--out", f"{out}/"]
  assert sweep.main(same) == 0
  err = capsys.readouterr().err
  assert "resuming: 1 finished run kept" in err and "wrote" not in err
  assert "every run had finished: " in err and "kept as they were" in err
  assert json.loads((out / "results.json").read_text())["runs"] == json.loads(
      before[pathlib.Path("results.json")])["runs"]

  # --overwrite: the other sweep runs and its records replace the first's.
  monkeypatch.setattr(sweep.simulation, "run", real_run)
  assert sweep.main([*other, "--overwrite"]) == 0
  saved = json.loads((out / "results.json").read_text())
  assert saved["config"]["rounds"] == 2 and saved["config"]["seed"] == 1
  assert "overwrite" not in saved["config"]  # what was done to the folder, not a setting
  assert [r["rounds"] for r in saved["runs"]] == [2]
  # ...and the first command is now the other sweep there.
  capsys.readouterr()
  assert "holds the records of another sweep (other --rounds, --seed)" in _refused(
      [*ARGV, "--out", str(out)], capsys)


def test_a_results_json_that_is_no_sweeps_record_is_refused(tmp_path, capsys, monkeypatch):
  monkeypatch.setattr(sweep, "load_data", lambda *a: pytest.fail("data loaded"))
  out = tmp_path / "res"
  out.mkdir()
  (out / "results.json").write_text("my notes")
  assert _refused([*ARGV, "--out", str(out)], capsys) == (
      f"sweep.py: error: --out {out} holds a results.json that is not a sweep's records: "
      "choose another --out, or add --overwrite to replace them")
  assert _files(out) == {pathlib.Path("results.json"): b"my notes"}


def test_the_help_names_the_convention():
  text = sweep.build_parser().format_help()
  assert "--overwrite" in text and "another sweep is refused there" in " ".join(text.split())


def _sweep_commands(doc: pathlib.Path) -> list[list[str]]:
  """The ``python experiments/sweep.py ...`` lines of a page's bash blocks."""
  import shlex  # pylint: disable=import-outside-toplevel
  text = doc.read_text().replace("\\\n", " ")
  blocks = text.split("```bash\n")[1:]
  lines = [line for block in blocks for line in block.split("```")[0].splitlines()]
  return [shlex.split(line)[2:] for line in lines
          if line.startswith("python experiments/sweep.py")]


@pytest.mark.parametrize("page", ["README.md", "docs/cli.md"])
def test_each_documented_sweep_plans_into_a_folder_of_its_own(page):
  """A newcomer running the page's commands one after the other gets each
  command's records in its own folder (none refused, none replaced), and
  every command is valid."""
  root = pathlib.Path(__file__).resolve().parents[2]
  commands = _sweep_commands(root / page)
  assert len(commands) >= (3 if page == "README.md" else 8)
  outs = [argv[argv.index("--out") + 1] if "--out" in argv else "results" for argv in commands]
  assert len(set(outs)) == len(outs), outs
  for argv in commands:
    assert sweep.resolve(sweep.build_parser().parse_args(argv)).runs, argv
