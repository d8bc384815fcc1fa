"""fedjax_dp: a JAX simulator of differentially private, bandwidth-efficient
federated learning.

The public API (what research code may import and rely on) is listed in
``docs/api.md``, section "Public API"; changes to it are in ``CHANGELOG.md``,
and an old spelling keeps working for one minor version with a
``DeprecationWarning`` (:mod:`fedjax_dp.deprecation`).
"""

# Kept equal to pyproject.toml's version by tests/test_public_api.py.
__version__ = "0.3.0"
