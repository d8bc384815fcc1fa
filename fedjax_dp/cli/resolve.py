"""From the parsed flags to what a sweep runs, resolved once.

:func:`resolve` is the only reader of the parsed flags (an
``argparse.Namespace`` of :func:`fedjax_dp.cli.parser.build_parser`);
:func:`processes` reads the few a process needs before JAX joins the
others. The rest of the command line reads the :class:`Request` it
returns: the data set (looked up once), every flag's value with the data
set's defaults filled in, the model, and the sweep's runs in Table 1 order,
each with its nested :class:`~fedjax_dp.simulation.RunConfig`, validated.

A run's preset-able settings are layered by one pure function,
:func:`layered`: the library's default < the data set's setting < the
scheme's preset (its paper's, ``fedjax_dp.paper.presets``, else its
family's or the data set's own) < the flag. Which flags take part is read
from the declared options' ``preset=`` metadata. Checks of how flags
combine raise ``ValueError`` naming the flags (one line); the settings' own
checks are the library's (``ConfigError``, reported with its flag by
:mod:`fedjax_dp.cli.errors`).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import pathlib
import types
from typing import Any, Callable, Mapping, NamedTuple

from fedjax_dp import aggregators, datasets, distributed, features, keys, options, sharding
from fedjax_dp import simulation
from fedjax_dp.cli import errors as cli_errors
from fedjax_dp.cli import schemes as cli_schemes
from fedjax_dp.cli.parser import PRESET_FLAGS, declared_options
from fedjax_dp.errors import ConfigError
from fedjax_dp.models import DROPOUT_MODELS, FlatModel, get_model
from fedjax_dp.paper import presets as paper_presets
from fedjax_dp.paper import results as paper_results
from fedjax_dp.privacy import accounting
from fedjax_dp.schemes import FAMILIES, Scheme, family_of, get_scheme

__all__ = ["DATASET_FLAGS", "RUN_SETTINGS", "PlannedRun", "Request", "clip_for", "layered",
           "processes", "resolve", "run_config", "scheme_setting", "setting_source",
           "settings"]

# The folder of a sweep's checkpoints in --out (:meth:`Request.checkpoint_path`).
CHECKPOINTS = ".checkpoints"

# A run's own layered settings (:func:`settings`): the options declared with
# ``preset="scheme"`` and the local optimiser (the data set's, unless a flag says).
RUN_SETTINGS = (*PRESET_FLAGS, "local_optimizer")

# Flags whose default is the data set's for the whole sweep (``Dataset.defaults``):
# the other options declared with ``preset="dataset"`` (sigma, delta, T_init, the
# public set's size).
DATASET_FLAGS = tuple(o.name for o in (*datasets.OPTIONS, *declared_options())
                      if o.preset == "dataset" and o.name not in RUN_SETTINGS)

# A run's setting the library defaults where neither the data set nor a preset
# gives it (every data set's setting gives the others).
_LIBRARY = {"local_optimizer": simulation.config.Training.local_optimizer}


class PlannedRun(NamedTuple):
  """One (scheme, ratio) run of a sweep.

  Attributes:
    scheme: The configured scheme.
    ratio: r.
    setting: Its preset-able settings (:func:`settings`).
    config: The run's :class:`~fedjax_dp.simulation.RunConfig` (clip norm
      None: calibrated in the run).
    clip_source: Where a given S came from ("user", or the paper's table;
      :func:`clip_for`), which the record says in place of "given"; None:
      no S given (the record says how the run decided it).
    plan: The run's :class:`~fedjax_dp.simulation.Plan` as
      ``simulation.validate`` started it (S open), which ``simulation.run``
      fills without validating the run again; None: not validated yet.
  """

  scheme: Scheme
  ratio: float
  setting: dict
  config: simulation.RunConfig
  clip_source: str | None
  plan: simulation.Plan | None = None


@dataclasses.dataclass(frozen=True)
class Request:
  """A sweep as its command line asks it, resolved once (:func:`resolve`).

  Attributes:
    dataset: The data set.
    values: Every flag's value by its name, the data set's defaults filled
      in (read-only); the scheme families read their options from it, and
      results.json stores it (:meth:`config`).
    model: The data set's model.
    runs: The runs in Table 1 order (FL-STD(-DP) once, at r = 100%),
      validated.
  """

  dataset: datasets.Dataset
  values: Mapping[str, Any]
  model: FlatModel
  runs: tuple[PlannedRun, ...]

  @property
  def out(self) -> str:
    """--out: the folder of the sweep's records."""
    return self.values["out"]

  @property
  def seed(self) -> int:
    """--seed."""
    return self.values["seed"]

  @property
  def partition(self) -> datasets.PartitionConfig:
    """How the data set is split over clients (--partition and its flags)."""
    v = self.values
    return datasets.PartitionConfig(v["partition"], v["dirichlet_alpha"],
                                    v["shards_per_client"])

  def config(self) -> dict:
    """The sweep's settings as results.json stores them (``--overwrite``
    aside: what the sweep did to the folder, not what its records are)."""
    kept = {k: v for k, v in self.values.items() if k != "overwrite"}
    return json.loads(json.dumps(dict(kept, dataset=self.dataset.label)))

  def checkpoint_path(self, run: PlannedRun) -> pathlib.Path:
    """Where a run of the sweep saves its progress (deleted when it finishes)."""
    return pathlib.Path(self.out) / CHECKPOINTS / f"{run.scheme.name}-r{run.ratio:g}.npz"


