"""Noise correlated across rounds: DP-FTRL by matrix factorization.

The server releases each round's sum of clipped updates x_t plus
``S sigma scale (C^{-1} z)_t`` with z_t ~ N(0, I) fresh every round (Kairouz
et al. 2021; Choquette-Choo et al. 2023): the model, a prefix sum of the
releases, then carries the noise ``C^{-1} z`` mixed by the strategy C, which
cancels much of it over the rounds, while the releases are a post-processing
of ``C x + S sigma scale z``, one Gaussian mechanism. The strategies and
their streaming inverses are jax-privacy's (``jax_privacy.matrix_factorization``):

* ``banded``: a column-normalized lower-triangular banded C with b bands,
  optimised for the prefix sums' mean squared error (``banded.optimize``).
  Each column has norm 1, and with participations at least b rounds apart
  (cyclic Poisson sampling over b groups, ``fedjax_dp.sampling``) the run is
  as private as ceil(T / b) Poisson-subsampled Gaussian steps (amplified
  banded MF, ``accounting.cyclic_epsilon_curve``); scale 1. One band is
  the identity: independent noise.
* ``blt``: a buffered linear Toeplitz C (McMahan et al. 2024;
  ``buffered_toeplitz.optimize`` for (k, b)-min-separation), its noise
  scaled by the strategy's min-separation sensitivity so that the whole run
  is one Gaussian release with noise multiplier sigma (no amplification).

The streaming inverse keeps a few model-sized buffers (b for banded, the
BLT's buffer count for blt) in the server state, so a run checkpoints and
resumes it exactly.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax_privacy.matrix_factorization import banded, buffered_toeplitz, sensitivity
from jax_privacy.matrix_factorization import toeplitz as toeplitz_lib

KINDS = ("independent", "banded", "blt")

# Strategy optimisation steps (jax-privacy's default is 100; 50 reach the
# optimum's mean squared error to about 1e-3 at T = 200 on a CPU in seconds).
OPTIMIZER_STEPS = 50


@dataclasses.dataclass(frozen=True, eq=False)
class Strategy:
  """A run's noise strategy: ``noise_t = scale * (C^{-1} z)_t``.

  Attributes:
    kind: One of ``KINDS`` but "independent".
    rounds: T, the rounds the strategy is built for.
    bands: b for banded; the buffers for blt.
    min_separation: The fewest rounds between two participations of a client.
    scale: Multiplies ``C^{-1} z`` (banded: 1; blt: its min-sep sensitivity,
      or 1 when Monte Carlo accounting counts C as it is).
    inverse: ``C^{-1}`` as jax-privacy's ``StreamingMatrix``.
    matrix: (T, T) C itself, unscaled (for the record and the tests).
    toeplitz: C is lower-triangular Toeplitz (Monte Carlo accounting needs
      it): :attr:`column` is its first column's non-zero head.
  """

  kind: str
  rounds: int
  bands: int
  min_separation: int
  scale: float
  inverse: Any
  matrix: np.ndarray
  toeplitz: bool = False

  @property
  def column(self) -> np.ndarray:
    """C's first column up to its last non-zero entry (a Toeplitz C is
    this column shifted down, column by column)."""
    col = self.matrix[:, 0]
    return col[:int(np.flatnonzero(col)[-1]) + 1]

  def init(self, num_params: int) -> Any:
    """The streaming inverse's state for (n,) noise vectors (round 1 next)."""
    return self.inverse.init_multiply(jax.ShapeDtypeStruct((num_params,), jnp.float32))

  def next(self, z: jax.Array, state: Any) -> tuple[jax.Array, Any]:
    """``(scale (C^{-1} z)_t, next state)`` from round t's fresh z_t."""
    out, state = self.inverse.multiply_next(z, state)
    return self.scale * out.astype(jnp.float32), state


