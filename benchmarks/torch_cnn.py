"""The paper CNN in PyTorch, for the benchmarks that time PyTorch beside us.

``throughput.py`` (its per-client loop and ``torch.func``) and
``pfl_worker.py`` (pfl-research's model, in pfl's own environment) both
train this class; it imports nothing of the project, so pfl's environment
can import it from this folder.
"""

from __future__ import annotations


def paper_cnn_class():
  """``nn.Module`` subclass: conv5x5x32 - pool - conv5x5x64 - pool - dense512 -
  dense10, 'same' padding, the features flattened in NHWC order as the JAX
  model does; 1,663,370 weights."""
  from torch import nn  # pylint: disable=import-outside-toplevel
  import torch.nn.functional as F  # pylint: disable=import-outside-toplevel

  class PaperCNN(nn.Module):
    """conv5x5x32 - pool - conv5x5x64 - pool - dense512 - dense10 ('same' padding)."""

    def __init__(self):
      super().__init__()
      self.conv1 = nn.Conv2d(1, 32, 5, padding=2)
      self.conv2 = nn.Conv2d(32, 64, 5, padding=2)
      self.dense1 = nn.Linear(3136, 512)
      self.dense2 = nn.Linear(512, 10)

    def forward(self, h):
      h = F.max_pool2d(F.relu(self.conv1(h)), 2)
      h = F.max_pool2d(F.relu(self.conv2(h)), 2)
      h = h.permute(0, 2, 3, 1).flatten(1)  # NHWC order, as the JAX model
      return self.dense2(F.relu(self.dense1(h)))

  return PaperCNN
