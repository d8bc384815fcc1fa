"""More models as flax modules: the seeds' other architectures and benchmark models.

Every module here is stateless (parameters only: no BatchNorm statistics), so
:func:`fedjax_dp.models.from_flax` wraps each of them as a
:class:`~fedjax_dp.models.flat.FlatModel` with ``fast=True`` or ``fast=False``::

  from fedjax_dp.models import from_flax, zoo
  constructor, sample = zoo.ZOO["svhn-cnn"]
  model = from_flax(constructor(), sample)

One of them has dropout: :class:`AllCNNC` (``dropout``, off by default and
in evaluation; ``train=True`` draws it from the ``"dropout"`` rng). With
dropout 0 it trains on the fast path like the others;
``fedjax_dp.models.all_cnn_c(d)`` with d > 0 gives it a training-mode
forward pass (``train_apply_fn``), trained on the plain path.

The weight counts in the docstrings were computed from the modules
(``from_flax(...).num_params``), not copied from the papers. Fed-SMP is the
seed ``fed-smp-sparsified-model-perturbation.txt`` (Hu et al., "Federated
Learning with Sparsified Model Perturbation"), the thesis
``kerkouche-thesis-dp-fl-bandwidth-energy.txt`` (Kerkouche, App. 8.3.1
"Model Architectures"), the poster
``compressive-dp-fl-lattice-quantization-poster.txt``; "l." are their line
numbers.
"""

from __future__ import annotations

import functools
from typing import Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp.models.cnn import PaperCNN

# LEAF's Shakespeare task: 80 distinct characters, windows of 80 characters (the
# same as fedjax_dp.data.shakespeare's NUM_LETTERS and SEQ_LEN, whose int32
# windows this model reads).
SHAKESPEARE_VOCAB = 80
SHAKESPEARE_WINDOW = 80

# The thesis' IMDB setting (App. 8.3.1, l.2221): a vocabulary of 5,000 words,
# reviews cut or padded to 400 tokens (0 = padding). The same as
# fedjax_dp.data.archives' IMDB_VOCAB_SIZE and IMDB_MAXLEN, whose int32 token
# arrays this model reads (mirrored, not imported, so that importing the
# models imports no data code; tests/models/test_zoo_models.py checks they agree).
IMDB_VOCAB = 5000
IMDB_LENGTH = 400


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


class AllCNNC(nn.Module):
  """The thesis' CIFAR-10 model, All-CNN-C: 1,369,738 weights.

  Thesis App. 8.3.1 (l.2217-2219), "All-CNN-C" of Springenberg et al. 2015
  ("Striving for simplicity: the all convolutional net"): images
  (batch, 32, 32, 3), floats in [0, 1], to (batch, ``classes``) logits.

  * Block 1: three 3x3 convolutions of 96 filters, 'same' padding, ReLU
    after each; the third has stride 2 (32 -> 16) and is followed by
    dropout ("the last layer has a strides of 2x2 and dropout of 0.5 is
    applied").
  * Block 2: the same with 192 filters (16 -> 8), dropout after it.
  * Block 3: a 3x3 convolution of 192 filters (ReLU), 'valid' (8 -> 6), a
    1x1 convolution of 192 (ReLU), a 1x1 convolution of ``classes`` (the
    logits: no ReLU; the thesis names none and applies softmax after the
    pooling), global average pooling over the 6x6 positions.

  The seed states neither padding. Blocks 1-2 use 'same' (the strided
  convolutions halve the size in place of max pooling); block 3's 3x3 is
  'valid' as in Springenberg et al.'s All-CNN-C, which averages over 6x6
  positions. Padding changes no weight count, and the count, 1,369,738,
  equals the thesis' (l.2219): block 1 2,688 + 83,040 + 83,040 = 168,768;
  block 2 166,080 + 331,968 + 331,968 = 830,016; block 3 331,968 + 37,056 +
  1,930 = 370,954. No normalisation; flax's default initialisers.

  Attributes:
    dropout: Rate of the dropout after blocks 1 and 2 in training mode
      (thesis: 0.5); 0, the default, for none.
    classes: Number of output logits (CIFAR-10: 10).
  """

  dropout: float = 0.0
  classes: int = 10

  @nn.compact
  def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
    layer = 0
    for filters in (96, 192):
      for stride in (1, 1, 2):
        layer += 1
        x = nn.relu(nn.Conv(filters, (3, 3), strides=(stride, stride), padding="SAME",
                            name=f"conv{layer}")(x))
      x = nn.Dropout(self.dropout, deterministic=not train)(x)
    x = nn.relu(nn.Conv(192, (3, 3), padding="VALID", name="conv7")(x))
    x = nn.relu(nn.Conv(192, (1, 1), name="conv8")(x))
    x = nn.Conv(self.classes, (1, 1), name="conv9")(x)
    return jnp.mean(x, axis=(1, 2))


