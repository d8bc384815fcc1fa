"""Every read of JAX internals in fedjax_dp, for jax 0.10.2 through 0.12.x.

The fast path (``fedjax_dp.models.fast_apply``, ``fast_scan``, ``fast_train``)
replays a model's jaxpr equation by equation and puts cohort-friendly ops in
place of some primitives. For that it reads what JAX does not promise to
keep: primitive names, equation parameters, the layout of a ``scan``'s
operands, how a jaxpr holds its constants. Those reads are all here, each a
small function that works on every JAX that ``pyproject.toml`` admits
(``jax>=0.10.2,<0.13``, tested on 0.10.2, 0.11.2 and 0.12.0.1). The rest of
the project calls only this module (``fedjax_dp.fast_prng`` and
``fedjax_dp.distributed`` included).

Where a JAX has moved something a reader needs, the reader raises
:class:`Unsupported` naming the primitive. The fast path then binds that
equation as it is, or trains the whole model on the plain path (``vmap`` of
the model's own ops), after one :class:`FastPathWarning` per primitive
(:func:`warn_fallback`): a new JAX may make training slower, never crash it.

What changed, read from the jax wheels' sources (``pip download --no-deps
jax==X``, ``jax/_src/lax/control_flow/loops.py``, ``jax/_src/core.py``):

* **0.11** (read at 0.11.2):

  - ``scan``'s ``num_consts`` and ``num_carry`` parameters are gone. The
    operands' layout is ``ft_in``, a ``jax._src.flattree.FlatTree`` packing
    (constants, carry, per-step inputs), and the outputs' is ``ft_out``
    (carry, per-step outputs); the ``len`` of each part is its count (as
    JAX's own Pallas lowerings read it). Reading ``num_consts`` crashed the
    fast path with ``KeyError: 'num_consts'`` (issue 47).
  - ``ClosedJaxpr`` is an alias of ``Jaxpr``: a jaxpr carries its constants
    (``.consts``; ``.constvars`` are the inputs with values attached,
    ``.invars`` the others) and ``.jaxpr`` returns the jaxpr itself. Scan's
    and jit's ``jaxpr`` parameters are such jaxprs.
  - ``closed_call`` (and ``call``) became aliases of one ``eval_jaxpr``
    primitive (body in ``call_jaxpr``); ``CallPrimitive`` left
    ``jax.extend.core``.
* **0.12** (read at 0.12.0.1): ``jax.extend.core.ClosedJaxpr`` is ``Jaxpr``
  under another name; the rest as in 0.11.
* Unchanged over the range: ``jit``'s ``jaxpr`` parameter, the parameters of
  ``dot_general`` (``dimension_numbers``, ``preferred_element_type``),
  ``conv_general_dilated`` and ``reduce_window_max``, ``Literal.val``,
  ``Primitive.get_bind_params`` (a ``(subfuns, params)`` pair before 0.7),
  ``jax.core.Tracer``, ``jax.sharding.get_abstract_mesh``, and the private
  names ``fast_prng`` and ``distributed`` use.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, NamedTuple, Sequence

import jax
from jax.extend import core as _jcore

# The equations' atoms: a variable, or a literal constant (its value in .val).
Var = _jcore.Var
Literal = _jcore.Literal

# Call-like primitives whose body the fast path evaluates through its own ops:
# jit ("pjit" before jax 0.7), closed_call/core_call (before 0.11) and
# eval_jaxpr (their one primitive from 0.11).
CALLS = ("jit", "pjit", "closed_call", "core_call", "eval_jaxpr")

# Failures of a read that mean "this JAX keeps it elsewhere".
_READ_ERRORS = (KeyError, AttributeError, TypeError, ValueError, IndexError)


class Unsupported(Exception):
  """A construct that the fast path cannot read on the JAX at hand.

  Attributes:
    primitive: The primitive's name.
    detail: What could not be read.
  """

  def __init__(self, primitive: str, detail: str):
    super().__init__(f"{primitive}: {detail}")
    self.primitive = primitive
    self.detail = detail


class FastPathWarning(UserWarning):
  """The fast path met a construct it does not know and fell back."""


_WARNED: set[str] = set()


def warn_fallback(error: Unsupported, fallback: str) -> None:
  """One :class:`FastPathWarning` per primitive and process.

  Args:
    error: What could not be read.
    fallback: What runs instead, e.g. "binding it unchanged".
  """
  if error.primitive in _WARNED:
    return
  _WARNED.add(error.primitive)
  warnings.warn(
      f"fedjax_dp's fast path does not know primitive {error.primitive!r} on jax "
      f"{jax.__version__} ({error.detail}); {fallback}. Training stays correct but may be "
      "slower; supported: jax>=0.10.2,<0.13 (fedjax_dp.jax_internals).",
      FastPathWarning, stacklevel=3)


def reset_warnings() -> None:
  """Forget which primitives were warned about (tests)."""
  _WARNED.clear()


# --- Jaxprs and their atoms -------------------------------------------------


def primitive_name(eqn) -> str:
  """The name of an equation's primitive."""
  return eqn.primitive.name


