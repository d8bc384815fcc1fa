"""The BPDN decoder: optimality (KKT), a slow float64 reference, warm start."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.fft

import dct_layout

from fedjax_dp.compression import dct_cs, fista

KEY = jax.random.PRNGKey(3)
N, CHUNKS, RATIO = 1003, 4, 0.2  # uneven chunks, L = 252 (padded), mc = 50


@pytest.fixture(scope="module", params=["factored", "fft"])
def problem(request):
  """An operator, a sparse signal, noisy measurements and the dense matrix."""
  op = dct_cs.make_operator(KEY, N, RATIO, CHUNKS, request.param)
  rng = np.random.default_rng(0)
  x = np.zeros(N)
  support = rng.choice(N, 40, replace=False)
  x[support] = rng.standard_normal(40)
  # Dense float64 matrix of C from scipy's DCT (independent of dct_cs).
  dct = scipy.fft.dct(np.eye(op.chunk_len), type=2, norm="ortho", axis=0)[:op.coeffs]
  mat = np.zeros((op.num_values, N))
  for p, cols in enumerate(dct_layout.chunk_columns(KEY, N, CHUNKS)):
    mat[p * op.coeffs:(p + 1) * op.coeffs, cols] = dct[:, dct_layout.real_positions(
        cols.size, op.chunk_len)]
  y = mat @ x + 0.01 * rng.standard_normal(op.num_values)
  return op, x, y, mat


def _solve(op, y, lam, init=None, **kw):
  init = jnp.zeros(op.domain_shape) if init is None else init
  fn = jax.jit(functools.partial(fista.solve_bpdn, op.forward, op.adjoint, **kw))
  return fn(jnp.asarray(y, jnp.float32).reshape(op.chunks, op.coeffs), init, lam,
            mask=op.mask)


def _reference_lasso(mat, y, lam, iters=100000):
  """Slow float64 FISTA (restarted) on the dense matrix, run to convergence."""
  step = 1.0 / np.linalg.norm(mat, 2) ** 2
  s = z = np.zeros(mat.shape[1])
  t = 1.0
  for _ in range(iters):
    v = z - step * mat.T @ (mat @ z - y)
    s_new = np.sign(v) * np.maximum(np.abs(v) - step * lam, 0.0)
    if np.dot(z - s_new, s_new - s) > 0:
      t = 1.0
    t_new = 0.5 * (1 + np.sqrt(1 + 4 * t * t))
    z = s_new + (t - 1) / t_new * (s_new - s)
    if np.max(np.abs(s_new - s)) < 1e-14:
      return s_new
    s, t = s_new, t_new
  return s


@pytest.mark.parametrize("solver,iters", [("fista", 3000), ("ista", 20000)])
@pytest.mark.parametrize("lam", [0.02, 0.002])
def test_solution_satisfies_kkt_conditions(problem, solver, iters, lam):
  op, _, y, mat = problem
  res = _solve(op, y, lam, max_iters=iters, tol=1e-7, solver=solver)
  s = op.from_chunks(res.solution)
  # Optimality of 1/2||y - A s||^2 + lam ||s||_1, checked on the dense matrix:
  g = mat.T @ (y - mat @ np.asarray(s, np.float64))
  nz = np.asarray(s) != 0
  assert nz.any() and (~nz).any()
  np.testing.assert_allclose(g[nz], lam * np.sign(np.asarray(s)[nz]), atol=0.02 * lam)
  assert np.all(np.abs(g[~nz]) <= lam * 1.02)
  # The library's own KKT measure agrees.
  viol = fista.kkt_violation(op.forward, op.adjoint,
                             jnp.asarray(y, jnp.float32).reshape(op.chunks, op.coeffs),
                             res.solution, lam, op.mask)
  assert float(viol) < 0.02 * lam


@pytest.mark.parametrize("restart", [False, True])
def test_matches_a_slow_float64_reference(problem, restart):
  op, _, y, mat = problem
  lam = 0.02
  want = _reference_lasso(mat, y, lam)
  g = mat.T @ (y - mat @ want)  # the reference itself is optimal
  assert np.all(np.abs(g) <= lam * (1 + 1e-6))
  # Without restart FISTA oscillates: a 1e-6 step change can stop it ~1e-3
  # away from the optimum, so ask for 1e-7.
  res = _solve(op, y, lam, max_iters=5000, tol=1e-7, restart=restart)
  got = np.asarray(op.from_chunks(res.solution))
  assert np.linalg.norm(got - want) <= 1e-3 * np.linalg.norm(want)
  np.testing.assert_array_equal(np.abs(got) > 1e-3, np.abs(want) > 1e-3)


def test_recovers_a_sparse_signal():
  # Easy case: one spike per chunk, 50 low-frequency measurements each.
  op = dct_cs.make_operator(KEY, N, RATIO, CHUNKS, "fft")
  rng = np.random.default_rng(0)
  x = np.zeros(N)
  x[rng.choice(N, 4, replace=False)] = [1.5, -1.2, 1.0, -1.8]
  y = op.encode(jnp.asarray(x, jnp.float32))
  res = _solve(op, y, 1e-3, max_iters=5000, tol=1e-6, restart=True)
  got = np.asarray(op.from_chunks(res.solution))
  assert np.linalg.norm(got - x) < 0.01 * np.linalg.norm(x)


def test_padding_stays_zero_and_iterations_are_reported(problem):
  op, _, y, _ = problem
  res = _solve(op, y, 0.01, max_iters=37, tol=0.0)
  assert int(res.iterations) == 37  # tol 0: exactly max_iters steps
  assert float(jnp.abs(res.solution * (1 - op.mask)).max()) == 0.0
  stopped = _solve(op, y, 0.01, max_iters=5000, tol=1e-3)
  assert 1 <= int(stopped.iterations) < 5000 and float(stopped.change) <= 1e-3


def test_warm_start_needs_fewer_iterations(problem):
  op, _, y, mat = problem
  first = _solve(op, y, 0.005, max_iters=5000, tol=1e-5)
  y2 = y + 1e-3 * np.random.default_rng(1).standard_normal(y.shape)  # next round
  cold = _solve(op, y2, 0.005, max_iters=5000, tol=1e-5)
  warm = _solve(op, y2, 0.005, init=first.solution, max_iters=5000, tol=1e-5)
  assert int(warm.iterations) < 0.5 * int(cold.iterations)
  def objective(res):
    s = np.asarray(op.from_chunks(res.solution), np.float64)
    return 0.5 * np.sum((y2 - mat @ s) ** 2) + 0.005 * np.abs(s).sum()
  assert abs(objective(warm) - objective(cold)) <= 1e-4 * objective(cold)


def test_fista_is_faster_than_ista_and_restart_faster_still(problem):
  op, _, y, _ = problem
  f = _solve(op, y, 0.002, max_iters=20000, tol=1e-5, solver="fista")
  r = _solve(op, y, 0.002, max_iters=20000, tol=1e-5, solver="fista", restart=True)
  i = _solve(op, y, 0.002, max_iters=20000, tol=1e-5, solver="ista")
  assert int(r.iterations) < int(f.iterations) < 0.5 * int(i.iterations)


def test_zero_measurements_stop_at_the_first_check(problem):
  op, _, _, _ = problem
  res = _solve(op, np.zeros(op.num_values), 1e-5, max_iters=100, tol=1e-3)
  # The tolerance is checked every second step.
  assert int(res.iterations) == 2 and float(jnp.abs(res.solution).max()) == 0.0


@pytest.mark.parametrize("solver", ["fista", "ista"])
def test_pairs_of_steps_equal_single_steps(problem, solver):
  # The loop runs two steps per trip, and one more for an odd budget: after
  # k steps it must hold the k-th iterate of the plain one-step recursion.
  op, _, y, _ = problem
  y = jnp.asarray(y, jnp.float32).reshape(op.chunks, op.coeffs)
  lam, s, z, t = 0.01, jnp.zeros(op.domain_shape), jnp.zeros(op.domain_shape), 1.0
  for k in range(1, 6):
    v = z + op.adjoint(y - op.forward(z))
    s_next = jnp.sign(v) * jnp.maximum(jnp.abs(v) - lam, 0.0) * op.mask
    t_next = 0.5 * (1 + np.sqrt(1 + 4 * t * t)) if solver == "fista" else 1.0
    z = s_next + ((t - 1) / t_next) * (s_next - s)
    s, t = s_next, t_next
    res = _solve(op, y, lam, max_iters=k, solver=solver)
    assert int(res.iterations) == k
    np.testing.assert_allclose(res.solution, s, atol=1e-6, rtol=1e-5)
