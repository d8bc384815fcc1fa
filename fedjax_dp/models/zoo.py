"""More models as flax modules: the seeds' other architectures and benchmark models.

Every module here is stateless (parameters only: no BatchNorm statistics) and
has no dropout, so :func:`fedjax_dp.models.from_flax` wraps each of them as a
:class:`~fedjax_dp.models.flat.FlatModel` with ``fast=True`` or ``fast=False``::

  from fedjax_dp.models import from_flax, zoo
  constructor, sample = zoo.ZOO["svhn-cnn"]
  model = from_flax(constructor(), sample)

The weight counts in the docstrings were computed from the modules
(``from_flax(...).num_params``), not copied from the papers. Fed-SMP is the
seed ``fed-smp-sparsified-model-perturbation.txt`` (Hu et al., "Federated
Learning with Sparsified Model Perturbation"); "l." are its line numbers.
"""

from __future__ import annotations

from typing import Callable, Sequence

import flax.linen as nn
import jax
import numpy as np

# LEAF's Shakespeare task: 80 distinct characters, windows of 80 characters (the
# same as fedjax_dp.data.shakespeare's NUM_LETTERS and SEQ_LEN, whose int32
# windows this model reads).
SHAKESPEARE_VOCAB = 80
SHAKESPEARE_WINDOW = 80


class MLP(nn.Module):
  """A flattening MLP: inputs (batch, ...) to ``classes`` logits, ReLU hidden layers.

  A benchmark model, not a seed's. With the default ``hidden=(1024, 512)`` on
  28x28x1 images (784 -> 1024 -> 512 -> 10) it has 1,333,770 weights, close
  to the paper CNN's 1,663,370 but all in dense layers. No dropout.

  Attributes:
    hidden: Widths of the hidden layers.
    classes: Number of output logits.
  """

  hidden: Sequence[int] = (1024, 512)
  classes: int = 10

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    h = x.reshape(x.shape[0], -1)
    for i, size in enumerate(self.hidden, start=1):
      h = nn.relu(nn.Dense(size, name=f"dense{i}")(h))
    return nn.Dense(self.classes, name=f"dense{len(self.hidden) + 1}")(h)


class SmallCNN(nn.Module):
  """A small CNN on (batch, 28, 28, 1) images: 30,762 weights.

  A benchmark model, not a seed's: conv 3x3x16 ('valid', ReLU) - 2x2 max
  pool - conv 3x3x32 ('valid', ReLU) - 2x2 max pool - dense 32 (ReLU) -
  dense 10. Shapes 28 -> 26 -> 13 -> 11 -> 5, so the dense layers see
  5 * 5 * 32 = 800 features. Weights: 160 + 4,640 + 25,632 + 330 = 30,762.
  No dropout.

  Attributes:
    classes: Number of output logits.
  """

  classes: int = 10

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    x = nn.relu(nn.Conv(16, (3, 3), padding="VALID", name="conv1")(x))
    x = nn.max_pool(x, (2, 2), strides=(2, 2))
    x = nn.relu(nn.Conv(32, (3, 3), padding="VALID", name="conv2")(x))
    x = nn.max_pool(x, (2, 2), strides=(2, 2))
    x = x.reshape(x.shape[0], -1)
    x = nn.relu(nn.Dense(32, name="dense1")(x))
    return nn.Dense(self.classes, name="dense2")(x)


