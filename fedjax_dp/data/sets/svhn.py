"""svhn: Fed-SMP's SVHN, train + extra for the clients (Sec. 6.1).

The official ``.mat`` files (:mod:`fedjax_dp.data.archives`): the 604,388
images of train + extra gathered from both files without a copy
(:class:`ConcatRows`), split by partition, 2,000 of them held out as the
server's public set for every scheme (as Fed-SMP Sec. 6.1 does for top_k),
so that every scheme trains the same clients and S is calibrated on data no
client holds; the test set is the 26,032 test images. Fed-SMP's SVHN CNN in
its SVHN setting (``data.settings.SVHN``).
"""

import numpy as np

from fedjax_dp.data import archives, settings
from fedjax_dp.data.sets import base

# Every scheme runs the base setting (Fed-SMP's setting of all its algorithms).
SETTINGS = settings.DataSetting(
    settings.SVHN, "Fed-SMP Sec. 6.1-6.2: N, train + extra, 5 local epochs, 2,000 public "
    "examples; |K|, |B|, T_cl, eta, sigma lost: this simulator's Fed-SMP Fashion-MNIST "
    "values", {}, value_sources=settings.SVHN_SOURCES)


class ConcatRows:
  """The rows of several arrays, one after the other, without concatenating them.

  SVHN's training set is train + extra (604,388 images, 1.86 GB of uint8):
  indexing with an integer array gathers the rows it names from each
  file's array, so the whole set is never copied.

  Attributes:
    parts: The arrays, same dtype and row shape.
    shape: (total rows, *row shape).
    dtype: Their dtype.
  """

  def __init__(self, *parts: np.ndarray):
    if not parts or any(p.shape[1:] != parts[0].shape[1:] or p.dtype != parts[0].dtype
                        for p in parts):
      raise ValueError("ConcatRows needs arrays of one dtype and row shape")
    self.parts = parts
    self._ends = np.cumsum([len(p) for p in parts])
    self.shape = (int(self._ends[-1]), *parts[0].shape[1:])
    self.dtype = parts[0].dtype

  def __len__(self) -> int:
    return self.shape[0]

  def __getitem__(self, index) -> np.ndarray:
    index = np.asarray(index)
    if index.size and (index.min() < 0 or index.max() >= len(self)):
      raise IndexError(f"row index outside [0, {len(self)})")
    out = np.empty(index.shape + self.shape[1:], self.dtype)
    part = np.searchsorted(self._ends, index, side="right")
    start = 0
    for k, array in enumerate(self.parts):
      mine = part == k
      out[mine] = array[index[mine] - start]
      start += len(array)
    return out


def load(split: str, seed: int):
  """Fed-SMP Sec. 6.1: train + extra for training (604,388), test for testing (26,032)."""
  del seed
  if split == "train":
    (train, train_y), (extra, extra_y) = archives.load_svhn("train"), archives.load_svhn("extra")
    return ConcatRows(train, extra), np.concatenate([train_y, extra_y])
  return archives.load_svhn("test")


DATASET = base.Dataset(
    name="svhn", model="svhn-cnn", settings=SETTINGS, federation=base.partition_federation,
    loader=load,
    files=base.archive_files(*(("svhn", f"{split}_32x32.mat")
                               for split in ("train", "extra", "test"))),
    public_source="2,000 training examples held out of the clients' (Fed-SMP Sec. 6.1)",
    holds_out_public=True,
    about="train + extra (Fed-SMP's CNN and setting; the official files, the public set "
          "held out of the training set)",
    class_names=tuple(str(d) for d in range(10)),
    # Fed-SMP Sec. 6.1: top_k's public set of 2,000 examples; Sec. 6.2: its
    # server trains with the clients' local period, 5 epochs (T_gd = 50 steps of
    # |B| = 10 over a client's 100 examples).
    option_defaults={"public_holdout": 2000, "server_epochs": 5})
