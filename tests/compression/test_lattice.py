"""Dithered lattice quantization and bzip2 coding (poster, seed 001, Alg. 1 lines 7-11).

Nearest-point search against brute force, the subtractive dither (a function
of its key only, uniform over the Voronoi cell), input-independent errors with
the predicted second moments (statistical tests that accept the true value
and reject one 10% off), and the bzip2 size of known streams.
"""

import bz2
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from fedjax_dp.compression import lattice as lat_lib
from fedjax_dp.compression import universal_coding as uc

SCALAR = lat_lib.make_lattice("scalar", 0.5)
HEX = lat_lib.make_lattice("hexagonal", 0.5)
Z = 4.5  # two-sided z threshold (p ~ 7e-6): the true value passes, 10% off fails


def _hex_points(a, b, step):
  a, b = np.broadcast_arrays(a, b)
  return step * np.stack([a + 0.5 * b, (math.sqrt(3) / 2) * b], axis=-1)


def test_scalar_nearest_point_is_rounding():
  x = jax.random.normal(jax.random.PRNGKey(0), (1001,)) * 3
  c = np.asarray(lat_lib.nearest_coordinates(x, SCALAR))
  np.testing.assert_array_equal(c, np.round(np.asarray(x) / 0.5))
  lat5 = lat_lib.make_lattice("scalar", 0.5, 5)  # L = 5: zero-padded to 1005
  assert lat_lib.nearest_coordinates(x, lat5).shape == (1005,)
  np.testing.assert_allclose(lat_lib.nearest_point(x, lat5), 0.5 * c, atol=1e-6)


def test_hexagonal_nearest_point_matches_brute_force():
  step = 0.7
  lat = lat_lib.make_lattice("hexagonal", step)
  pts = np.asarray(jax.random.uniform(jax.random.PRNGKey(1), (4000, 2), minval=-9, maxval=9))
  coords = np.asarray(lat_lib.nearest_coordinates(jnp.asarray(pts.reshape(-1)), lat))
  coords = coords.reshape(-1, 2)
  found = _hex_points(coords[:, 0], coords[:, 1], step)
  np.testing.assert_allclose(np.asarray(lat_lib.decode(coords.reshape(-1), lat, 8000)),
                             found.reshape(-1), atol=1e-5)
  # Brute force over a window of +-4 basis steps around a rough guess.
  b0 = np.round(pts[:, 1] / (step * math.sqrt(3) / 2))
  a0 = np.round(pts[:, 0] / step - b0 / 2)
  off = np.arange(-4, 5)
  a = a0[:, None, None] + off[None, :, None]
  b = b0[:, None, None] + off[None, None, :]
  cand = _hex_points(a, b, step)  # (P, 9, 9, 2)
  best = np.min(np.sum((cand - pts[:, None, None, :]) ** 2, axis=-1), axis=(1, 2))
  mine = np.sum((found - pts) ** 2, axis=-1)
  np.testing.assert_allclose(mine, best, rtol=1e-5, atol=1e-9)
  assert np.all(mine <= (step / math.sqrt(3)) ** 2 + 1e-6)  # within the covering radius


def test_dither_comes_from_the_key_alone_and_fills_the_voronoi_cell():
  key = jax.random.PRNGKey(2)
  for lat in (SCALAR, HEX):
    u = lat_lib.dither(key, lat, 20_000)
    np.testing.assert_array_equal(u, lat_lib.dither(key, lat, 20_000))
    assert not np.allclose(u, lat_lib.dither(jax.random.PRNGKey(3), lat, 20_000))
    # Inside the cell: its nearest lattice point is the origin.
    assert not np.any(np.asarray(lat_lib.nearest_coordinates(u, lat)))
    # The decoder subtracts exactly that dither: Q(0 + u) - u = -u.
    x_hat = lat_lib.dequantize(lat_lib.quantize(jnp.zeros(20_000), key, lat), key, lat,
                               20_000)
    np.testing.assert_allclose(x_hat, -u, atol=1e-7)
  # Scalar dither is U[-Delta/2, Delta/2).
  u = np.asarray(lat_lib.dither(key, SCALAR, 20_000))
  assert stats.kstest(u, stats.uniform(-0.25, 0.5).cdf).pvalue > 1e-3
  assert stats.kstest(u, stats.uniform(-0.27, 0.54).cdf).pvalue < 1e-6  # 8% wider: not
  assert stats.kstest(u, stats.uniform(-0.23, 0.46).cdf).pvalue < 1e-6  # 8% narrower: not


