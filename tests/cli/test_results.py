"""The sweep's result files (``cli.results``): the CSV columns, the attack
cell, the tables only some runs have, and results.json (the Table 1 layout
and the paper's figures: tests/test_report.py)."""

import csv
import io
import json

from fedjax_dp.cli import results

RUN = {"scheme": "FL-STD-DP", "ratio": 1.0, "best_accuracy": 0.61, "best_round": 3,
       "downstream_kb": 2.5, "upstream_kb": 2.5, "epsilon": 1.25, "clip_norm": 0.5,
       "accountant": "moments", "history": [{"round": 3, "accuracy": 0.61}]}
ATTACK = {"kind": "in-backdoor", "fraction": 0.1, "boost": 7.0, "source": 5, "target": 7,
          "skip_noise": True, "pool_training": "epochs", "selection": "fixed"}


def test_attack_label_is_one_cell():
  assert results.attack_label(RUN) is None
  assert results.attack_label(dict(RUN, attack=ATTACK)) == (
      "in-backdoor alpha=0.1 boost=7 5->7 no-noise pool-epochs fixed-pool")
  plain = {"kind": "random-update", "fraction": 0.25, "boost": 1.0}
  assert results.attack_label(dict(RUN, attack=plain)) == "random-update alpha=0.25 boost=1"


def test_csv_has_a_row_a_run_in_the_declared_columns():
  """Fields outside CSV_FIELDS (the history) are left out, missing ones empty,
  the attack written as its cell."""
  text = results.csv_text([RUN, dict(RUN, scheme="FL-STD", epsilon=None, attack=ATTACK)])
  rows = list(csv.DictReader(io.StringIO(text)))
  assert text.splitlines()[0] == ",".join(results.CSV_FIELDS)
  assert [r["scheme"] for r in rows] == ["FL-STD-DP", "FL-STD"]
  assert rows[0]["epsilon"] == "1.25" and rows[1]["epsilon"] == ""
  assert rows[0]["attack"] == "" and rows[1]["attack"].startswith("in-backdoor alpha=0.1")
  assert rows[0]["seconds"] == "" and "history" not in rows[0]


def test_the_attack_table_lists_the_attacked_runs_only():
  attacked = dict(RUN, attack=ATTACK, class_accuracy=0.4, attack_accuracy=0.85,
                  main_accuracy=None)
  table = results.markdown_table([RUN, attacked])
  rows = [line for line in table.splitlines() if "in-backdoor" in line]
  assert rows == ["| 100% | FL-STD-DP | in-backdoor alpha=0.1 boost=7 5->7 no-noise "
                  "pool-epochs fixed-pool | 0.61 | 0.40 | 0.85 | N/A |"]
  assert "Attacked-class accuracy" not in results.markdown_table([RUN])


def test_a_partial_test_set_is_noted():
  assert "--test-size" not in results.markdown_table([RUN])
  subset = dict(RUN, data_summary={"test_subset": 500})
  assert results.markdown_table([subset]).endswith(
      "\nAccuracy on the first 500 examples of the test set (--test-size), not all of it: "
      "not comparable with the papers' figures.\n")


def test_results_json_holds_the_config_and_the_runs(tmp_path):
  out = tmp_path / "new" / "folder"
  results.write_results(out, [RUN], {"seed": 3, "schemes": ["FL-STD-DP"]})
  assert json.loads((out / "results.json").read_text()) == {
      "config": {"seed": 3, "schemes": ["FL-STD-DP"]}, "runs": [RUN]}
  assert (out / "results.csv").read_text() == results.csv_text([RUN])
  assert (out / "results.md").read_text() == results.markdown_table([RUN])
