"""--plot: the metric against round and against upstream KB, as PNG files."""

import pytest

from fedjax_dp import bandwidth, plots


def _record(scheme, ratio, values, accs, metric="accuracy"):
  return {"scheme": scheme, "ratio": ratio, "clients_per_round": 100, "num_clients": 6000,
          "upstream_values": values, "upstream_bits": 32, "selection_metric": metric,
          "history": [{"round": t + 1, metric: a} for t, a in enumerate(accs)]}


def test_plots_are_written_as_png_with_the_papers_upstream_axis(tmp_path):
  records = [_record("FL-TOP-DP", 0.005, 8316, [0.3, 0.5, 0.6]),
             _record("FL-STD", 1.0, 1_663_370, [0.5, 0.7, 0.8])]
  paths = plots.plot_records(records, tmp_path / "figs", prefix="t1-")
  assert [p.name for p in paths] == ["t1-accuracy.png", "t1-accuracy_vs_upstream.png"]
  for path in paths:
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000
  assert not [p for p in (tmp_path / "figs").iterdir() if p.name.startswith(".")]
  # The x axis of the second plot: UAI Sec. 4.1's KB per client up to round t.
  assert plots._upstream_kb(records[0], 3) == bandwidth.cost_kb(8316, 3, 100 / 6000, 32)
  assert plots._label(records[0]) == "FL-TOP-DP r=0.5%" and plots._label(records[1]) == "FL-STD"


def test_balanced_accuracy_runs_and_bad_input(tmp_path):
  rec = _record("FL-TOP-DP", 0.001, 1497, [0.55, 0.6], metric="balanced_accuracy")
  assert len(plots.plot_records([rec], tmp_path)) == 2
  with pytest.raises(ValueError, match="history"):
    plots.plot_records([], tmp_path)
  with pytest.raises(ValueError, match="history"):
    plots.plot_records([dict(rec, history=[])], tmp_path)


def test_other_seeds_are_thin_lines_of_their_rows_colour_without_a_legend_entry(
    tmp_path, monkeypatch):
  drawn = []
  save = plots._save

  def capture(fig, path):  # every line: its y data, colour, width, alpha, legend label
    ax = fig.axes[0]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    drawn.append(([(list(l.get_ydata()), l.get_color(), l.get_linewidth(), l.get_alpha())
                   for l in ax.lines], legend))
    save(fig, path)

  monkeypatch.setattr(plots, "_save", capture)
  rows = [_record("FL-TOP-DP", 0.005, 8316, [0.3, 0.5]), _record("FL-STD-DP", 1.0, 10, [0.2, 0.4])]
  seeds = [[_record("FL-TOP-DP", 0.005, 8316, [0.1, 0.2]),
            _record("FL-TOP-DP", 0.005, 8316, [0.6, 0.7])], []]
  plots.plot_records(rows, tmp_path, other_seeds=seeds)
  assert len(drawn) == 2  # the accuracy plot and the one against upstream KB
  for lines, legend in drawn:
    assert legend == ["FL-TOP-DP r=0.5%", "FL-STD-DP"]
    (top, top_colour, top_width, top_alpha), s1, s2, (std, std_colour, _, _) = lines
    assert top == [0.3, 0.5] and std == [0.2, 0.4] and top_alpha is None
    assert (s1[0], s2[0]) == ([0.1, 0.2], [0.6, 0.7])
    for other in (s1, s2):
      assert other[1] == top_colour != std_colour
      assert other[2] < top_width and other[3] < 1
  with pytest.raises(ValueError, match="one list of other seeds per record"):
    plots.plot_records(rows, tmp_path, other_seeds=seeds[:1])
  with pytest.raises(ValueError, match="history"):
    plots.plot_records(rows, tmp_path, other_seeds=[[dict(rows[0], history=[])], []])


def test_a_scheme_and_its_dp_variant_share_a_colour_the_dp_line_dashed():
  records = [_record(name, ratio, 8316, [0.3]) for name, ratio in (
      ("FL-TOP", 0.005), ("FL-TOP-DP", 0.005), ("FL-TOP-DP", 0.05), ("FL-STD-DP", 1.0))]
  top, top_dp, top_dp_5, std_dp = plots._styles(records)
  assert top["color"] == top_dp["color"]
  assert (top["linestyle"], top_dp["linestyle"], std_dp["linestyle"]) == ("-", "--", "--")
  assert len({top["color"], top_dp_5["color"], std_dp["color"]}) == 3
  many = [_record(f"S{i}", 1.0, 10, [0.1]) for i in range(16)]
  assert len({s["color"] for s in plots._styles(many)}) == 16  # tab20 beyond 10


