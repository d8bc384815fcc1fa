"""Models as flat weight vectors: the paper CNN and the medical MLP."""

from fedjax_dp.models.cnn import paper_cnn
from fedjax_dp.models.flat import FlatModel
from fedjax_dp.models.mlp import medical_mlp

MODELS = {"cnn": paper_cnn, "mlp": medical_mlp}


def get_model(name: str) -> FlatModel:
  """Returns the model called ``name`` ("cnn" or "mlp")."""
  if name not in MODELS:
    raise ValueError(f"unknown model {name!r}; choose one of {sorted(MODELS)}")
  return MODELS[name]()


__all__ = ["FlatModel", "MODELS", "get_model", "medical_mlp", "paper_cnn"]
