"""The library's errors as the command line says them: fields become flags.

A bad setting raises :class:`~fedjax_dp.errors.ConfigError`, whose ``field``
is the setting's name as the library spells it (``clip_norm``). The command
line looks the field up (:data:`SETTING_FLAGS`, a scheme family's options:
:func:`fedjax_dp.cli.schemes.field_flags`) and writes its flag in front of
the error's ``detail``: ``--clip must be > 0, got -2``. Any other error, or
a field with no flag, keeps its message.
"""

from __future__ import annotations

from typing import Mapping

from fedjax_dp import datasets
from fedjax_dp.errors import ConfigError

# RunConfig's fields (its parts', its aggregator's and features') and their flags;
# selection_metric has none (the data set's).
RUN_FLAGS = {
    "ratio": "--ratio", "rounds": "--rounds", "clients_per_round": "--clients-per-round",
    "local_steps": "--local-steps", "batch_size": "--batch-size", "lr": "--lr",
    "local_optimizer": "--local-optimizer", "seed": "--seed",
    "noise_multiplier": "--noise-multiplier", "clip_norm": "--clip",
    "clip_ratio": "--clip-ratio", "delta": "--delta",
    "init_steps": "--init-steps", "eval_every": "--eval-every", "sampler": "--sampling",
    "accountant": "--accountant", "max_cohort": "--max-cohort",
    "secure_bits": "--secure-bits", "secure_frac_bits": "--secure-frac-bits",
    "secure_neighbours": "--secure-neighbours", "max_dropouts": "--max-dropouts",
    "dropout_rate": "--dropout-rate", "client_chunk": "--client-chunk",
    "devices": "--devices", "aggregator": "--aggregator", "trim": "--trim-fraction",
    "norm_bound": "--norm-bound", "fraction": "--malicious-fraction", "boost": "--boost",
    "sigma": "--attack-sigma", "attack": "--attack", "selection": "--malicious-selection",
    "audit_canaries": "--audit-canaries", "audit_confidence": "--audit-confidence",
    "skip_noise": "--attackers-skip-noise", "pool_training": "--pool-training",
    "source": "--backdoor", "target": "--backdoor", "adaptive_clip": "--adaptive-clip",
    "target_quantile": "--clip-quantile", "clip_lr": "--clip-lr",
    "count_noise": "--clip-count-noise",
}

# Data-loading parameters (``fedjax_dp.datasets.load``, its partition and
# federations) and their flags, from the options the data layer declares.
DATA_FLAGS = {o.setting: o.flag for o in datasets.LOAD_OPTIONS}

# Every setting outside the scheme families, by field.
SETTING_FLAGS = {**RUN_FLAGS, **DATA_FLAGS}


def flag_error(error: Exception, flags: Mapping[str, str] = SETTING_FLAGS) -> Exception:
  """``error`` as the command line reports it.

  Args:
    error: An error of the library.
    flags: The flag of each field (default: :data:`SETTING_FLAGS`; for a
      scheme's checks, with its family's ``field_flags`` too).

  Returns:
    A ``ValueError`` whose message is the flag and the error's detail, for
    a :class:`~fedjax_dp.errors.ConfigError` whose field has a flag;
    otherwise ``error`` itself.
  """
  if isinstance(error, ConfigError) and error.field in flags:
    return ValueError(f"{flags[error.field]} {error.detail}")
  return error
