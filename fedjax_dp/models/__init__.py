"""Models as flat weight vectors: the paper CNN, the medical MLP, any flax module."""

from fedjax_dp.models.cnn import PaperCNN, paper_cnn
from fedjax_dp.models.flat import FlatModel
from fedjax_dp.models.flax_model import from_flax
from fedjax_dp.models.mlp import MedicalMLP, medical_mlp

MODELS = {"cnn": paper_cnn, "mlp": medical_mlp}


def get_model(name: str) -> FlatModel:
  """Returns the model called ``name`` ("cnn" or "mlp")."""
  if name not in MODELS:
    raise ValueError(f"unknown model {name!r}; choose one of {sorted(MODELS)}")
  return MODELS[name]()


__all__ = ["FlatModel", "MODELS", "MedicalMLP", "PaperCNN", "from_flax", "get_model",
           "medical_mlp", "paper_cnn"]
