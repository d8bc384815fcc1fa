"""The papers' per-scheme presets, applied from above by the command line.

A preset is the setting a scheme's paper ran it with, where it differs from
the data set's base setting (``fedjax_dp.data.settings``): the sweep
(``fedjax_dp.cli.sweep``) takes each of --rounds, --num-clients,
--samples-per-client, --clients-per-round, --local-steps, --batch-size and
--lr from the flag if given, else the preset (:func:`preset`), else the data
set's setting. The library declares none of these (its ``Family.presets``
and ``DataSetting.scheme_presets`` are for research code's own families and
data sets, read after these): its defaults are its own.

- :data:`SIGN`: thesis Tables 8.1, 8.2 and 8.4 (FL-SIGN, FL-SIGN-DP, signSGD);
- :data:`CDP_LQ`: the CDP-LQ poster's participants and one gradient a round;
- :data:`FEDSMP`: the Fed-SMP paper's Fashion-MNIST setting, Sec. 6.1-6.2;
- :data:`MEDICAL`: the CS family on the medical data, thesis Table 8.5.

The first three hold on the image data (where a data set's
``scheme_presets`` is None), :data:`MEDICAL` on medical-synth.
"""

from __future__ import annotations

from typing import Any, Mapping

from fedjax_dp.paper import settings

# The papers' settings where they differ from the UAI 2021 one (the sweep
# applies them unless the user passes the flag; "all": C = 1).
SIGN = {"FL-SIGN": settings.THESIS_TABLE8_1, "FL-SIGN-DP": settings.THESIS_TABLE8_2,
        "signSGD": settings.THESIS_SIGNSGD}
SIGN_SOURCES = {"FL-SIGN": "thesis Table 8.1", "FL-SIGN-DP": "thesis Table 8.2",
                "signSGD": "thesis Table 8.4, Sec. 4.1.1"}

# The preset keeps the poster's 25 participants, all in every round, and its
# one gradient per round (Alg. 1: T_gd = 1), on Fashion-MNIST's 60,000
# training images (2,400 per participant, IID). |B| = 240 (a Poisson rate
# q = 0.1), eta = 0.215 (the UAI value) and T_cl = 200 are this simulator's
# choice; so are Delta = 0.25 S and L = 5 with the scalar lattice, and delta
# stays at the sweep's --delta. (``settings.POSTER_CDP_LQ``: the poster's own.)
CDP_LQ = {"CDP-LQ": {"num_clients": 25, "clients_per_round": "all",
                     "samples_per_client": 2400, "local_steps": 1, "batch_size": 240,
                     "lr": 0.215, "rounds": 200}}
CDP_LQ_SOURCES = {"CDP-LQ": ("poster (seed 001) Results: 25 participants, Alg. 1 "
                             "(one gradient a round); |B|, eta, T_cl this simulator's "
                             "choice")}

# Fed-SMP paper (Hu, Gong, Guo), Fashion-MNIST, Sec. 6.1-6.2: N = 6,000
# clients; for top_k 1,000 training examples are held out as the server's
# public set and the remaining 59,000 go to the clients (9 each here, equal
# arrays; rand_k and the FedAvg baselines split all 60,000, 10 each); local
# momentum SGD for 10 local epochs, momentum reset every round, learning rate
# decaying by 0.99 per round (the schemes' lr_decay), the server's top_k
# training with the clients' optimiser and period. With |B| >= |D_k| a local
# step is an epoch, so T_gd = 10. The text this project has lost the
# momentum coefficient, the learning rate, |B|, the clients per round, T_cl,
# sigma and S: |K| = 100 and T_cl = 200 fall back to the UAI setting,
# |B| = 10, and eta = 0.1 with momentum 0.5 (``fedsmp.MOMENTUM``) is this
# simulator's choice, an effective step eta / (1 - beta) = 0.2 close to the
# UAI setting's 0.215. The paper's epsilon is 1.01 (Table I), delta < 1/N.
_FASHION_MNIST = {"num_clients": 6000, "samples_per_client": 10, "local_steps": 10,
                  "batch_size": 10, "lr": 0.1}
FEDSMP = {name: {**_FASHION_MNIST,
                 # top_k: 59,000 / 6,000 after the 1,000-example hold-out.
                 **({"samples_per_client": 9} if name.endswith("topk") else {})}
          for name in ("Fed-SMP-randk", "FedAvg-randk", "Fed-SMP-topk", "FedAvg-topk")}
FEDSMP_SOURCES = {name: ("Fed-SMP Sec. 6.1-6.2 (N, |D_k|, 10 local epochs); "
                         "eta, |B| this simulator's choice") for name in FEDSMP}
# These are the Fashion-MNIST (and MNIST) presets. On --dataset shakespeare every scheme
# runs the data set's setting instead, the Fed-SMP Shakespeare setting
# (fedjax_dp.data.settings.SHAKESPEARE and its sources), with the learning rate
# decaying every 50 rounds and top_k's server making one pass over its public set a round;
# on --dataset svhn the Fed-SMP SVHN setting (data.settings.SVHN), the rate decaying every
# round, top_k's public set 2,000 examples and its server making 5 passes over it a round
# (each data set's ``option_defaults``, fedjax_dp.data.sets).

# The CS family on the medical data (thesis Table 8.5): T_gd = 5, the rest
# as the data set's setting; eta_G = 1.0 (UAI Table 5, medical row: medical-synth's
# ``option_defaults``, fedjax_dp.data.sets.medical_synth).
MEDICAL = {
    name: {"local_steps": 5}
    for name in ("FL-CS", "FL-CS-DP", "FL-RND", "FL-RND-DP", "FL-FREQ", "FL-FREQ-DP")}
MEDICAL_SOURCES = {name: "thesis Table 8.5" for name in MEDICAL}

# On the image data (a data set whose scheme_presets is None), in the order --help lists
# them; per other data set, its schemes' presets.
IMAGE_PRESETS = {**SIGN, **CDP_LQ, **FEDSMP}
IMAGE_SOURCES = {**SIGN_SOURCES, **CDP_LQ_SOURCES, **FEDSMP_SOURCES}
DATASET_PRESETS = {"medical-synth": (MEDICAL, MEDICAL_SOURCES)}


def presets_on(dataset) -> tuple[Mapping[str, Mapping[str, Any]], Mapping[str, str]]:
  """The papers' presets on a data set (``fedjax_dp.datasets.Dataset``) and
  their sources: the image data's where its ``scheme_presets`` is None, else
  those of :data:`DATASET_PRESETS` for its name (none for most)."""
  if dataset.scheme_presets is None:
    return IMAGE_PRESETS, IMAGE_SOURCES
  return DATASET_PRESETS.get(dataset.name, ({}, {}))


def preset(scheme: str, dataset) -> tuple[dict, str] | None:
  """A scheme's paper preset on a data set and its source; None without one."""
  found, sources = presets_on(dataset)
  return (dict(found[scheme]), sources[scheme]) if scheme in found else None