def layered(*layers: Mapping[str, Any]) -> dict[str, Any]:
  """The settings of ``layers``, each name's value from the last layer that
  gives it (None: not given).

  >>> layered({"lr": 0.1, "rounds": 5}, {"rounds": 9}, {"rounds": None})
  {'lr': 0.1, 'rounds': 9}
  """
  out = {}
  for layer in layers:
    out.update({k: v for k, v in layer.items() if v is not None})
  return out


def processes(args: argparse.Namespace) -> distributed.Processes:
  """The flags of :func:`fedjax_dp.cli.parser.add_process_flags` as
  :class:`~fedjax_dp.distributed.Processes` (read before JAX joins the
  processes, so before :func:`resolve`)."""
  return distributed.Processes(args.coordinator, args.num_processes, args.process_id,
                               args.process_timeout)


def _scheme_presets(scheme: Scheme, dataset: datasets.Dataset) -> tuple[dict, str]:
  """The scheme's preset on a data set and its source: its paper's
  (``fedjax_dp.paper.presets``), else its family's or the data set's own."""
  found = paper_presets.preset(scheme.name, dataset)
  if found is not None:
    return found
  if dataset.scheme_presets is None:  # the families' presets (image data)
    family = family_of(scheme)
    return (dict(family.presets.get(scheme.name, {})),
            family.preset_sources.get(scheme.name, dataset.setting_source))
  return (dict(dataset.scheme_presets.get(scheme.name, {})),
          dataset.preset_sources.get(scheme.name, dataset.setting_source))


def scheme_setting(name: str, dataset: str | datasets.Dataset = "fashion-mnist") -> dict:
  """The data set's base setting (UAI Table 5) updated by the scheme's preset."""
  data = datasets.get_dataset(dataset) if isinstance(dataset, str) else dataset
  return {**data.setting, **_scheme_presets(get_scheme(name), data)[0]}


def setting_source(scheme: Scheme, dataset: str | datasets.Dataset,
                   setting: dict | None = None) -> str:
  """Where a scheme's setting on a data set comes from; with the run's
  ``setting``, also which of its values flags changed from that source's."""
  data = datasets.get_dataset(dataset) if isinstance(dataset, str) else dataset
  source = _scheme_presets(scheme, data)[1]
  if setting is None:
    return source
  preset = scheme_setting(scheme.name, data)
  if preset.get("clients_per_round") == "all":
    preset["clients_per_round"] = preset["num_clients"]
  changed = [f"--{k.replace('_', '-')} {setting[k]}" for k in sorted(preset)
             if k in setting and setting[k] != preset[k]]
  return source if not changed else f"{source}, except {', '.join(changed)}"


