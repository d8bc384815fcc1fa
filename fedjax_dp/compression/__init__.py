"""Linear compression operators, each an encode/decode pair of pure functions."""

from fedjax_dp.compression.masks import (compress, decompress, indices_to_mask,
                                         num_kept, random_indices, topk_indices)

__all__ = ["compress", "decompress", "indices_to_mask", "num_kept",
           "random_indices", "topk_indices"]
