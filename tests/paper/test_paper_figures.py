"""The papers' published figures (fedjax_dp.paper.results): each from the
thesis table measured in the setting the run has (issue 41: FL-SIGN in UAI
Table 5's data setting is thesis Table 4.4's, not Table 4.1's)."""

import os
import pathlib

from fedjax_dp.data import settings as data_settings
from fedjax_dp.paper import results as paper_results
from fedjax_dp.paper import settings as paper_settings
from fedjax_dp.paper import tables as paper_tables
from fedjax_dp.cli import sweep

# The seeds sit beside the data (../shared/seeds next to ../shared/data, or
# next to $FEDJAX_DP_DATA for a checkout elsewhere).
_SHARED = [pathlib.Path(__file__).resolve().parents[2].parent / "shared"]
if os.environ.get("FEDJAX_DP_DATA"):
  _SHARED.insert(0, pathlib.Path(os.environ["FEDJAX_DP_DATA"]).resolve().parent)
_NAME = "kerkouche-thesis-dp-fl-bandwidth-energy.txt"
THESIS = next((p / "seeds" / _NAME for p in _SHARED if (p / "seeds" / _NAME).is_file()),
              _SHARED[-1] / "seeds" / _NAME)


def _setting(row):
  args = sweep.build_parser().parse_args(row.argv(0, "OUT"))
  return sweep.resolve(args).runs[0].setting


def test_fl_sign_in_the_uai_data_setting_is_compared_with_thesis_table_4_4():
  uai = {**data_settings.FASHION_MNIST, **paper_settings.THESIS_TABLE8_2}
  assert paper_results.in_uai_data_setting(uai)
  assert paper_results.paper_result("FL-SIGN", 1.0, "fashion-mnist", uai) == (
      paper_results.PaperResult(.84, 197, None))
  assert paper_results.paper_source("FL-SIGN", 1.0, "fashion-mnist", uai) == "thesis Table 4.4"
  # FL-SIGN's preset (Table 8.1), or no setting given: Table 4.1's 0.87 at round 68.
  own = sweep.scheme_setting("FL-SIGN", "fashion-mnist")
  for setting in (own, None):
    assert not paper_results.in_uai_data_setting(setting)
    assert paper_results.paper_result("FL-SIGN", 1.0, "fashion-mnist", setting) == (
        paper_results.PaperResult(.87, 68, None))
    assert (paper_results.paper_source("FL-SIGN", 1.0, "fashion-mnist", setting)
            == "thesis Table 4.1")
  # Shortened, still the same setting; the other schemes and data sets unchanged.
  assert paper_results.paper_source("FL-SIGN", 1.0, "fashion-mnist", dict(uai, rounds=20)) == (
      "thesis Table 4.4")
  assert paper_results.paper_result("FL-STD", 1.0, "fashion-mnist", uai).accuracy == .86
  assert paper_results.paper_source("FL-SIGN-DP", 1.0, "fashion-mnist", uai) == (
      "thesis Tables 5.2, 5.5")
  assert paper_results.paper_result("FL-SIGN", 1.0, "mnist", uai).accuracy == .98


def test_the_tables_fl_sign_rows_run_the_setting_of_their_figure():
  """Tables 6.9-6.12 run FL-SIGN in UAI Table 5's data setting (l.1789):
  Table 4.4's; thesis Table 4.1's row runs Table 8.1: Table 4.1's."""
  for name in ("thesis-6.9", "thesis-6.10", "thesis-6.11", "thesis-6.12"):
    for row in paper_tables.get_table(name).select(["FL-SIGN_*"]):
      assert paper_results.in_uai_data_setting(_setting(row)), (name, row.slug)
      if row.dataset == "fashion-mnist":
        assert paper_results.paper_source("FL-SIGN", 1.0, row.dataset, _setting(row)) == (
            "thesis Table 4.4")
  [row] = paper_tables.get_table("thesis-4.1").select(["FL-SIGN_fashion-mnist"])
  assert not paper_results.in_uai_data_setting(_setting(row))
  assert row.paper == paper_results.paper_result("FL-SIGN", 1.0, "fashion-mnist", _setting(row))


def test_the_fl_sign_figures_are_the_thesis_tables():
  assert THESIS.is_file(), f"the thesis' text (the project's seeds) is not at {THESIS}"
  lines = THESIS.read_text(encoding="utf-8").splitlines()
  # Table 4.4 (caption l.1024): "100%  FL-SIGN  0.84  197 ..." (l.1022).
  assert "Tab. 4.4" in lines[1023]
  assert lines[1021].split()[1:4] == ["FL-SIGN", "0.84", "197"]
  # Table 4.1 (l.717): Fashion-MNIST, FL-SIGN 0.87 at round 68.
  assert "Tab. 4.1" in lines[716]
  fashion = next(l for l in lines[708:717] if l.startswith("Fashion"))
  assert "0.87" in fashion.split() and "68" in fashion.split()