def settings(values: Mapping[str, Any], scheme: Scheme,
             dataset: datasets.Dataset) -> dict:
  """The preset-able settings of one scheme (:func:`layered`): the library's
  default < the data set's setting < the scheme's preset < the flag."""
  flags = {name: values[name] for name in RUN_SETTINGS}
  setting = layered(_LIBRARY, dataset.setting, _scheme_presets(scheme, dataset)[0], flags)
  if setting["clients_per_round"] == "all":
    setting["clients_per_round"] = setting["num_clients"]
  return setting


def clip_for(values: Mapping[str, Any], scheme: Scheme,
             ratio: float) -> tuple[float | None, str | None]:
  """The S a command line gives (--clip: a number, or "paper" where the paper
  states one) and where it came from; (None, None): none given.

  What S the run uses is ``simulation.setup.clip_norm_of``'s to decide (a
  scheme of fixed sensitivity ignores a given S; none given, it is
  calibrated, at --clip-ratio if set), and the record names it; the command
  line only names the origin of a given S ("user" or the paper's table).
  """
  clip = values["clip"]
  if isinstance(clip, float):
    return clip, "user"
  if clip == "paper":
    s = paper_results.paper_clip_norm(scheme.name, ratio, values["dataset"])
    if s is not None:
      return s, f"paper ({paper_results.paper_clip_source(scheme.name, ratio, values['dataset'])})"
  return None, None


def run_config(values: Mapping[str, Any], scheme: Scheme, ratio: float, setting: dict,
               clip: float | None, dataset: datasets.Dataset) -> simulation.RunConfig:
  """The nested RunConfig of one run of the sweep, from the declared options.

  Each part's field (``simulation.config.PARTS``) takes the run's
  preset-able ``setting`` (:func:`settings`) where the field is preset-able,
  else its option's flag; S, sigma (the family's rule) and the selection
  metric (the data set's) are the run's. The aggregator and the round
  features build their configs from their own options
  (``aggregators.from_options``, ``features.from_options``).

  Raises:
    ConfigError: An option given while its feature is off, a bad backdoor
      class (naming the field; the sweep reports its flag).
  """
  run = {"clip_norm": clip, "clip_ratio": values["clip_ratio"] if clip is None else None,
         "noise_multiplier": family_of(scheme).noise_multiplier(scheme, values),
         "selection_metric": dataset.selection_metric}
  parts = {}
  for part, cls in simulation.config.PARTS.items():
    declared = {o.setting: o for o in options.declared(cls)}
    fields = {}
    for field in dataclasses.fields(cls):
      option = declared.get(field.name)
      if field.name in run:
        fields[field.name] = run[field.name]
      elif option is not None:
        fields[field.name] = (setting[field.name] if field.name in RUN_SETTINGS
                              else values[option.name])
    parts[part] = cls(**fields)
  return simulation.RunConfig(ratio=ratio, aggregator=aggregators.from_options(values),
                              features=features.from_options(values), **parts)


def _data_values(flags: Mapping[str, Any], dataset: datasets.Dataset) -> dict[str, Any]:
  """Every flag's value, the data set's defaults under the flags left at None
  (:data:`DATASET_FLAGS`); the data flags checked.

  Raises:
    ValueError: A data flag that does not apply, one line naming it.
  """
  values, defaults = flags, dataset.defaults()
  values = {**values, **layered({k: defaults[k] for k in DATASET_FLAGS},
                                {k: values[k] for k in DATASET_FLAGS})}
  partition = values["partition"]
  if values["dirichlet_alpha"] is not None and partition != "dirichlet":
    raise ValueError("--dirichlet-alpha needs --partition dirichlet")
  if values["shards_per_client"] is not None and partition != "shards":
    raise ValueError("--shards-per-client needs --partition shards")
  if partition == "dirichlet" and values["dirichlet_alpha"] is None:
    raise ValueError("--partition dirichlet needs --dirichlet-alpha")
  if partition == "shards" and values["shards_per_client"] is None:
    raise ValueError("--partition shards needs --shards-per-client")
  if not dataset.partitioned and partition != "iid":
    raise ValueError(f"--dataset {dataset.name} is split {dataset.split}; --partition "
                     "applies to the data sets split by partition")
  if values["dropout"] and dataset.model not in DROPOUT_MODELS:
    raise ValueError(f"--dropout applies to the medical MLP (medical-synth) and All-CNN-C "
                     f"(cifar10); --dataset {dataset.name} uses the model "
                     f"{dataset.model!r}")
  return values