def test_rows_of_one_scheme_that_differ_in_their_labels_get_their_own_colours():
  """A report's rows are labelled: FL-STD-DP with three noises are three
  colours; a labelled scheme and its -DP variant still share one."""
  noises = [dict(_record("FL-STD-DP", 1.0, 10, [0.3]), label=f"FL-STD-DP {tag}")
            for tag in ("independent", "banded b=4", "BLT m=60")]
  assert len({s["color"] for s in plots._styles(noises)}) == 3
  pair = [dict(_record(name, 0.005, 10, [0.3]), label=f"{name} r=0.5%")
          for name in ("FL-TOP", "FL-TOP-DP")]
  plain, dp = plots._styles(pair)
  assert plain["color"] == dp["color"] and (plain["linestyle"], dp["linestyle"]) == ("-", "--")


def test_ratio_curve_draws_each_schemes_best_accuracy_against_r(tmp_path, monkeypatch):
  drawn = []
  save = plots._save

  def capture(fig, path):  # each scheme's line, its error bars, the r axis
    ax = fig.axes[0]
    drawn.extend((c.get_label(), list(c.lines[0].get_xdata()), list(c.lines[0].get_ydata()),
                  [[float(y) for _, y in seg] for seg in c.lines[2][0].get_segments()])
                 for c in ax.containers)
    drawn.append(ax.get_xscale())
    save(fig, path)

  monkeypatch.setattr(plots, "_save", capture)
  curves = {"Fed-SMP-randk": [(0.005, 0.82, 0.82, 0.82), (0.05, 0.81, 0.80, 0.83)],
            "Fed-SMP-topk": [(0.01, 0.7, 0.7, 0.7)]}
  path = plots.plot_ratio_curve(curves, tmp_path / "r.png", "t")
  assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  assert drawn == [("Fed-SMP-randk", [0.005, 0.05], [0.82, 0.81],
                    [[0.82, 0.82], [pytest.approx(0.80), pytest.approx(0.83)]]),
                   ("Fed-SMP-topk", [0.01], [0.7], [[0.7, 0.7]]), "log"]
  with pytest.raises(ValueError, match="at least one point"):
    plots.plot_ratio_curve({}, tmp_path / "e.png")


def test_the_epsilon_plot_follows_each_runs_accountant():
  """The curve is the run's accountant's: the whole run's epsilon at every
  round for Monte Carlo accounting and BLT's one release, ceil(t/b) steps
  for cyclic Poisson sampling, the subsampled Gaussian otherwise (not the
  plain Poisson curve for all of them)."""
  from fedjax_dp.privacy import accounting  # pylint: disable=import-outside-toplevel
  base = {"noise_multiplier": 1.3, "clients_per_round": 10, "num_clients": 600,
          "delta": 1e-5, "epsilon_final": 0.9}
  rounds = [1, 5, 20]
  assert plots._epsilon_curve(dict(base, epsilon_method="monte-carlo"), {}, rounds) == [0.9] * 3
  assert plots._epsilon_curve(dict(base, noise_correlation="blt"), {}, rounds) == [0.9] * 3
  cyclic = plots._epsilon_curve(base, {"accountant": "rdp", "cycle_length": 4}, rounds)
  assert cyclic == accounting.cyclic_epsilon_curve(1.3, 1 / 60, 4, rounds, 1e-5, "rdp")
  plain = plots._epsilon_curve(base, {"accountant": "rdp"}, rounds)
  assert plain == accounting.epsilon_curve(1.3, 1 / 60, rounds, 1e-5, "rdp")
  assert plain != cyclic
  # A record whose epsilon the client-level curve does not end at (CDP-LQ's
  # record-level steps, FL-SIGN-DP's discrete Gaussian bound) is drawn flat
  # at its own final epsilon; one it ends at keeps its curve.
  ends = dict(base, rounds=20, epsilon_final=plain[-1])
  assert plots._epsilon_curve(ends, {"accountant": "rdp"}, rounds) == plain
  other = dict(base, rounds=20, epsilon_final=2 * plain[-1])
  assert plots._epsilon_curve(other, {"accountant": "rdp"}, rounds) == [2 * plain[-1]] * 3