class SVHNCNN(nn.Module):
  """Fed-SMP's SVHN CNN on (batch, 32, 32, 3) images: 3,431,754 weights.

  Fed-SMP Sec. 6.1 (l.154), the CNN of its ref. [33] (Liang et al., DP-Fed-LS):
  "two convolution layers (the first with 64 filters, the second with 128
  filters, each followed with max pooling and ReLu activation), two fully
  connected layers (the first with 384 units, the second with 192 units,
  each followed with ReLu activation), and a final softmax output layer".

  The seed gives neither the kernel size, the padding, the pooling window
  nor the total (its "about ... million parameters" lost the number). This
  module takes them from the Fashion-MNIST CNN described one line earlier
  (l.153, McMahan et al.'s, :class:`~fedjax_dp.models.PaperCNN`): 5x5
  kernels with 'same' padding and 2x2 max pooling of stride 2, so
  32 -> 16 -> 8 and the first dense layer sees 8 * 8 * 128 = 8,192 features.
  ReLU comes before the pooling (max pooling and ReLU commute). Weights:
  conv1 4,864 + conv2 204,928 + dense1 3,146,112 + dense2 73,920 +
  output 1,930 = 3,431,754. No dropout, no normalisation.

  Attributes:
    classes: Number of output logits (SVHN: 10 digits).
  """

  classes: int = 10

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    x = nn.relu(nn.Conv(64, (5, 5), padding="SAME", name="conv1")(x))
    x = nn.max_pool(x, (2, 2), strides=(2, 2))
    x = nn.relu(nn.Conv(128, (5, 5), padding="SAME", name="conv2")(x))
    x = nn.max_pool(x, (2, 2), strides=(2, 2))
    x = x.reshape(x.shape[0], -1)
    x = nn.relu(nn.Dense(384, name="dense1")(x))
    x = nn.relu(nn.Dense(192, name="dense2")(x))
    return nn.Dense(self.classes, name="dense3")(x)


class CharLSTM(nn.Module):
  """Fed-SMP's Shakespeare next-character model: 817,872 weights (vocab 80).

  Fed-SMP Sec. 6.1 (l.155), the RNN of its ref. [34] (Reddi et al.,
  "Adaptive federated optimization"): it "takes an 80-character sequence as
  input and consists of a embedding layers and 2 LSTM layers (each with 256
  nodes) followed by a dense layer, resulting in about 0.8 million
  parameters". Token ids (batch, 80) int32 -> nn.Embed(vocab, 8) -> LSTM 256
  -> LSTM 256 (``nn.RNN(nn.OptimizedLSTMCell(256))``, zero initial state) ->
  Dense(vocab) of the last position: the logits (batch, vocab) of the
  character that follows the window (LEAF's next-character task).

  The seed states neither the embedding size nor the vocabulary: 8
  dimensions as in [34] and in LEAF's model, and LEAF's 80 characters.
  (TFF's Shakespeare in [34] has 86 characters + 4 special tokens, 90 in all:
  820,522 weights; [34] also predicts at every position of the window, not
  only the last.) Weights with vocab 80: embedding 640 + LSTM1
  4 * 256 * (8 + 256 + 1) = 271,360 + LSTM2 4 * 256 * (256 + 256 + 1) =
  525,312 + dense 20,560 = 817,872. No dropout.

  Attributes:
    vocab: Number of distinct characters (input ids in [0, vocab), logits).
    embed: Embedding dimension.
    units: LSTM units per layer.
    layers: Number of stacked LSTM layers.
  """

  vocab: int = SHAKESPEARE_VOCAB
  embed: int = 8
  units: int = 256
  layers: int = 2

  @nn.compact
  def __call__(self, tokens: jax.Array) -> jax.Array:
    h = nn.Embed(self.vocab, self.embed, name="embed")(tokens)
    for i in range(1, self.layers + 1):
      h = nn.RNN(nn.OptimizedLSTMCell(self.units, name=f"lstm{i}"))(h)
    return nn.Dense(self.vocab, name="dense")(h[:, -1])


# name -> (constructor, sample input batch) for benchmarks/models.py; the
# samples are NumPy arrays, so importing this module starts no JAX backend.
ZOO: dict[str, tuple[Callable[[], nn.Module], np.ndarray]] = {
    "mlp": (MLP, np.zeros((1, 28, 28, 1), np.float32)),
    "small-cnn": (SmallCNN, np.zeros((1, 28, 28, 1), np.float32)),
    "svhn-cnn": (SVHNCNN, np.zeros((1, 32, 32, 3), np.float32)),
    "lstm": (CharLSTM, np.zeros((1, SHAKESPEARE_WINDOW), np.int32)),
}

__all__ = ["CharLSTM", "MLP", "SHAKESPEARE_VOCAB", "SHAKESPEARE_WINDOW", "SVHNCNN",
           "SmallCNN", "ZOO"]