def _check_setting(values: Mapping[str, Any], setting: dict) -> None:
  """The checks of a run's setting that name flags (one line, ValueError)."""
  for flag in ("num_clients", "samples_per_client"):
    if setting[flag] < 1:
      raise ValueError(f"--{flag.replace('_', '-')} must be >= 1, got {setting[flag]}")
  most = simulation.config.INT32_MAX  # client ids are int32
  if setting["num_clients"] > most:
    raise ValueError(f"--num-clients must be at most {most}, got {setting['num_clients']}")
  shards = values["shards_per_client"]
  if values["partition"] == "shards" and setting["samples_per_client"] % shards:
    raise ValueError(f"--samples-per-client ({setting['samples_per_client']}) must be a "
                     f"multiple of --shards-per-client ({shards})")
  if values["clip_ratio"] is not None and isinstance(values["clip"], float):
    raise ValueError(f"--clip-ratio applies to a calibrated S, not to --clip "
                     f"{values['clip']:g}")


# Flags that only DP schemes read (left at None unless given).
_DP_FLAGS = ("noise_multiplier", "target_epsilon", "clip", "clip_ratio", "delta")


def _check_dp_flags(flags: Mapping[str, Any], schemes: list[Scheme]) -> None:
  """Refuses a DP flag given to a sweep of no DP scheme, which would ignore it."""
  given = [name for name in _DP_FLAGS if flags.get(name) is not None]
  if given and not any(s.dp for s in schemes):
    names = ", ".join(s.name for s in schemes)
    raise ValueError(f"{cli_errors.setting_flags()[given[0]]} applies to DP schemes; {names} "
                     f"add{'s' if len(schemes) == 1 else ''} no noise (run a DP scheme, "
                     "e.g. --schemes FL-TOP-DP)")


# Settings read only when another is on: (their config part, their names,
# whether the values turn them on, the flag that does).
_SWITCHED = (
    (simulation.config.Privacy, ("mc_samples", "mc_confidence", "mc_seed"),
     lambda values: values["accountant"] == accounting.MONTE_CARLO, "--accountant monte-carlo"),
    (simulation.config.Secure, ("secure_bits", "secure_frac_bits", "secure_neighbours"),
     lambda values: values["secure_aggregation"], "--secure-aggregation"),
)


def _check_switched_flags(values: Mapping[str, Any]) -> None:
  """Refuses a flag given (not at its default) while the setting that reads
  it is off: a Monte Carlo flag with another accountant, a secure-aggregation
  flag without --secure-aggregation."""
  for part, names, on, switch in _SWITCHED:
    if on(values):
      continue
    defaults = {o.name: o.default for o in options.declared(part)}
    for name in names:
      if values[name] != defaults[name]:
        raise ValueError(f"--{name.replace('_', '-')} needs {switch}")


def _check_sigma_flags(values: Mapping[str, Any]) -> None:
  """Refuses two flags that each set CDP-LQ's sigma: ``--target-epsilon``
  calibrates over ``--lq-step-epsilon``'s, whose value the record would
  still give."""
  if values["lq_step_epsilon"] is not None and values["target_epsilon"] is not None:
    raise ValueError("--lq-step-epsilon and --target-epsilon both set CDP-LQ's sigma; give one")


def _check_secure_flag(values: Mapping[str, Any], schemes: list[Scheme]) -> None:
  """Refuses --secure-aggregation for a sweep whose schemes all send real
  values without noise, which the round sums in the clear
  (``simulation.setup.communication``)."""
  if values["secure_aggregation"] and not any(
      s.traits.dp or s.traits.integer_messages for s in schemes):
    names = ", ".join(s.name for s in schemes)
    raise ValueError(f"--secure-aggregation applies to DP schemes and to integer messages "
                     f"(FL-SIGN, signSGD); {names} send{'s' if len(schemes) == 1 else ''} "
                     "real values in the clear")


