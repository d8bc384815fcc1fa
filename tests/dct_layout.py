"""The FL-CS chunk layout, written out independently of dct_cs (test helper)."""

import jax
import numpy as np


def real_positions(size, chunk_len):
  """Positions of a chunk's weights: its L - size zeros sit every (L // zeros)-th."""
  zeros = chunk_len - size
  if zeros == 0:
    return np.arange(chunk_len)
  stride = chunk_len // zeros
  padding = stride // 2 + stride * np.arange(zeros)
  return np.setdiff1d(np.arange(chunk_len), padding)


def chunk_columns(key, n, chunks):
  """Per chunk: the shuffled weight indices it holds, in order (thesis Sec. 4.1.4)."""
  perm = np.asarray(jax.random.permutation(key, n))
  sizes = n // chunks + (np.arange(chunks) < n % chunks)
  starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
  return [perm[starts[p]:starts[p] + sizes[p]] for p in range(chunks)]