def _errors(lat, x, seed):
  key = jax.random.PRNGKey(seed)
  n = x.shape[0]
  return np.asarray(lat_lib.dequantize(lat_lib.quantize(x, key, lat), key, lat, n) - x,
                    np.float64)


def test_quantization_error_is_independent_of_the_input():
  n = 40_000
  for lat in (SCALAR, HEX):
    inputs = [jnp.zeros(n), jnp.full((n,), 0.37 * lat.step),
              3 * lat.step * jax.random.normal(jax.random.PRNGKey(4), (n,))]
    errs = [_errors(lat, x, seed) for seed, x in zip((10, 11, 12), inputs)]
    for e in errs[1:]:
      assert stats.ks_2samp(errs[0], e).pvalue > 1e-3
    x = np.asarray(inputs[2])
    assert abs(np.corrcoef(x, errs[2])[0, 1]) < 4 / math.sqrt(n)
  # Without the dither the error at a fixed input is one constant (here -0.37 Delta).
  fixed = np.asarray(lat_lib.nearest_point(jnp.full((n,), 0.185), SCALAR)) - 0.185
  assert np.ptp(fixed) == 0 and fixed[0] == pytest.approx(-0.185)


def test_an_odd_hexagonal_vectors_last_value_has_the_same_error_whatever_it_is():
  """Its pair is (x_n, pad 0): both dithered, x_n's error has A2's per-value
  variance and one law whatever x_n (with the pad undithered it had 7/72
  Delta^2 at x_n = Delta / 2, 5/72 at 0)."""
  keys = jax.random.split(jax.random.PRNGKey(13), 40_000)

  def last_errors(value):
    x = jnp.full((3,), value * HEX.step)
    e = jax.vmap(lambda k: lat_lib.dequantize(lat_lib.quantize(x, k, HEX), k, HEX, 3) - x)(keys)
    return np.asarray(e[:, -1], np.float64)

  at0, at_half = last_errors(0.0), last_errors(0.5)
  assert stats.ks_2samp(at0, at_half).pvalue > 1e-3
  for e in (at0, at_half):
    assert abs(_z(e ** 2, HEX.error_variance)) < Z
  assert abs(_z(at_half ** 2, 7 / 5 * HEX.error_variance)) > Z


def _z(samples, claimed):
  return (np.mean(samples) - claimed) / (np.std(samples) / math.sqrt(samples.size))


def test_scalar_error_is_uniform_with_variance_delta_squared_over_12():
  e = _errors(SCALAR, 2.0 * jax.random.normal(jax.random.PRNGKey(5), (400_000,)), 6)
  assert np.max(np.abs(e)) <= 0.25 + 1e-6
  assert stats.kstest(e[:50_000], stats.uniform(-0.25, 0.5).cdf).pvalue > 1e-3
  true = 0.5 ** 2 / 12
  assert SCALAR.error_variance == pytest.approx(true)
  assert abs(_z(e ** 2, true)) < Z
  for wrong in (0.9 * true, 1.1 * true):
    assert abs(_z(e ** 2, wrong)) > Z


