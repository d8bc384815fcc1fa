"""Bandwidth formula, paper presets and the Table 1 layout."""

import pytest

from fedjax_dp import bandwidth
from fedjax_dp.cli import results as report
from fedjax_dp.paper import results as paper_results


def test_bandwidth_formula_reproduces_uai_table1():
  n = 1_663_370
  assert bandwidth.cost_kb(8317, 200, 1 / 60) == pytest.approx(110.89, abs=0.01)
  assert bandwidth.cost_kb(n, 200, 1 / 60) == pytest.approx(22178.27, abs=0.01)
  assert bandwidth.cost_kb(n, 60, 1 / 60) == pytest.approx(6653.48, abs=0.01)
  assert bandwidth.cost_kb(n, 193, 1 / 60) == pytest.approx(21402.03, abs=0.01)
  with pytest.raises(ValueError):
    bandwidth.cost_kb(10, 1, 0.0)


def test_measured_cost_counts_actual_participations():
  assert bandwidth.measured_cost_kb(1000, 600, 6000) == pytest.approx(1000 * 32 / 10 / 8 / 1000)


def test_paper_tables():
  assert paper_results.paper_result("FL-TOP-DP", 0.005) == (0.81, 200, 1.0)
  assert paper_results.paper_result("FL-STD-DP", 1.0) == (0.56, 60, 0.76)
  assert paper_results.paper_result("FL-BASIC-DP", 0.05) == (0.76, 195, 0.99)
  assert paper_results.paper_result("FL-BAS-3-DP", 0.001) is None  # "-" in Table 8
  assert paper_results.paper_result("FL-TOP", 0.3) is None
  assert paper_results.paper_clip_norm("FL-TOP-DP", 0.005) == 0.61
  assert paper_results.paper_clip_norm("FL-STD-DP", 1.0) == 2.40
  assert paper_results.paper_clip_norm("FL-TOP", 0.005) is None


def test_markdown_table_sets_paper_figures_beside_ours():
  run = {"scheme": "FL-TOP-DP", "ratio": 0.005, "best_accuracy": 0.7912, "best_round": 190,
         "downstream_kb": 105.3, "upstream_kb": 105.3, "epsilon": 0.97, "clip_norm": 0.7,
         "accountant": "moments"}
  row = report.markdown_table([run]).splitlines()[2]
  assert row == ("| 0.5% | FL-TOP-DP | 0.79 (0.81) | 190 (200) | 105.30 | 105.30 "
                 "| 0.97 (1.00) | 0.7 | moments |")


def test_the_algorithm_cell_names_noise_correlated_across_rounds():
  """A run with banded or BLT noise says so beside the scheme (the paper's
  figure in parentheses is the paper's run, with independent noise)."""
  run = {"scheme": "FL-TOP-DP", "ratio": 0.005, "best_accuracy": 0.79, "best_round": 194,
         "downstream_kb": 107.6, "upstream_kb": 107.6, "epsilon": 0.99, "clip_norm": 0.61,
         "accountant": "rdp"}
  assert report.algorithm_label(run) == "FL-TOP-DP"
  banded = dict(run, correlated_noise={"noise": "banded", "bands": 4, "min_separation": 4,
                                       "strategy_bands_or_buffers": 4})
  assert report.markdown_table([banded]).splitlines()[2].startswith(
      "| 0.5% | FL-TOP-DP, banded noise (4 bands, min-separation 4) | 0.79 (0.81) |")
  blt = dict(run, correlated_noise={"noise": "blt", "bands": 1, "min_separation": 60,
                                    "strategy_bands_or_buffers": 2})
  assert report.algorithm_label(blt) == "FL-TOP-DP, BLT noise (2 buffers, min-separation 60)"


def test_results_are_written_atomically(tmp_path):
  run = {"scheme": "FL-STD", "ratio": 1.0, "best_accuracy": 0.5, "best_round": 1,
         "downstream_kb": 1.0, "upstream_kb": 1.0, "epsilon": None, "clip_norm": None,
         "accountant": None}
  paths = report.write_results(tmp_path / "o", [run], {"seed": 0})
  assert sorted(p.name for p in paths) == ["results.csv", "results.json", "results.md"]
  assert not list((tmp_path / "o").glob(".*.tmp"))


def test_balanced_accuracy_runs_get_the_uai_table_2_layout():
  """Runs selected by balanced accuracy: balanced accuracy and AUROC
  columns, no paper figure; the caveat only for the synthetic stand-in."""
  run = {"scheme": "FL-TOP-DP", "ratio": 0.001, "selection_metric": "balanced_accuracy",
         "balanced_accuracy": 0.6617, "auroc": 0.7312, "best_round": 29, "best_accuracy": 0.61,
         "downstream_kb": 3.47, "upstream_kb": 3.47, "epsilon": 0.81, "clip_norm": 0.8,
         "accountant": "moments", "dataset": "medical-synth (synthetic stand-in)"}
  table = report.markdown_table([run])
  assert "| 0.1% | FL-TOP-DP | 0.66 | 0.73 | 29 |" in table
  assert "not comparable with the thesis' medical tables" in table and "(0." not in table
  own = report.markdown_table([dict(run, dataset="my-binary-data")])
  assert own.startswith("Data: my-binary-data.") and "not comparable" not in own