def is_var(atom) -> bool:
  """Whether a jaxpr atom is a variable (not a literal)."""
  return isinstance(atom, Var)


def read_atom(env: dict, atom):
  """An atom's value: a literal's own, a variable's from ``env``."""
  return atom.val if isinstance(atom, Literal) else env[atom]


def has_effects(eqn) -> bool:
  """Whether an equation has side effects (never hoisted out of a loop)."""
  return bool(eqn.effects)


def open_jaxpr(jaxpr) -> tuple[Any, Sequence[Any]]:
  """(open jaxpr, constant values) of a closed or open jaxpr.

  Before 0.11 a ``ClosedJaxpr`` wraps a ``Jaxpr`` (``.jaxpr``, ``.consts``);
  from 0.11 the ``Jaxpr`` holds its constants itself and ``.jaxpr`` is the
  same object. Either way the values bind ``jaxpr.constvars`` in order.
  """
  inner = getattr(jaxpr, "jaxpr", jaxpr)
  consts = getattr(jaxpr, "consts", ())
  if len(consts) != len(inner.constvars):
    raise Unsupported("jaxpr", f"{len(consts)} constants for {len(inner.constvars)} constvars")
  return inner, consts


def make_jaxpr(fn: Callable, *args):
  """``jax.make_jaxpr(fn)(*args)`` (public API; here to keep the jaxpr's reads together)."""
  return jax.make_jaxpr(fn)(*args)


def is_tracer(x) -> bool:
  """Whether x is a value of a trace in progress (a jaxpr closing over one
  belongs to that trace only)."""
  return isinstance(x, jax.core.Tracer)


def abstract_mesh():
  """The abstract mesh in force (``shard_map``'s manual axes type the values)."""
  return jax.sharding.get_abstract_mesh()


def bind(eqn, invals: Sequence[Any]) -> list:
  """An equation's primitive applied to ``invals``; always a list of outputs.

  Raises:
    Unsupported: The primitive's bind parameters cannot be rebuilt from the
      equation on this JAX.
  """
  name = primitive_name(eqn)
  try:
    params = eqn.primitive.get_bind_params(eqn.params)
  except (*_READ_ERRORS, NotImplementedError) as e:
    raise Unsupported(name, f"bind parameters: {type(e).__name__}: {e}") from e
  subfuns = ()
  if isinstance(params, tuple):  # jax < 0.7: (subfuns, params)
    subfuns, params = params
  out = eqn.primitive.bind(*subfuns, *invals, **params)
  return out if eqn.primitive.multiple_results else [out]


def _param(eqn, key: str, default: Any = KeyError):
  try:
    return eqn.params[key] if default is KeyError else eqn.params.get(key, default)
  except _READ_ERRORS as e:
    raise Unsupported(primitive_name(eqn), f"no parameter {key!r}") from e


# --- Call-like primitives ---------------------------------------------------


def call_body(eqn) -> tuple[Any, Sequence[Any]] | None:
  """(open jaxpr, constants) of a call-like equation's body, or None.

  ``jit``/``pjit`` keep it in ``jaxpr``; ``closed_call``, ``core_call`` and
  (from 0.11) ``eval_jaxpr`` in ``call_jaxpr``. Its inputs are the
  equation's operands, its outputs the equation's.
  """
  name = primitive_name(eqn)
  if name not in CALLS:
    return None
  key = "jaxpr" if name in ("jit", "pjit") else "call_jaxpr"
  body, consts = open_jaxpr(_param(eqn, key))
  if len(body.invars) != len(eqn.invars) or len(body.outvars) != len(eqn.outvars):
    raise Unsupported(name, f"{key} does not match the equation's operands")
  return body, consts


# --- scan -------------------------------------------------------------------


class ScanLayout(NamedTuple):
  """A ``scan`` equation's body and how its operands split.

  Attributes:
    body: The loop body, an open jaxpr: inputs (constants, carry, per-step
      inputs), outputs (carry, per-step outputs).
    consts: Values of ``body.constvars``.
    num_consts: Loop-invariant operands.
    num_carry: Carried operands (and the body's first outputs).
    length: Trips.
    reverse: Whether it runs from the last step.
    unroll: Steps per trip of the lowered loop.
    split_transpose: JAX's experimental split of the transposed loop.
  """

  body: Any
  consts: Sequence[Any]
  num_consts: int
  num_carry: int
  length: int
  reverse: bool
  unroll: int
  split_transpose: bool