@functools.lru_cache(maxsize=8)
def make_strategy(kind: str, rounds: int, bands: int, min_separation: int,
                  toeplitz: bool = False) -> Strategy:
  """The strategy of ``kind`` for T rounds whose participations are at least
  ``min_separation`` rounds apart.

  ``toeplitz``: for Monte Carlo accounting (``fedjax_dp.privacy.monte_carlo``),
  which counts C as it is: banded noise is jax-privacy's banded *Toeplitz*
  strategy (``toeplitz.optimize_banded_toeplitz``, first column of norm 1,
  not column-normalized) and BLT noise is not scaled by its sensitivity.

  Built once per process for each argument tuple (a BLT optimisation takes
  seconds to a minute on a CPU; a sweep or a table builds one per run): the
  strategy is immutable, its matrix read-only.

  Raises:
    ValueError: One line, for bands > min_separation (banded) or an unknown kind.
  """
  if kind == "banded" and toeplitz:
    coef = (np.ones(1) if bands == 1 else np.asarray(toeplitz_lib.optimize_banded_toeplitz(
        rounds, bands=min(bands, rounds), max_optimizer_steps=OPTIMIZER_STEPS), np.float64))
    coef = jnp.asarray(coef, jnp.float32)
    matrix = np.asarray(toeplitz_lib.materialize_lower_triangular(coef, rounds), np.float64)
    return Strategy(kind, rounds, len(coef), min_separation, 1.0,
                    toeplitz_lib.inverse_as_streaming_matrix(coef), _read_only(matrix), True)
  if kind == "banded":
    if not 1 <= bands <= min_separation:
      raise ValueError(f"banded noise needs 1 <= bands <= min_separation, got bands {bands} "
                       f"and min_separation {min_separation}")
    bands = min(bands, rounds)
    c = (banded.ColumnNormalizedBanded.default(rounds, bands) if bands == 1 else
         banded.optimize(rounds, bands=bands, max_optimizer_steps=OPTIMIZER_STEPS))
    return Strategy(kind, rounds, bands, min_separation, 1.0,
                    c.inverse_as_streaming_matrix(), _read_only(c.materialize()))
  if kind == "blt":
    participations = -(-rounds // min_separation)
    # jax-privacy asks for float64, which JAX without x64 truncates to float32
    # (and warns, three times a build). The float32 optimum matched float64's
    # at T = 200, min-separation 60: sensitivity 3.5521 both, summed-noise std
    # after T 23.61 against 23.60 S sigma (2026-11-28), so the warning is quieted.
    with warnings.catch_warnings():
      warnings.filterwarnings("ignore", message="Explicitly requested dtype float64",
                              category=UserWarning)
      blt = buffered_toeplitz.optimize(n=rounds, min_sep=min_separation,
                                       max_participations=participations)
      matrix = np.asarray(blt.materialize(rounds), np.float64)
      sens = float(sensitivity.get_min_sep_sensitivity_upper_bound(
          jnp.asarray(matrix), min_separation, participations))
    blt32 = buffered_toeplitz.BufferedToeplitz.build(
        buf_decay=np.asarray(blt.buf_decay), output_scale=np.asarray(blt.output_scale),
        dtype=jnp.float32)
    return Strategy(kind, rounds, len(blt.buf_decay), min_separation,
                    1.0 if toeplitz else sens, blt32.inverse_as_streaming_matrix(),
                    _read_only(matrix), toeplitz)
  raise ValueError(f"unknown noise {kind!r}; choose one of {KINDS[1:]}")


def _read_only(matrix) -> np.ndarray:
  out = np.array(matrix)  # a copy, its dtype kept
  out.flags.writeable = False
  return out


def noise_correlation(strategy: Strategy) -> np.ndarray:
  """(T, T) the covariance of the noise the rounds receive, ``scale^2 C^-1 C^-T``."""
  inv = np.linalg.inv(strategy.matrix)
  return strategy.scale ** 2 * inv @ inv.T


def prefix_noise_std(strategy: Strategy) -> np.ndarray:
  """(T,) the std of the summed noise after each round, per unit of S sigma
  (independent noise: sqrt(t))."""
  cov = noise_correlation(strategy)
  return np.sqrt(np.cumsum(np.cumsum(cov, axis=0), axis=1).diagonal())


__all__ = ["KINDS", "OPTIMIZER_STEPS", "Strategy", "make_strategy", "noise_correlation",
           "prefix_noise_std"]
