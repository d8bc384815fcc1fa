"""The data sets' base settings and where each value comes from.

Each data set's module (``fedjax_dp.data.sets``) declares its
:class:`DataSetting` from these: the setting every scheme runs on it unless a
preset says otherwise, its source, and its values' sources. They are the
library's defaults for a data set; the papers' per-scheme presets are the
papers' app's (``fedjax_dp.paper.presets``), applied by the command line.
Fashion-MNIST's (:data:`FASHION_MNIST`, UAI 2021 Table 5) is also the default
:class:`~fedjax_dp.simulation.RunConfig`'s.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

# UAI 2021 Table 5, Fashion-MNIST row (thesis Table 8.8).
FASHION_MNIST = {
    "num_clients": 6000,
    "samples_per_client": 10,
    "clients_per_round": 100,  # C = 1/60
    "rounds": 200,
    "local_steps": 5,
    "batch_size": 10,
    "lr": 0.215,
    "delta": 1e-5,
    "noise_multiplier": 1.54,
    "init_steps": 5,
    "public_batch": 10,
}

# UAI 2021 Table 5, medical row (thesis Table 8.8): N = 5010 hospitals,
# C = 100/5010, T_cl = 100, T_gd = 40, eta = 0.1, delta = 1e-5, sigma = 1.49,
# T_init = 40. |D_k| = 203 patients per hospital (thesis Sec. 8.4.1); |B| is
# not given: 10 is this simulator's choice (as on Fashion-MNIST). The public
# batch is the public hospital downsampled to 12 + 12 patients (UAI l.1002).
MEDICAL = {
    "num_clients": 5010,
    "samples_per_client": 203,
    "clients_per_round": 100,
    "rounds": 100,
    "local_steps": 40,
    "batch_size": 10,
    "lr": 0.1,
    "delta": 1e-5,
    "noise_multiplier": 1.49,
    "init_steps": 40,
    "public_batch": 24,
}


# The Fed-SMP paper's Shakespeare setting (seed fed-smp-sparsified-model-perturbation.txt,
# Sec. 6.1-6.2, l.155 and l.176-177; the setting of its Table III). The text this project has
# keeps: momentum SGD, the learning rate "decaying at a rate of 0.99 at every 50 round"
# (``option_defaults`` of fedjax_dp.data.sets.shakespeare, applied by the Fed-SMP schemes
# on this data set), 1 local epoch, 1,000 public samples drawn from the clients' training
# samples (top_k), delta below 1/N, S tuned on a grid (one S for SVHN and Shakespeare), and
# Table III's epsilon, 6.99 (l.156-174), reported for a hypothetical population. It lost
# |K| ("the minimal |K| sufficient for convergence"), the momentum coefficient, eta, |B|,
# T_cl, sigma, S and that population's size. Fed-SMP cites its reference [34] (Reddi et
# al., "Adaptive Federated Optimization", ICLR 2021) only for the data processing and the
# model (Sec. 6.1). |K|, |B| and T_cl here are this simulator's choice, taken from [34]'s
# non-private setting as stated in its authors' code, google-research/federated,
# optimization/docs/hyperparameters.md (commit 0f29cad762b6): for shakespeare_character 10
# clients per round, batch size 4, 1200 total rounds ("Number of client epochs: 1" there
# too; Fed-SMP's own 1 local epoch is Sec. 6.2's); its best client rate for FedAvg (client
# SGD without momentum, server rate 1) is 10^0. (Fed-SMP Table III's rows run |K| = 100
# instead, by a rule stated with its epsilon: fedjax_dp.paper.settings.FEDSMP_TABLE3_CLIENTS.)
# The rest is this simulator's choice:
# * N = 1,124: every client fedjax_dp.data.shakespeare builds from the 37 plays of the
#   shakespeare 0.6 package (Fed-SMP's 715 are TensorFlow Federated's, not derivable from
#   these texts);
# * |D_k| = 1,024: the loader's cap on a client's training windows (DEFAULT_MAX_SAMPLES,
#   about the median client; Fed-SMP and [34] keep all of them);
# * T_gd = 256 = 1,024 / 4: one local epoch of a client at the cap (the simulator runs a
#   fixed number of steps; a smaller client makes more passes);
# * eta = 0.5 with the Fed-SMP schemes' momentum 0.5 (fedsmp.MOMENTUM, also this
#   simulator's choice): an effective step eta / (1 - beta) = 1, [34]'s FedAvg client rate;
# * sigma = 0.6365: Fed-SMP's value for Shakespeare is lost; Table III states epsilon 6.99,
#   so sigma is the one that gives it with this project's accountant (RDP, Poisson, as
#   Fed-SMP's Opacus) at this setting's q = 10 / 1,124, T_cl 1,200 and delta 1e-5, rounded
#   up (epsilon 6.988). Fed-SMP's 6.99 is for a hypothetical, larger population (lost), so
#   its own sigma was smaller. S is calibrated on the public windows (--clip; Fed-SMP tunes
#   it on a grid). With DP, [34]'s |K| = 10 puts noise sigma S / |K| on each kept weight a
#   round (0.46 at the earlier sigma 1.0 and S 4.55 of a reduced run, where neither
#   Fed-SMP-rand_k at r = 0.5% nor DP-FedAvg learned in 100 rounds:
#   docs/reproduction-notes.md, "Fed-SMP Table III");
# * delta = 1e-5 < 1/N (Sec. 6.2 sets delta below 1/N; the number is lost). Epsilon is
#   accounted with the real N and q = |K| / N, not a hypothetical population;
# * T_init = 5: UAI Table 5's public-data steps of FL-TOP (not a Fed-SMP setting).
# The public set: Fed-SMP's 1,000 samples (Sec. 6.1) held out of the clients' training
# windows for every scheme on this data set (Fed-SMP holds them out for top_k only), so that
# every scheme trains on the same clients and S is calibrated on data no client holds.
SHAKESPEARE = {
    "num_clients": 1124,
    "samples_per_client": 1024,
    "clients_per_round": 10,
    "rounds": 1200,
    "local_steps": 256,
    "batch_size": 4,
    "lr": 0.5,
    "delta": 1e-5,
    "noise_multiplier": 0.6365,
    "init_steps": 5,
    "public_batch": 1000,
}
_CHOICE = "this simulator's choice"
_REDDI = (f"{_CHOICE}, taken from the non-private setting of [34] (Reddi et al. 2021) as "
          "stated in google-research/federated optimization/docs/hyperparameters.md; "
          "Fed-SMP cites [34] only for the data processing and the model, its own value "
          "lost")
SHAKESPEARE_SOURCES = {
    "num_clients": f"{_CHOICE}: every client of fedjax_dp.data.shakespeare (Fed-SMP "
                   "Sec. 6.1: 715, TFF's clients)",
    "samples_per_client": f"{_CHOICE}: the loader's cap on a client's windows",
    "clients_per_round": f"{_REDDI} (Fed-SMP: the minimal |K| sufficient for "
                         "convergence, Sec. 6.2; its Table III's rows here run |K| 100: "
                         "fedjax_dp.paper.settings.FEDSMP_TABLE3_CLIENTS)",
    "rounds": _REDDI,
    "local_steps": "Fed-SMP Sec. 6.2: 1 local epoch; 256 steps = 1,024 / 4 is "
                   f"{_CHOICE}",
    "batch_size": _REDDI,
    "lr": f"{_CHOICE}: eta / (1 - momentum) = 1, [34]'s FedAvg client rate (Fed-SMP's "
          "value lost)",
    "delta": f"{_CHOICE}, below 1/N as Fed-SMP Sec. 6.2 sets it after [11] (its value "
             "lost)",
    "noise_multiplier": f"{_CHOICE}: Fed-SMP Sec. 6.2's value lost; calibrated to its "
                        "Table III's epsilon 6.99 (l.173) with this project's accountant "
                        "(RDP, Poisson) at this setting's q = 10 / 1,124, T_cl 1,200, delta "
                        "1e-5 (Fed-SMP's epsilon is for a hypothetical population, lost)",
    "init_steps": "UAI Table 5 (FL-TOP's T_init; not a Fed-SMP setting)",
    "public_batch": "Fed-SMP Sec. 6.1: 1,000 samples of the clients' training set",
}

# The Fed-SMP paper's SVHN setting (seed fed-smp-sparsified-model-perturbation.txt, Sec. 6.1
# l.154 and Sec. 6.2 l.176-177): the training set is train + extra (73,257 + 531,131 =
# 604,388 images), split evenly over N = 6,000 clients; Fed-SMP-top_k's public set is 2,000
# training examples; local momentum SGD for 5 local epochs, momentum reset every round, the
# learning rate decaying by 0.99 every round (fedsmp.LR_DECAY, every round by default);
# sigma is the same as on Fashion-MNIST ("set as [lost] for Fashion-MNIST and SVHN"), delta
# below 1/N, and Table II keeps DP-FedAvg's and Fed-SMP's epsilon, 1.01 (l.117-135), as
# Table I's. The text lost |K|, the momentum coefficient, eta, |B|, T_cl, sigma's value and
# S. Each lost number is the one this simulator uses for Fed-SMP on Fashion-MNIST
# (fedjax_dp.paper.presets.FEDSMP and the Fashion-MNIST base it falls back to):
# |K| = 100 and T_cl = 200 (UAI Table 5), |B| = 10, eta = 0.1 with momentum 0.5
# (fedsmp.MOMENTUM) and delta = 1e-5 (UAI Table 5); sigma = 1.333, the sigma of this
# simulator's Fashion-MNIST Fed-SMP rows (fedjax_dp.paper.tables, fedsmp-table1): the one
# that gives Table II's epsilon 1.01 with this project's accountant (RDP, Poisson) at
# q = 100 / 6,000, T_cl 200, delta 1e-5, rounded up (UAI Table 5's 1.54 gives 0.77). Derived:
# |D_k| = 100 = floor(602,388 / 6,000) once the 2,000 public examples are held out (every
# scheme's clients lose them here, as on shakespeare: the same clients for every scheme, and
# S calibrated on data no client holds); T_gd = 50 = 5 epochs x 100 / 10. T_init = 5 is
# UAI Table 5's (FL-TOP; not a Fed-SMP setting). Fed-SMP-top_k's server trains 5 passes over
# its public set a round (the clients' local period, Sec. 6.2: ``option_defaults`` of
# fedjax_dp.data.sets.svhn).
SVHN = {
    "num_clients": 6000,
    "samples_per_client": 100,
    "clients_per_round": 100,
    "rounds": 200,
    "local_steps": 50,
    "batch_size": 10,
    "lr": 0.1,
    "delta": 1e-5,
    "noise_multiplier": 1.333,
    "init_steps": 5,
    "public_batch": 2000,
}
_FEDSMP_FASHION = ("the value of this simulator's Fed-SMP Fashion-MNIST preset "
                   "(fedjax_dp.paper.presets.FEDSMP)")
SVHN_SOURCES = {
    "num_clients": "Fed-SMP Sec. 6.1 (l.154): 6,000 clients",
    "samples_per_client": "Fed-SMP Sec. 6.1 (l.154): train + extra = 604,388 split evenly; "
                          "100 = floor(602,388 / 6,000) after the 2,000 public examples",
    "clients_per_round": f"Fed-SMP's value lost (Sec. 6.2, l.176); {_FEDSMP_FASHION}, UAI "
                         "Table 5's |K|",
    "rounds": f"Fed-SMP's value lost (Sec. 6.2, l.176); {_FEDSMP_FASHION}, UAI Table 5's "
              "T_cl",
    "local_steps": "Fed-SMP Sec. 6.2 (l.176): 5 local epochs; 50 = 5 x 100 / |B|",
    "batch_size": f"Fed-SMP's value lost (Sec. 6.2, l.176); {_FEDSMP_FASHION} "
                  f"({_CHOICE})",
    "lr": f"Fed-SMP's value lost (Sec. 6.2, l.176); {_FEDSMP_FASHION} ({_CHOICE}: "
          "eta / (1 - momentum 0.5) = 0.2), decaying 0.99 a round (Sec. 6.2)",
    "delta": f"Fed-SMP's value lost; below 1/N as Sec. 6.2 sets it; {_FEDSMP_FASHION}, "
             "UAI Table 5's",
    "noise_multiplier": "Fed-SMP Sec. 6.2 (l.177): the same sigma as Fashion-MNIST, its "
                        "value lost; Table II's epsilon 1.01 (l.134) kept: the sigma of "
                        "this simulator's Fashion-MNIST Fed-SMP rows (fedjax_dp.paper."
                        "presets.FEDSMP with fedjax_dp.paper.tables' fedsmp-table1), "
                        "calibrated to epsilon 1.01 with this project's accountant (RDP, "
                        "Poisson) at q = 100 / 6,000, T_cl 200, delta 1e-5",
    "init_steps": "UAI Table 5 (FL-TOP's T_init; not a Fed-SMP setting)",
    "public_batch": "Fed-SMP Sec. 6.1 (l.154): 2,000 training examples (held out of every "
                    "scheme's clients here)",
}

# Kerkouche's thesis, Table 8.1 (seed kerkouche-thesis-dp-fl-bandwidth-energy.txt
# l.2275-2278, restated in Sec. 4.1.2 l.702): one setting for FL-SIGN, FL-CS, FL-TOP and
# FL-STD (its Table 4.1), with the clients' Adam (eta = 0.001; Sec. 8.3.1, l.2219, l.2221). Its
# N x |D_k| uses the whole training set (CIFAR-10: 1,000 x 500 = the 500,000 augmented
# images, l.2229; IMDB: 1,000 x 25 = the 25,000 training reviews), so a public set held out
# of it leaves room for one client fewer: N = 999, one client's share being the server's
# public set (this simulator's choice, after the thesis' own medical setting, footnote 5
# l.2280: 5,010 of 5,011 hospitals, the other's data public). C = 0.1 gives |K| = 100. The
# thesis runs CIFAR-10 and IMDB without DP: delta = 1e-5 (Table 8.2's) and sigma = 1.54 (UAI
# Table 5's) are this simulator's choice, as is T_init = 5 (UAI Table 5; FL-TOP).
_TABLE_8_1 = "thesis Table 8.1 (l.2275-2278; Sec. 4.1.2, l.702)"
_NO_DP = f"{_CHOICE}: the thesis runs this data set without DP"


def _table_8_1_sources(data: str, n_total: str, public: str) -> dict[str, str]:
  return {
      "num_clients": f"{_CHOICE}: {_TABLE_8_1}'s N = 1,000 less the client whose share is "
                     f"the public set (N x |D_k| = {n_total}, the whole training set; as "
                     "the thesis' medical setting, footnote 5, l.2280)",
      "samples_per_client": _TABLE_8_1,
      "clients_per_round": f"{_TABLE_8_1}: C = 0.1 of N = 1,000",
      "rounds": _TABLE_8_1,
      "local_steps": _TABLE_8_1,
      "batch_size": _TABLE_8_1,
      "lr": f"{_TABLE_8_1}: Adam, eta = 0.001 (Sec. 8.3.1, {data})",
      "local_optimizer": f"{_TABLE_8_1}: Adam (Keras 2.2.0, l.2298)",
      "delta": f"{_NO_DP} (Table 8.2's delta)",
      "noise_multiplier": f"{_NO_DP} (UAI Table 5's sigma)",
      "init_steps": "UAI Table 5 (FL-TOP's T_init)",
      "public_batch": f"{_CHOICE}: {public}",
  }


CIFAR10 = {
    "num_clients": 999,
    "samples_per_client": 500,
    "clients_per_round": 100,
    "rounds": 400,
    "local_steps": 50,
    "batch_size": 50,
    "lr": 0.001,
    "local_optimizer": "adam",
    "delta": 1e-5,
    "noise_multiplier": 1.54,
    "init_steps": 5,
    "public_batch": 500,
}
CIFAR10_SOURCES = _table_8_1_sources(
    "l.2219", "500,000",
    "one client's share, the 10 augmented copies of 50 training images held out (no copy "
    "of them reaches a client)")

IMDB = {
    "num_clients": 999,
    "samples_per_client": 25,
    "clients_per_round": 100,
    "rounds": 100,
    "local_steps": 5,
    "batch_size": 25,
    "lr": 0.001,
    "local_optimizer": "adam",
    "delta": 1e-5,
    "noise_multiplier": 1.54,
    "init_steps": 5,
    "public_batch": 25,
}
IMDB_SOURCES = _table_8_1_sources("l.2221", "25,000",
                                  "one client's share, 25 training reviews held out")

# The CDP-LQ poster's EMNIST setting (seed compressive-dp-fl-lattice-quantization-poster.txt
# l.107; POSTER_CDP_LQ): 25 participants, non-IID, each holding the data of 50 users
# (writers: TFF's federated EMNIST, fedjax_dp.data.load_femnist), delta = 1e-4, sigma = 0.25
# (units not stated; read as the noise multiplier). Its Alg. 1 takes one gradient a round
# (T_gd = 1, as fedjax_dp.paper.presets.CDP_LQ). It gives no model, |K|, |B|, eta or T_cl:
# this simulator's choice are every participant in every round (|K| = 25), |B| = 1,000 (a
# Poisson rate q = |B| / |D_k| of about 0.1, as presets.CDP_LQ's 240 of 2,400), eta = 0.215
# and T_cl = 200 (UAI Table 5, as presets.CDP_LQ), T_init = 5 (UAI Table 5), the 62-class
# CNN 'emnist-cnn', a cap of 16,000 examples a client (50 writers hold 9,877 on average) and
# a public set of 1,000 training examples of writers no participant holds.
FEMNIST = {
    "num_clients": 25,
    "samples_per_client": 16000,
    "clients_per_round": 25,
    "rounds": 200,
    "local_steps": 1,
    "batch_size": 1000,
    "lr": 0.215,
    "delta": 1e-4,
    "noise_multiplier": 0.25,
    "init_steps": 5,
    "public_batch": 1000,
}
_POSTER = "CDP-LQ poster, Results (l.107)"
FEMNIST_SOURCES = {
    "num_clients": f"{_POSTER}: 25 participants, each holding 50 writers' data",
    "samples_per_client": f"{_CHOICE}: a cap above the mean 50-writer client (9,877 "
                          "examples), so that clients keep their data",
    "clients_per_round": f"{_CHOICE}: every participant every round (the poster does not "
                         "say)",
    "rounds": f"{_CHOICE}: UAI Table 5's T_cl, as presets.CDP_LQ (the poster gives none)",
    "local_steps": "poster Alg. 1: one gradient a round (as presets.CDP_LQ)",
    "batch_size": f"{_CHOICE}: a Poisson rate |B| / |D_k| of about 0.1, as presets.CDP_LQ "
                  "(the poster gives none)",
    "lr": f"{_CHOICE}: UAI Table 5's eta, as presets.CDP_LQ (the poster gives none)",
    "delta": _POSTER,
    "noise_multiplier": f"{_POSTER} (its units not stated)",
    "init_steps": "UAI Table 5 (FL-TOP's T_init)",
    "public_batch": f"{_CHOICE}: training examples of writers no participant holds",
}




@dataclasses.dataclass(frozen=True)
class DataSetting:
  """A data set's base setting and where its values come from.

  Attributes:
    setting: Every scheme's setting on the data set, unless its own preset
      says otherwise.
    source: Where ``setting`` comes from, one line.
    scheme_presets: Per scheme, the settings that differ from ``setting``;
      None: the scheme families' presets (written for Fashion-MNIST) apply;
      empty: every scheme runs ``setting``.
    preset_sources: Per scheme of ``scheme_presets``, its source.
    value_sources: Per key of ``setting``, its source, where they differ.
  """

  setting: Mapping[str, Any]
  source: str
  scheme_presets: Mapping[str, Mapping[str, Any]] | None = None
  preset_sources: Mapping[str, str] = dataclasses.field(default_factory=dict)
  value_sources: Mapping[str, str] = dataclasses.field(default_factory=dict)