def scan_layout(eqn) -> ScanLayout:
  """A ``scan`` equation read as :class:`ScanLayout`.

  jax < 0.11: ``num_consts`` and ``num_carry`` parameters. jax >= 0.11:
  ``ft_in`` packs (constants, carry, per-step inputs) as three FlatTrees,
  whose lengths are the counts.
  """
  name = primitive_name(eqn)
  body, consts = open_jaxpr(_param(eqn, "jaxpr"))
  if "num_consts" in eqn.params:  # jax < 0.11
    num_consts, num_carry = _param(eqn, "num_consts"), _param(eqn, "num_carry")
  else:
    try:
      num_consts, num_carry, _ = (len(part) for part in _param(eqn, "ft_in").unpack())
    except (*_READ_ERRORS, AssertionError) as e:
      raise Unsupported(name, f"operand layout (ft_in): {type(e).__name__}: {e}") from e
  if not (isinstance(num_consts, int) and isinstance(num_carry, int) and
          len(body.invars) == len(eqn.invars) and
          num_consts + num_carry <= len(eqn.invars) and
          num_carry <= len(body.outvars) == len(eqn.outvars)):
    raise Unsupported(name, "operand counts do not match the body")
  return ScanLayout(body, consts, num_consts, num_carry, int(_param(eqn, "length")),
                    bool(_param(eqn, "reverse")), _param(eqn, "unroll", 1),
                    bool(_param(eqn, "_split_transpose", False)))


# --- dot_general, conv_general_dilated, reduce_window_max --------------------


class DotGeneral(NamedTuple):
  """A ``dot_general``'s contracting and batch axes (lhs, rhs) and output type."""

  contract: tuple[tuple[int, ...], tuple[int, ...]]
  batch: tuple[tuple[int, ...], tuple[int, ...]]
  preferred_element_type: Any


def dot_general(eqn) -> DotGeneral:
  """A ``dot_general`` equation's dimension numbers."""
  try:
    (c_lhs, c_rhs), (b_lhs, b_rhs) = _param(eqn, "dimension_numbers")
    contract = (tuple(c_lhs), tuple(c_rhs))
    batch = (tuple(b_lhs), tuple(b_rhs))
  except _READ_ERRORS as e:
    raise Unsupported(primitive_name(eqn), f"dimension_numbers: {e}") from e
  return DotGeneral(contract, batch, _param(eqn, "preferred_element_type", None))


class Conv(NamedTuple):
  """A ``conv_general_dilated``'s parameters.

  Attributes:
    specs: (lhs, rhs, out) dimension numbers: each a tuple of axis indices,
      (batch or out-features, features or in-features, *spatial).
  """

  window_strides: tuple[int, ...]
  padding: Any  # ((lo, hi), ...) or a string
  lhs_dilation: tuple[int, ...]
  rhs_dilation: tuple[int, ...]
  specs: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]
  feature_group_count: int
  batch_group_count: int
  precision: Any
  preferred_element_type: Any


def conv(eqn) -> Conv:
  """A ``conv_general_dilated`` equation's parameters."""
  try:
    lhs_spec, rhs_spec, out_spec = _param(eqn, "dimension_numbers")
    specs = (tuple(lhs_spec), tuple(rhs_spec), tuple(out_spec))
  except _READ_ERRORS as e:
    raise Unsupported(primitive_name(eqn), f"dimension_numbers: {e}") from e
  return Conv(tuple(_param(eqn, "window_strides")), _param(eqn, "padding"),
              tuple(_param(eqn, "lhs_dilation")), tuple(_param(eqn, "rhs_dilation")), specs,
              _param(eqn, "feature_group_count"), _param(eqn, "batch_group_count"),
              _param(eqn, "precision", None), _param(eqn, "preferred_element_type", None))


class ReduceWindow(NamedTuple):
  """A ``reduce_window_max``'s window."""

  window_dimensions: tuple[int, ...]
  window_strides: tuple[int, ...]
  padding: tuple[tuple[int, int], ...]
  base_dilation: tuple[int, ...]
  window_dilation: tuple[int, ...]


def reduce_window(eqn) -> ReduceWindow:
  """A ``reduce_window_max`` (or other reduce_window) equation's window."""
  return ReduceWindow(*(tuple(_param(eqn, k)) for k in ReduceWindow._fields))


# --- Elsewhere in fedjax_dp ---------------------------------------------------


def register_unrolled_threefry_for_cpu() -> bool:
  """Lowers ``threefry2x32`` on CPU as JAX lowers it on GPU (unrolled); True if it could.

  ``fedjax_dp.fast_prng`` calls it (JAX lowers the hash as a rolled loop on
  CPU). Reads ``jax._src.random.threefry2x32._threefry2x32_lowering_rule``
  and ``jax._src.interpreters.mlir.register_lowering`` (0.10.2-0.12.0.1);
  changes nothing and returns False where they are missing.
  """
  try:
    # pylint: disable=import-outside-toplevel,protected-access
    from jax._src.interpreters import mlir
    from jax._src.random import threefry2x32
    rule = threefry2x32._threefry2x32_lowering_rule
    primitive = threefry2x32.threefry2x32_p
  except (ImportError, AttributeError):
    return False
  mlir.register_lowering(primitive, rule, platform="cpu")
  return True


def distributed_client():
  """The coordination service's client that ``jax.distributed.initialize`` set.

  JAX exposes its key-value store only there
  (``jax._src.distributed.global_state.client``, 0.10.2-0.12.0.1).
  """
  from jax._src import distributed as jax_distributed  # pylint: disable=import-outside-toplevel
  return jax_distributed.global_state.client