def _check_family_flags(flags: Mapping[str, Any], schemes: list[Scheme]) -> None:
  """Refuses a scheme family's flag given (not at its default, as typed) to a
  sweep of none of the schemes that read it (``Family.readers``)."""
  running = list(dict.fromkeys(s.name for s in schemes))
  for family in FAMILIES:
    for option in family.options:
      readers = family.readers(option)
      if flags[option.name] != option.default and not set(running) & set(readers):
        raise ValueError(f"{option.flag} applies to {', '.join(readers)}; this sweep runs "
                         f"{', '.join(running)}")


def _check_public(values: Mapping[str, Any], dataset: datasets.Dataset) -> None:
  size = values["public_size"]
  if size < 1:
    raise ValueError(f"--public-size must be >= 1, got {size}")
  if dataset.name == "medical-synth" and size % 2:
    raise ValueError("--public-size must be even on medical-synth (as many positives "
                     f"as negatives), got {size}")


@functools.lru_cache(maxsize=None)
def _model(build: Callable[..., FlatModel], name: str, dropout: float) -> FlatModel:
  """A data set's model, built once per process (``reproduce.py`` plans every
  row of every table; ``build`` is in the key so that a stand-in model counts
  anew)."""
  return build(name, dropout=dropout)


def _plan_run(values: Mapping[str, Any], dataset: datasets.Dataset, scheme: Scheme,
              ratio: float, model: FlatModel) -> PlannedRun:
  """One run, validated as the library validates it (its errors named by flag)."""
  setting = settings(values, scheme, dataset)
  _check_setting(values, setting)
  clip, source = clip_for(values, scheme, ratio)
  try:
    config = run_config(values, scheme, ratio, setting, clip, dataset)
    config.training.validate(setting["num_clients"])  # the seed, before its key is made
    plan = simulation.setup.validate(config, scheme, model, setting["num_clients"],
                                     setting["samples_per_client"],
                                     keys.run_key(config.training.seed))
  except ConfigError as e:  # the library names its field; the user typed a flag
    flags = {**cli_errors.setting_flags(), **cli_schemes.field_flags(family_of(scheme))}
    raise cli_errors.flag_error(e, flags) from None
  return PlannedRun(scheme, ratio, setting, config, source if scheme.dp else None, plan)


def resolve(args: argparse.Namespace, num_params: int | None = None) -> Request:
  """The sweep a command line asks for: its data set, values, model and runs.

  Args:
    args: Parsed arguments (:func:`fedjax_dp.cli.parser.build_parser`); flags
      left at None take the data set's setting, then the scheme's preset.
    num_params: n of the model (default: the data set's model's); given, the
      settings are checked as for a model of that many weights.

  Raises:
    ValueError: A bad setting, one line naming the flag.
  """
  dataset = datasets.get_dataset(args.dataset)
  values = _data_values(vars(args), dataset)
  model = _model(get_model, dataset.model, values["dropout"])
  checked = model if num_params is None else dataclasses.replace(
      model, shapes=(("w", (num_params,)),))  # the model's name and loss, n weights
  schemes = [family_of(s).configure(s, values) for s in map(get_scheme, values["schemes"])]
  _check_dp_flags(vars(args), schemes)  # as typed: the data set's defaults are not given
  _check_family_flags(vars(args), schemes)
  _check_switched_flags(values)
  _check_sigma_flags(values)
  _check_secure_flag(values, schemes)
  if not str(values["out"]).strip():
    raise ValueError("--out must name a folder, got ''")
  pairs = [(s, r) for r in values["ratio"] for s in schemes if s.uses_ratio]
  pairs += [(s, 1.0) for s in schemes if not s.uses_ratio]
  runs = {}
  for scheme, ratio in pairs:
    if (scheme.name, ratio) not in runs:
      runs[scheme.name, ratio] = _plan_run(values, dataset, scheme, ratio, checked)
  _check_public(values, dataset)
  sharding.client_mesh(values["devices"])  # no more devices than JAX sees
  return Request(dataset, types.MappingProxyType(values), model, tuple(runs.values()))
