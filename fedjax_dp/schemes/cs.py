"""FL-CS, FL-FREQ and FL-RND (thesis Sec. 4.1.4-4.1.6, 5.3) with -DP variants.

All three send r*n values up and receive the full model down (thesis
Table 4.2 costs). Clients train T_gd SGD steps from the global model and
compress their update with a linear operator shared by every party:

* FL-CS (Alg. 4): the client sends C(delta), the first m/P DCT-II
  coefficients of each of P chunks of its shuffled update; the server keeps
  momentum and error feedback in the compressed domain and decodes with BPDN.
* FL-FREQ (Alg. 6): the same C; the server adds C^T(mean), the inverse DCT
  of the zero-padded mean (a low-pass filter), with no decoder.
* FL-RND (Alg. 5): the client sends its update on m random coordinates,
  drawn anew each round from a shared seed; the server adds the mean there.

A -DP variant clips the compressed vector to S and adds its noise share
(Algorithms 11-13, and UAI 2021 Alg. 3), through ``Scheme.privatize``
(``fedjax_dp.privacy.noise.privatize``). The
server keeps FL-CS's momentum u and error e in the compressed domain (size
m), exactly as Algorithms 4 and 11:

  u_t = rho u_{t-1} + y_t;  e_t = eta_G u_t + e_{t-1};  s_t = D(e_t);
  e_t <- e_t - C(s_t);      w_t = w_{t-1} + s_t,

with D the BPDN decoder of Eq. (2.4) solved by FISTA (``compression.fista``),
warm-started from the previous round's s.

FL-RND is the coordinate-subset pattern of ``schemes.coordinate_subset`` (a random
subset redrawn each round, all weights trained, no reset): the same algorithm
as UAI's FL-BAS-2, under the thesis' name.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, NamedTuple

import jax
import jax.numpy as jnp
import optax

from fedjax_dp import calibration, datasets, keys, options
from fedjax_dp.compression import dct_cs, fista
from fedjax_dp.errors import ConfigError
from fedjax_dp.models import FlatModel
from fedjax_dp.schemes.base import Family, LocalTraining, Scheme, SetupData, Traits
from fedjax_dp.schemes.coordinate_subset import MaskedScheme

RECONSTRUCTIONS = ("bpdn", "adjoint")


class CSState(NamedTuple):
  """The FL-CS / FL-FREQ server state.

  Attributes:
    op: The shared operator C (fixed permutation, chunking, DCT rows).
    u: The server optimiser's state: the (m,) momentum of the compressed
      domain (Alg. 4 line 9), as ``optax.trace``'s state.
    e: (m,) error-feedback vector, compressed domain (Alg. 4 lines 10, 12).
    s: (P, L) last decoded update in the operator's chunk domain (warm start).
    iterations: Decoder steps in the last round (int32).
    total_iterations: Decoder steps summed over all rounds (int32).
  """

  op: dct_cs.ChunkedDCT
  u: Any
  e: jax.Array
  s: jax.Array
  iterations: jax.Array
  total_iterations: jax.Array

  @property
  def momentum(self) -> jax.Array:
    """The (m,) momentum u of Alg. 4 line 9 (inside the optax state)."""
    return self.u[0].trace

  def with_momentum(self, momentum: jax.Array) -> "CSState":
    """This state with the momentum u replaced."""
    return self._replace(u=(self.u[0]._replace(trace=momentum),) + tuple(self.u[1:]))


@dataclasses.dataclass(frozen=True)
class CSScheme(Scheme):
  """FL-CS(-DP) or FL-FREQ(-DP): the chunked partial-DCT family.

  Defaults are the thesis' Fashion-MNIST setting (Table 8.4): P = 200,
  lambda = 1e-5, rho = 0.9, eta_G = 0.35, error feedback on.

  Attributes:
    name: Paper name.
    reconstruction: "bpdn" (FL-CS: momentum, error feedback, BPDN decoder) or
      "adjoint" (FL-FREQ: w += C^T(mean), Alg. 6).
    private: Clip the compressed update to S and add Gaussian noise shares.
    reference: Where the scheme is defined.
    chunks: P.
    lam: lambda of the BPDN decoder, Eq. (2.4).
    momentum: rho (FL-CS only).
    server_lr: eta_G (FL-CS only).
    error_feedback: Accumulate the reconstruction error (Alg. 4 line 12).
    decoder: "fista" or "ista".
    restart: FISTA with gradient restart (O'Donoghue & Candes, 2015).
    max_iters: Decoder step limit per round.
    tol: Decoder stops once the relative change of its iterate is <= tol.
    dct_method: "auto", "fft" or "matmul" (same operator; see dct_cs).
  """

  name: str
  reconstruction: str
  private: bool
  reference: str
  chunks: int = 200
  lam: float = 1e-5
  momentum: float = 0.9
  server_lr: float = 0.35
  error_feedback: bool = True
  decoder: str = "fista"
  restart: bool = False
  max_iters: int = 100
  tol: float = 1e-3
  dct_method: str = "auto"

  @property
  def traits(self) -> Traits:
    """m = r*n real values up, the full model down (thesis Table 4.2)."""
    return Traits(dp=self.private)

  def describe(self) -> dict:
    """The operator's chunks and DCT, and for FL-CS the server step and the
    BPDN decoder's settings, by their flags' names (FL-FREQ's adjoint
    reads neither)."""
    operator = {"chunks": self.chunks, "dct_method": self.dct_method}
    if self.reconstruction != "bpdn":
      return operator
    return {**operator, "server_momentum": self.momentum, "server_lr": self.server_lr,
            "cs_lambda": self.lam, "decoder": self.decoder, "decoder_restart": self.restart,
            "decoder_iters": self.max_iters, "decoder_tol": self.tol}

  def server_optimizer(self) -> optax.GradientTransformation:
    """FL-CS's server step on the mean: momentum rho, rate eta_G (Alg. 4 l. 9-10).

    ``u = rho u + y`` is ``optax.trace``; ``eta_G u`` is ``optax.scale``.
    """
    return optax.chain(optax.trace(decay=self.momentum), optax.scale(self.server_lr))

  def validate(self, num_params: int, ratio: float) -> None:
    """Raises ValueError (one line) for settings that cannot run.

    Checks P, r (at least one coefficient per chunk), lambda >= 0, the
    decoder settings, rho in [0, 1) and eta_G > 0.
    """
    if self.reconstruction not in RECONSTRUCTIONS:
      raise ValueError(f"unknown reconstruction {self.reconstruction!r}")
    dct_cs.coeffs_per_chunk(num_params, ratio, self.chunks)
    if self.dct_method not in dct_cs.METHODS:
      raise ValueError(f"unknown DCT method {self.dct_method!r}; choose one of "
                       f"{', '.join(dct_cs.METHODS)}")
    fista.check_params(self.lam, self.max_iters, self.tol, self.decoder)
    if not 0.0 <= self.momentum < 1.0:
      raise ConfigError("momentum", f"rho must be in [0, 1), got {self.momentum}")
    if not self.server_lr > 0:
      raise ConfigError("server_lr", f"eta_G must be > 0, got {self.server_lr}")

  def num_kept(self, num_params: int, ratio: float) -> int:
    """m = P * round(r n / P), the compressed length."""
    return self.chunks * dct_cs.coeffs_per_chunk(num_params, ratio, self.chunks)

  def num_downstream(self, num_params: int, ratio: float) -> int:
    """The full model goes down (thesis Table 4.2)."""
    return num_params

  def make_operator(self, key: jax.Array, num_params: int, ratio: float) -> dct_cs.ChunkedDCT:
    """The shared operator C from the setup key."""
    return dct_cs.make_operator(keys.purpose(key, keys.SETUP_PERMUTATION), num_params,
                                ratio, self.chunks, self.dct_method)

  def setup(self, data: SetupData) -> CSState:
    """Derives C from the shared seed; u = e = 0 (Alg. 4 line 2)."""
    n = data.w0.shape[0]
    self.validate(n, data.ratio)
    op = self.make_operator(data.key, n, data.ratio)
    m = op.num_values  # distinct buffers: the run loop donates the state
    u = self.server_optimizer().init(jnp.zeros((m,), jnp.float32))
    return CSState(op=op, u=u, e=jnp.zeros((m,), jnp.float32),
                   s=jnp.zeros(op.domain_shape, jnp.float32),
                   iterations=jnp.zeros((), jnp.int32),
                   total_iterations=jnp.zeros((), jnp.int32))

  def calibrate_clip(self, data: SetupData, state: CSState) -> float:
    """S = ||C(delta)|| of one public-data round from w0 (UAI Sec. 4)."""
    def message(train_key, op):
      w1 = data.local.train(data.model.loss, data.w0, data.public_x, data.public_y,
                            train_key)
      return op.encode(w1 - data.w0)

    return calibration.public_clip_norm(data.key, message, state.op)

  def round_plan(self, state: CSState, key: jax.Array, num_params: int,
                 num_kept: int) -> dct_cs.ChunkedDCT:
    """Every round shares the same operator (fixed shuffling, Sec. 4.1.4)."""
    return state.op

  def client_message(self, model: FlatModel, w: jax.Array, plan: dct_cs.ChunkedDCT,
                     x: jax.Array, y: jax.Array, key: jax.Array,
                     local: LocalTraining) -> jax.Array:
    """T_gd SGD steps, then C(delta) (Alg. 4 lines 16-18, Alg. 11 line 19)."""
    return plan.encode(local.update(model, w, x, y, key))

  def server_update(self, w: jax.Array, state: CSState, mean: jax.Array,
                    plan: dct_cs.ChunkedDCT) -> tuple[jax.Array, CSState]:
    """FL-CS: Alg. 4 / 11 lines 9-13; FL-FREQ: Alg. 6 / 13 lines 9-10."""
    op = state.op
    if self.reconstruction == "adjoint":
      return w + op.decode_adjoint(mean), state
    step, u = self.server_optimizer().update(mean, state.u)
    e = step + (state.e if self.error_feedback else 0.0)
    result = fista.solve_bpdn(op.forward, op.adjoint, e.reshape(op.chunks, op.coeffs),
                              state.s, self.lam, max_iters=self.max_iters, tol=self.tol,
                              mask=op.mask, solver=self.decoder, restart=self.restart)
    s = result.solution
    if self.error_feedback:
      e = e - op.forward(s).reshape(-1)
    new_state = CSState(op=op, u=u, e=e, s=s, iterations=result.iterations,
                        total_iterations=state.total_iterations + result.iterations)
    return w + op.from_chunks(s), new_state

  def diagnostics(self, state: CSState, rounds_done: int) -> dict:
    """The decoder's health after the last round.

    ``decoder_iterations`` (last round) and their mean over ``rounds_done``;
    ``error_norm`` = ||e|| (compressed domain) and ``update_norm`` = ||s||,
    the last decoded update. ||e|| stays at the decoder's residual when every
    compressed direction is reachable; it grows like a random walk when DP
    noise lands in directions no weight change produces (see ``dct_cs``).
    Reported by ``simulation.run`` in each history entry and in the record.
    """
    if self.reconstruction == "adjoint":
      return {}
    return {"decoder_iterations": int(state.iterations),
            "mean_decoder_iterations": int(state.total_iterations) / max(rounds_done, 1),
            "error_norm": float(jnp.linalg.norm(state.e)),
            "update_norm": float(jnp.linalg.norm(state.s))}


_THESIS_CS = "thesis Sec. 4.1.4 Alg. 4; DP: Sec. 5.3 Alg. 11"
_THESIS_FREQ = "thesis Sec. 4.1.5 Alg. 6; DP: Alg. 13"
_THESIS_RND = "thesis Sec. 4.1.5 Alg. 5; DP: Alg. 12 (= UAI FL-BAS-2)"

CS_SCHEMES = {
    s.name: s for s in (
        CSScheme("FL-CS", "bpdn", False, _THESIS_CS),
        CSScheme("FL-CS-DP", "bpdn", True, _THESIS_CS),
        CSScheme("FL-FREQ", "adjoint", False, _THESIS_FREQ),
        CSScheme("FL-FREQ-DP", "adjoint", True, _THESIS_FREQ),
        MaskedScheme("FL-RND", "random", True, False, False, _THESIS_RND),
        MaskedScheme("FL-RND-DP", "random", True, False, True, _THESIS_RND),
    )
}


_PAPER = CS_SCHEMES["FL-CS"]


def _compressive(scheme: Scheme) -> bool:
  """FL-CS(-DP) and FL-FREQ(-DP), which send DCT measurements (not FL-RND)."""
  return isinstance(scheme, CSScheme)


def _decoded(scheme: Scheme) -> bool:
  """FL-CS(-DP): the server's BPDN decoder and its momentum step (FL-FREQ
  adds the adjoint of the mean, Alg. 6 lines 9-10)."""
  return isinstance(scheme, CSScheme) and scheme.reconstruction == "bpdn"


# FL-CS / FL-FREQ options; defaults: thesis Table 8.4.
OPTIONS = (
    options.Option("chunks", int, _PAPER.chunks, "P, DCT chunks (default 200)",
                   applies_to=_compressive),
    options.Option("cs_lambda", options.number, _PAPER.lam,
                   "lambda of the BPDN decoder, thesis Eq. 2.4 (default 1e-5)", field="lam",
                   applies_to=_decoded),
    options.Option("server_momentum", options.number, _PAPER.momentum,
                   "FL-CS server momentum rho (default 0.9)", field="momentum",
                   applies_to=_decoded),
    options.Option("server_lr", options.number, None,
                   "FL-CS global learning rate eta_G (default 0.35; medical-synth 1.0, "
                   "UAI Table 5)", applies_to=_decoded),
    options.Option("decoder", str, _PAPER.decoder, "BPDN solver (default fista)",
                   choices=fista.SOLVERS, applies_to=_decoded),
    options.Option("decoder_restart", bool, False, "FISTA with gradient restart",
                   field="restart", applies_to=_decoded),
    options.Option("decoder_iters", int, _PAPER.max_iters,
                   "decoder steps per round at most (default 100)", field="max_iters",
                   applies_to=_decoded),
    options.Option("decoder_tol", options.number, _PAPER.tol,
                   "decoder stops when its iterate changes by <= this, relative "
                   "(default 1e-3)", field="tol", applies_to=_decoded),
    options.Option("dct_method", str, _PAPER.dct_method,
                   "DCT implementation, same operator (default auto)", choices=dct_cs.METHODS,
                   applies_to=_compressive),
)


def configure(scheme: Scheme, values: Mapping[str, Any]) -> Scheme:
  """FL-CS / FL-FREQ with the given options (FL-RND has none)."""
  if not isinstance(scheme, CSScheme):
    return scheme
  # eta_G: given, else the data set's (medical-synth: UAI Table 5), else the thesis'.
  server_lr = datasets.option_value(values, "server_lr", _PAPER.server_lr)
  return dataclasses.replace(
      scheme, chunks=values["chunks"], lam=values["cs_lambda"],
      momentum=values["server_momentum"], server_lr=server_lr, decoder=values["decoder"],
      restart=values["decoder_restart"], max_iters=values["decoder_iters"],
      tol=values["decoder_tol"], dct_method=values["dct_method"])


FAMILY = Family("FL-CS / FL-FREQ (defaults: thesis Table 8.4)", CS_SCHEMES,
                options=OPTIONS, configure=configure)
