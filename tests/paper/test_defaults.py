"""The library's defaults that equal a paper's value, checked against the paper's.

The library states its own defaults (issue 50); where one is a paper's
setting, the papers' app (``fedjax_dp.paper``) states the paper's value and
these tests hold the two together, so that nothing is stated twice unchecked.
"""

import dataclasses

from fedjax_dp import datasets, simulation
from fedjax_dp.cli import sweep
from fedjax_dp.data import settings as data_settings
from fedjax_dp.paper import presets as paper_presets
from fedjax_dp.paper import settings as paper_settings
from fedjax_dp.schemes import cdp_lq, get_scheme, sign

# UAI 2021 Table 5, Fashion-MNIST row: sigma, q = 100 / 6000, T_cl, T_gd, |B|, eta.
_UAI_TABLE5 = {"noise_multiplier": 1.54, "clients_per_round": 100, "num_clients": 6000,
               "rounds": 200, "local_steps": 5, "batch_size": 10, "lr": 0.215, "delta": 1e-5}


def test_the_default_run_config_is_uai_table5():
  """RunConfig's defaults (simulation/config.py) are UAI Table 5's Fashion-MNIST row."""
  cfg = simulation.RunConfig()
  defaults = {f.name: getattr(part, f.name) for part in (cfg.training, cfg.privacy)
              for f in dataclasses.fields(part)}
  for key, value in paper_settings.FASHION_MNIST.items():
    if key in defaults:
      assert defaults[key] == value, key
  assert {k: paper_settings.FASHION_MNIST[k] for k in _UAI_TABLE5} == _UAI_TABLE5
  assert datasets.get_dataset(datasets.DEFAULT).setting is data_settings.FASHION_MNIST


def test_the_schemes_defaults_are_the_papers():
  assert sign.GAMMA == paper_settings.THESIS_TABLE8_1_GAMMA
  assert sign.DP_GAMMA == paper_settings.THESIS_TABLE8_2_GAMMA
  assert cdp_lq.POSTER_COMPRESSION_FACTOR == paper_settings.POSTER_CDP_LQ["compression_factor"]
  assert cdp_lq.POSTER_LATTICE_DIM == paper_settings.POSTER_CDP_LQ["lattice_dim"]
  medical = datasets.get_dataset("medical-synth").option_defaults
  assert medical["server_lr"] == paper_settings.MEDICAL_SERVER_LR


def test_the_papers_presets_are_applied_from_above():
  """The library's families and data sets declare none of the papers' presets;
  the command line applies them (fedjax_dp.paper.presets)."""
  from fedjax_dp.schemes import FAMILIES  # pylint: disable=import-outside-toplevel
  assert all(not family.presets for family in FAMILIES)
  assert datasets.get_dataset("medical-synth").scheme_presets == {}
  for name, preset in paper_presets.IMAGE_PRESETS.items():
    setting = sweep.scheme_setting(name, "fashion-mnist")
    assert {k: setting[k] for k in preset} == preset, name
  assert sweep.scheme_setting("FL-CS", "medical-synth")["local_steps"] == 5
  assert sweep.scheme_setting("FL-TOP", "medical-synth")["local_steps"] == 40
  assert sweep.setting_source(get_scheme("FL-CS-DP"), "medical-synth") == (
      "thesis Table 8.5")