class ImdbCNNLSTM(nn.Module):
  """The thesis' IMDB model, a 1-D CNN and an LSTM: 402,701 weights.

  Thesis App. 8.3.1 (l.2221): "one embedding layer with an output size of 50
  (the vocabulary size is set to 5000 and the maximum length input to 400),
  followed by a convolution layer of one dimension with a kernel size of 5
  and 250 filters; and a max pooling layer of size 3; followed by a LSTM
  layer with an output size set to 70 and an output layer with one unit
  that uses a sigmoid activation function" (Keras' ``imdb_cnn_lstm``
  example). Token ids (batch, ``length``) int32, 0 the padding
  (``fedjax_dp.data.archives.load_imdb`` pads before the review) ->
  nn.Embed(vocab, 50) -> 1-D convolution of 250 filters of width 5, 'valid'
  as the Keras example, ReLU (400 -> 396) -> max pooling of size and stride
  3 (396 -> 132) -> LSTM of 70 units (``nn.RNN(nn.OptimizedLSTMCell(70))``,
  zero initial state, as :class:`CharLSTM`) -> Dense(1) of its last hidden
  state: the logit of a positive review (loss ``"sigmoid_ce"``).

  Weights: embedding 5,000 * 50 = 250,000 + convolution 5 * 50 * 250 + 250
  = 62,750 + LSTM 4 * 70 * (250 + 70 + 1) = 89,880 + dense 71 = 402,701,
  the thesis' count. The gates are logistic sigmoids (flax's; Keras 2.2's
  default recurrent activation was the hard sigmoid, which the seed does
  not mention); flax's default initialisers. No dropout.

  Attributes:
    vocab: Vocabulary size (token ids in [0, vocab)).
    length: Tokens per review (the input's second axis).
    embed: Embedding dimension.
    filters: Convolution filters.
    width: Convolution kernel width.
    pool: Max-pooling size (and stride).
    units: LSTM units.
  """

  vocab: int = IMDB_VOCAB
  length: int = IMDB_LENGTH
  embed: int = 50
  filters: int = 250
  width: int = 5
  pool: int = 3
  units: int = 70

  @nn.compact
  def __call__(self, tokens: jax.Array) -> jax.Array:
    if tokens.shape[1:] != (self.length,):
      raise ValueError(f"ImdbCNNLSTM reads (batch, {self.length}) tokens, got shape "
                       f"{tokens.shape}")
    h = nn.Embed(self.vocab, self.embed, name="embed")(tokens)
    h = nn.relu(nn.Conv(self.filters, (self.width,), padding="VALID", name="conv")(h))
    h = nn.max_pool(h, (self.pool,), strides=(self.pool,))
    h = nn.RNN(nn.OptimizedLSTMCell(self.units, name="lstm"))(h)
    return nn.Dense(1, name="dense")(h[:, -1])


# name -> (constructor, sample input batch) for benchmarks/models.py; the
# samples are NumPy arrays, so importing this module starts no JAX backend.
ZOO: dict[str, tuple[Callable[[], nn.Module], np.ndarray]] = {
    "mlp": (MLP, np.zeros((1, 28, 28, 1), np.float32)),
    "small-cnn": (SmallCNN, np.zeros((1, 28, 28, 1), np.float32)),
    "svhn-cnn": (SVHNCNN, np.zeros((1, 32, 32, 3), np.float32)),
    "lstm": (CharLSTM, np.zeros((1, SHAKESPEARE_WINDOW), np.int32)),
    "all-cnn-c": (AllCNNC, np.zeros((1, 32, 32, 3), np.float32)),
    "imdb-cnn-lstm": (ImdbCNNLSTM, np.zeros((1, IMDB_LENGTH), np.int32)),
    # The poster (l.107) names no model: this simulator's choice is the papers'
    # MNIST CNN with EMNIST ByClass' 62 outputs (fedjax_dp.models.emnist_cnn).
    "emnist-cnn": (functools.partial(PaperCNN, num_classes=62),
                   np.zeros((1, 28, 28, 1), np.float32)),
}

__all__ = ["AllCNNC", "CharLSTM", "IMDB_LENGTH", "IMDB_VOCAB", "ImdbCNNLSTM",
           "MLP", "SHAKESPEARE_VOCAB", "SHAKESPEARE_WINDOW", "SVHNCNN", "SmallCNN", "ZOO"]