def test_hexagonal_error_has_the_a2_second_moment():
  """G(A2) = 5 / (36 sqrt 3): E||e||^2 / 2 = G vol, vol = sqrt(3)/2 Delta^2."""
  e = _errors(HEX, 2.0 * jax.random.normal(jax.random.PRNGKey(7), (800_000,)), 8)
  pairs = e.reshape(-1, 2)
  g_samples = np.sum(pairs ** 2, axis=1) / (2 * HEX.cell_volume)
  true = 5 / (36 * math.sqrt(3))
  assert HEX.normalized_second_moment == pytest.approx(true)
  assert HEX.error_variance == pytest.approx(5 * 0.5 ** 2 / 72)
  assert abs(_z(g_samples, true)) < Z
  for wrong in (0.9 * true, 1.1 * true, 1 / 12):  # 1/12: the square lattice's G
    assert abs(_z(g_samples, wrong)) > Z
  # Errors stay in the hexagon: within the covering radius Delta / sqrt(3).
  assert np.max(np.linalg.norm(pairs, axis=1)) <= 0.5 / math.sqrt(3) + 1e-6


def test_lattice_arguments_are_validated():
  with pytest.raises(ValueError, match="step must be > 0"):
    lat_lib.make_lattice("scalar", 0.0)
  with pytest.raises(ValueError, match="step must be > 0"):
    lat_lib.make_lattice("hexagonal", -1.0)
  with pytest.raises(ValueError, match="unknown lattice 'cubic'"):
    lat_lib.make_lattice("cubic", 1.0)
  with pytest.raises(ValueError, match="must be even"):
    lat_lib.make_lattice("hexagonal", 1.0, 5)
  assert lat_lib.make_lattice("hexagonal", 1.0, 4).dim == 4


def test_bzip2_size_of_known_streams():
  rng = np.random.default_rng(0)
  zeros = np.zeros(1_000_000, np.int32)
  size = uc.coded_size(zeros)
  assert size.raw_bits == 8_000_000 and size.bits_per_value < 0.001
  # The measure is the real bz2 output (level 9) plus one width byte.
  stream = rng.integers(-8, 8, 200_000)
  expected = 8 * (1 + len(bz2.compress(stream.astype(np.int8).tobytes(), 9)))
  size = uc.coded_size(stream, 100_000)
  assert size.coded_bits == expected and size.num_values == 100_000
  np.testing.assert_array_equal(uc.decode(uc.encode(stream)), stream)
  # 16 equiprobable symbols: 4 bits of entropy; bzip2 comes within a few %.
  size = uc.coded_size(stream)
  assert size.entropy_bits / stream.size == pytest.approx(4.0, abs=0.01)
  assert 4.0 <= size.bits_per_value < 4.25
  assert size.compression_factor == pytest.approx(32 / size.bits_per_value)
  # Random bytes do not compress.
  assert 7.95 < uc.coded_size(rng.integers(-128, 128, 200_000)).bits_per_value < 8.2
  # Wider integers get a wider fixed width (raw bits), still lossless.
  wide = np.array([0, 300, -2, 70_000])
  assert uc.coded_size(wide[:3]).raw_bits == 3 * 16
  assert uc.coded_size(wide).raw_bits == 4 * 32
  np.testing.assert_array_equal(uc.decode(uc.encode(wide)), wide)
  assert uc.empirical_entropy_bits(np.array([0, 1, 0, 1])) == pytest.approx(4.0)


def test_coded_gaussian_stream_is_near_its_entropy():
  """Dithered scalar quantization of N(0, 1) with Delta = 1/4: about 4.1 bits."""
  x = jax.random.normal(jax.random.PRNGKey(9), (300_000,))
  lat = lat_lib.make_lattice("scalar", 0.25, 5)
  coords = np.asarray(lat_lib.quantize(x, jax.random.PRNGKey(10), lat))
  size = uc.coded_size(coords, 300_000)
  h = size.entropy_bits / 300_000
  assert h == pytest.approx(math.log2(4 * math.sqrt(2 * math.pi * math.e)), abs=0.05)
  assert h <= size.bits_per_value < h + 0.45  # BWT + MTF + Huffman: ~0.3 bits over
  summary = uc.summarize([size, size])
  assert summary["coded_bits_per_value"] == pytest.approx(size.bits_per_value)
  assert summary["measured_streams"] == 2 and uc.summarize([])["compression_factor"] is None
