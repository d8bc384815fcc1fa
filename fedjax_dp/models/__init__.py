"""Models as flat weight vectors: the seeds' models, by name (:data:`MODELS`).

The paper CNN, the medical MLP, Fed-SMP's Shakespeare LSTM and SVHN CNN, the
thesis' All-CNN-C (CIFAR-10) and IMDB CNN-LSTM, and this simulator's EMNIST
CNN; :func:`get_model` builds one by name, with dropout for the models that
take it (:data:`DROPOUT_MODELS`).
"""

import numpy as np
from flax import traverse_util

from fedjax_dp.models import zoo
from fedjax_dp.models.cnn import PaperCNN, paper_cnn
from fedjax_dp.models.flat import FlatModel
from fedjax_dp.models.flax_model import from_flax
from fedjax_dp.models.mlp import MedicalMLP, medical_mlp


def char_lstm() -> FlatModel:
  """Fed-SMP's Shakespeare model (Sec. 6.1): ``zoo.CharLSTM``, 817,872 weights.

  Reads int32 windows (batch, 80) of character indices and gives the logits
  of the next character (``fedjax_dp.data.shakespeare``).
  """
  return from_flax(zoo.CharLSTM(), np.zeros((1, zoo.SHAKESPEARE_WINDOW), np.int32),
                   name="lstm")


def svhn_cnn() -> FlatModel:
  """Fed-SMP's SVHN CNN (Sec. 6.1): ``zoo.SVHNCNN``, 3,431,754 weights.

  Reads (batch, 32, 32, 3) images in [0, 1]; 10 logits. Fast path.
  """
  return from_flax(zoo.SVHNCNN(), zoo.ZOO["svhn-cnn"][1], name="svhn-cnn")


def all_cnn_c(dropout: float = 0.0) -> FlatModel:
  """The thesis' CIFAR-10 model, ``zoo.AllCNNC``: 1,369,738 weights.

  Reads (batch, 32, 32, 3) images in [0, 1]; 10 logits.

  Args:
    dropout: Rate of the dropout after blocks 1 and 2 in local training
      (thesis App. 8.3.1: 0.5). 0, the default, trains on the fast path
      (``fedjax_dp.models.fast_train``); a positive rate gives the model a
      training-mode forward pass (``train_apply_fn``, the dropout drawn from
      the step's key), which the plain path trains; evaluation and the
      server's public-data steps run without dropout either way.

  Raises:
    ValueError: A rate outside [0, 1).
  """
  _check_dropout(dropout)
  sample = zoo.ZOO["all-cnn-c"][1]
  if dropout == 0:
    return from_flax(zoo.AllCNNC(), sample, name="all-cnn-c", fast=True)
  base = from_flax(zoo.AllCNNC(dropout), sample, name=f"all-cnn-c (dropout {dropout:g})",
                   fast=False)
  module = zoo.AllCNNC(dropout)

  def train_apply(params, x, key):
    variables = {"params": traverse_util.unflatten_dict(params, sep="/")}
    return module.apply(variables, x, train=True, rngs={"dropout": key})

  return FlatModel(base.name, base.shapes, base.init_fn, base.apply_fn, base.loss_name,
                   train_apply_fn=train_apply)


def imdb_cnn_lstm() -> FlatModel:
  """The thesis' IMDB model, ``zoo.ImdbCNNLSTM``: 402,701 weights, binary.

  Reads int32 reviews (batch, 400) of token ids in [0, 5000) (0 padding,
  ``fedjax_dp.data.archives.load_imdb``); one logit, loss ``"sigmoid_ce"``.
  Fast path (the LSTM through ``fedjax_dp.models.fast_scan``).
  """
  return from_flax(zoo.ImdbCNNLSTM(), zoo.ZOO["imdb-cnn-lstm"][1], loss="sigmoid_ce",
                   name="imdb-cnn-lstm")


def emnist_cnn() -> FlatModel:
  """EMNIST's CNN, this simulator's choice: 1,690,046 weights, 62 classes.

  The poster (l.107: EMNIST, 25 participants each holding the data of 50
  writers) names no model; this is the papers' MNIST CNN (:class:`PaperCNN`,
  thesis l.2215) with EMNIST ByClass' 62 outputs (10 digits, 26 upper- and
  26 lower-case letters): 832 + 51,264 + 1,606,144 + 31,806 weights. Reads
  (batch, 28, 28, 1) images in [0, 1]. Fast path.
  """
  return from_flax(PaperCNN(num_classes=62), zoo.ZOO["emnist-cnn"][1], name="emnist-cnn")


MODELS = {"cnn": paper_cnn, "mlp": medical_mlp, "lstm": char_lstm, "svhn-cnn": svhn_cnn,
          "all-cnn-c": all_cnn_c, "imdb-cnn-lstm": imdb_cnn_lstm, "emnist-cnn": emnist_cnn}

# The models whose builder takes a dropout rate (get_model's ``dropout``).
DROPOUT_MODELS = ("mlp", "all-cnn-c")


def _check_dropout(dropout: float) -> None:
  if not 0.0 <= dropout < 1.0:
    raise ValueError(f"dropout must be in [0, 1), got {dropout}")


def get_model(name: str, dropout: float = 0.0) -> FlatModel:
  """Returns the model called ``name`` (a key of :data:`MODELS`).

  Args:
    name: The model's name.
    dropout: Dropout rate in local training, for the models of
      :data:`DROPOUT_MODELS` ("mlp": after each hidden layer, "all-cnn-c":
      after blocks 1 and 2); 0, the default, for none.

  Raises:
    ValueError: An unknown name, a rate outside [0, 1), or a positive rate
      for a model without dropout.
  """
  if name not in MODELS:
    raise ValueError(f"unknown model {name!r}; choose one of {sorted(MODELS)}")
  _check_dropout(dropout)
  if name in DROPOUT_MODELS:
    return MODELS[name](dropout)
  if dropout > 0:
    raise ValueError(f"model {name!r} has no dropout (dropout {dropout:g}); only "
                     f"{', '.join(DROPOUT_MODELS)} take one")
  return MODELS[name]()


__all__ = ["DROPOUT_MODELS", "FlatModel", "MODELS", "MedicalMLP", "PaperCNN", "all_cnn_c",
           "char_lstm", "emnist_cnn", "from_flax", "get_model", "imdb_cnn_lstm",
           "medical_mlp", "paper_cnn", "svhn_cnn"]
