"""The FL-CS operator: exact against scipy's DCT, linear, adjoint, validated."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.fft

import dct_layout

from fedjax_dp.compression import dct_cs

KEY = jax.random.PRNGKey(7)


def _reference(key, x, n, chunks, chunk_len, coeffs):
  """Shuffle, chunk (P near-equal pieces, zero-padded to L), DCT-II, keep mc."""
  mat = np.zeros((chunks, chunk_len))
  for p, cols in enumerate(dct_layout.chunk_columns(key, n, chunks)):
    mat[p, dct_layout.real_positions(cols.size, chunk_len)] = x[cols]
  return scipy.fft.dct(mat, type=2, norm="ortho", axis=1)[:, :coeffs].reshape(-1)


@functools.lru_cache(maxsize=None)
def _operator(n, chunks, ratio, pad, method):
  """``make_operator`` of a case, built once for the tests that share it."""
  return dct_cs.make_operator(KEY, n, ratio, chunks, method, pad)


# (n, P, r, pad to a fast length): uneven chunks, prime L, mc > L/2, r = 1.
CASES = [(1000, 10, 0.1, True), (1003, 7, 0.3, False), (997, 5, 0.9, False),
         (998, 4, 1.0, True), (50, 3, 0.7, False), (4001, 20, 0.005 * 20, True)]


@pytest.mark.parametrize("method", ["factored", "fft", "matmul"])
@pytest.mark.parametrize("n,chunks,ratio,pad", CASES)
def test_matches_scipy_dct_reference(n, chunks, ratio, pad, method):
  op = _operator(n, chunks, ratio, pad, method)
  x = np.random.default_rng(n).standard_normal(n)
  got = np.asarray(op.encode(jnp.asarray(x, jnp.float32)))
  want = _reference(KEY, x, n, chunks, op.chunk_len, op.coeffs)
  assert got.shape == (op.num_values,) == (chunks * op.coeffs,)
  np.testing.assert_allclose(got, want, atol=2e-6 * np.abs(want).max())


@pytest.mark.parametrize("method", ["factored", "fft", "matmul"])
def test_linear_so_secure_sums_commute(method):
  # thesis Sec. 2.3: sum_i C(x_i) = C(sum_i x_i).
  op = dct_cs.make_operator(KEY, 5000, 0.05, 10, method)
  xs = jax.random.normal(jax.random.PRNGKey(1), (8, 5000))
  sum_of_codes = jnp.sum(jax.vmap(op.encode)(xs), axis=0)
  np.testing.assert_allclose(sum_of_codes, op.encode(jnp.sum(xs, axis=0)),
                             atol=1e-4, rtol=1e-5)
  # float32: the operator's rounding is ~1e-7 of ||x|| (~70) per coefficient.
  np.testing.assert_allclose(op.encode(2.5 * xs[0]), 2.5 * op.encode(xs[0]), rtol=1e-5,
                             atol=1e-5)


@pytest.mark.parametrize("method", ["factored", "fft", "matmul"])
@pytest.mark.parametrize("n,chunks,ratio,pad", CASES)
def test_adjoint_identity(n, chunks, ratio, pad, method):
  # <C x, y> = <x, C^T y>, in float64 via numpy to keep the check tight.
  op = _operator(n, chunks, ratio, pad, method)
  rng = np.random.default_rng(0)
  x = rng.standard_normal(n).astype(np.float32)
  y = rng.standard_normal(op.num_values).astype(np.float32)
  lhs = np.dot(np.asarray(op.encode(jnp.asarray(x)), np.float64), y)
  rhs = np.dot(x, np.asarray(op.decode_adjoint(jnp.asarray(y)), np.float64))
  assert abs(lhs - rhs) <= 1e-5 * np.linalg.norm(x) * np.linalg.norm(y)


def test_full_ratio_is_orthonormal_and_chunks_round_trip():
  op = dct_cs.make_operator(KEY, 1000, 1.0, 10, "fft", pad_to_fast_length=False)
  assert op.coeffs == op.chunk_len == 100
  x = jax.random.normal(KEY, (1000,))
  np.testing.assert_allclose(op.decode_adjoint(op.encode(x)), x, atol=1e-5)
  np.testing.assert_allclose(op.from_chunks(op.to_chunks(x)), x)
  chunks = op.to_chunks(x)
  assert float(jnp.sum(jnp.abs(chunks) * (1 - op.mask))) == 0.0  # padding holds zeros
  assert int(op.mask.sum()) == 1000


@pytest.mark.parametrize("method", ["factored", "fft"])
@pytest.mark.parametrize("n,chunks,ratio,pad", CASES)
def test_mask_marks_exactly_the_slots_holding_a_weight(n, chunks, ratio, pad, method):
  op = _operator(n, chunks, ratio, pad, method)
  holds = np.asarray(op.gather).reshape(op.domain_shape) < n
  np.testing.assert_array_equal(np.asarray(op.mask) == 1, holds)
  np.testing.assert_array_equal(np.sort(np.asarray(op.gather)[holds.reshape(-1)]),
                                np.arange(n))  # a permutation of the weights


def test_rows_are_orthonormal_with_padding():
  # A A^T = I per chunk, hence a decoder step size of 1.
  op = dct_cs.make_operator(KEY, 1003, 0.25, 7, "matmul")
  gram = op.rows @ op.rows.T
  np.testing.assert_allclose(gram, np.eye(op.coeffs), atol=1e-5)


@pytest.mark.parametrize("ratio", [0.005, 0.05, 0.1, 0.2])
def test_every_compressed_direction_is_reachable_by_real_weights(ratio):
  # The paper CNN's chunks (8,316 or 8,317 weights in L = 8,400): the mc DCT
  # rows restricted to the slots that hold a weight, A_real, must keep
  # A_real A_real^T well-conditioned, or DP noise in its null directions is
  # never cancelled by a weight change (the FL-CS-DP collapse). Zeros in one
  # block at the chunk's end gave eigenvalues 1e-10 at r = 5%, 0 at 10-20%.
  op = dct_cs.make_operator(KEY, 1_663_370, ratio, 200, "matmul")
  rows, mask = np.asarray(op.rows, np.float64), np.asarray(op.mask)
  for p in (0, op.chunks - 1):  # 8,317 and 8,316 weights
    real = rows[:, mask[p] == 1]
    assert real.shape[1] == 8317 - p // (op.chunks - 1)
    assert np.linalg.eigvalsh(real @ real.T)[0] > 0.75


def test_fft_and_matmul_paths_agree_at_paper_chunk_shape():
  n = 200 * 517  # P = 200 chunks as in the paper, smaller chunks
  x = jax.random.normal(KEY, (n,))
  a = dct_cs.make_operator(KEY, n, 0.05, 200, "fft")
  b = dct_cs.make_operator(KEY, n, 0.05, 200, "matmul")
  np.testing.assert_allclose(a.encode(x), b.encode(x), atol=2e-5)
  y = a.encode(x)
  np.testing.assert_allclose(a.decode_adjoint(y), b.decode_adjoint(y), atol=2e-5)


def test_auto_method_and_shapes_for_the_paper_cnn():
  n = 1_663_370
  assert dct_cs.coeffs_per_chunk(n, 0.05, 200) == 416  # m = 83,200 ~ r n
  assert dct_cs.coeffs_per_chunk(n, 0.005, 200) == 42
  # At r = 1 no more than the smallest chunk's 8,316 weights (30 chunks hold
  # 8,316, 170 hold 8,317): m = 1,663,200 <= n, never above what FL-STD sends.
  assert dct_cs.coeffs_per_chunk(n, 1.0, 200) == n // 200 == 8316
  assert dct_cs.fast_length(-(-n // 200)) == 8400  # 8317 is prime
  assert dct_cs.fast_length(8400) == 8400 and dct_cs.fast_length(1) == 1


def test_every_compressed_direction_is_reachable_at_r_1():
  """Chunks of 50 and 51 weights (n = 305, P = 6; r n / P = 50.8): mc is at
  most 50, so C (m x n) has full row rank and no compressed direction is out
  of the weights' reach (with 51 coefficients a chunk of 50 weights has one,
  where FL-CS-DP's noise would pile up in the error feedback e, the
  mechanism of issue 14)."""
  op = dct_cs.make_operator(KEY, 305, 1.0, 6, "matmul")
  c = np.asarray(jax.vmap(op.encode)(jnp.eye(305))).T  # (m, n)
  assert c.shape == (6 * 50, 305)
  assert np.linalg.matrix_rank(c) == 6 * 50


def test_permutation_is_shared_through_the_seed():
  x = jax.random.normal(KEY, (3000,))
  a = dct_cs.make_operator(KEY, 3000, 0.1, 6)
  b = dct_cs.make_operator(KEY, 3000, 0.1, 6)
  c = dct_cs.make_operator(jax.random.PRNGKey(8), 3000, 0.1, 6)
  np.testing.assert_array_equal(a.encode(x), b.encode(x))
  assert not np.allclose(a.encode(x), c.encode(x))


def test_operator_is_a_pytree_usable_under_jit():
  op = dct_cs.make_operator(KEY, 3000, 0.1, 6)
  x = jax.random.normal(KEY, (3000,))
  # jit fuses the products differently: float32 rounding, ~1e-6 of ||x|| (~55).
  np.testing.assert_allclose(jax.jit(lambda o, v: o.encode(v))(op, x), op.encode(x),
                             rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n,ratio,chunks,match", [
    (100, 0.5, 101, "exceeds the number of weights"),
    (1000, 0.005, 200, "fewer than one DCT coefficient per chunk"),
    (1000, 0.0, 10, "ratio must be in"),
    (1000, 1.5, 10, "ratio must be in"),
    (1000, 0.1, 0, "chunks must be >= 1"),
])
def test_bad_parameters_are_rejected(n, ratio, chunks, match):
  with pytest.raises(ValueError, match=match):
    dct_cs.make_operator(KEY, n, ratio, chunks)


def test_unknown_method_is_rejected():
  with pytest.raises(ValueError, match="unknown DCT method"):
    dct_cs.make_operator(KEY, 1000, 0.1, 10, "wavelet")


def test_auto_method_and_factor_choice():
  # Paper CNN, P = 200: L = 8400; r = 0.5% -> mc = 42, r = 5% -> mc = 416.
  assert dct_cs._auto_method(8400, 42) == "matmul"
  assert dct_cs._auto_method(8400, 416) == "factored"
  q = dct_cs.choose_factor(8400, 416)
  assert 8400 % q == 0 and 20 <= q <= 60  # ~sqrt(2 mc): both stages small
  assert dct_cs._auto_method(8419, 416) == "fft"  # prime L: no useful factor
  # Every coefficient has its own stage-2 slot.
  _, _, coef_slot, slot_coef = dct_cs._factored_weights(
      8400, 416, q, np.ones(416, complex))
  assert len(set(coef_slot.tolist())) == 416
  np.testing.assert_array_equal(slot_coef[coef_slot], np.arange(416))


def test_factor_must_divide_the_chunk_length():
  with pytest.raises(ValueError, match="must divide"):
    dct_cs.make_operator(KEY, 1000, 0.1, 10, "factored", factor=7)
