"""Models as flat weight vectors: the paper CNN, the medical MLP, the Shakespeare LSTM."""

import numpy as np

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


MODELS = {"cnn": paper_cnn, "mlp": medical_mlp, "lstm": char_lstm}


def get_model(name: str) -> FlatModel:
  """Returns the model called ``name`` ("cnn", "mlp" or "lstm")."""
  if name not in MODELS:
    raise ValueError(f"unknown model {name!r}; choose one of {sorted(MODELS)}")
  return MODELS[name]()


__all__ = ["FlatModel", "MODELS", "MedicalMLP", "PaperCNN", "char_lstm", "from_flax",
           "get_model", "medical_mlp", "paper_cnn"]
