"""Runs TREE/benchmarks/throughput.py with TREE's fedjax_dp (not the editable install)."""
import runpy
import sys

tree = sys.argv[1]
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
sys.path.insert(0, tree)
sys.path.insert(0, f"{tree}/benchmarks")
sys.argv = [f"{tree}/benchmarks/throughput.py", *sys.argv[2:]]
import fedjax_dp  # noqa: E402
assert fedjax_dp.__file__.startswith(tree), fedjax_dp.__file__
print("tree", fedjax_dp.__file__, file=sys.stderr)
runpy.run_path(sys.argv[0], run_name="__main__")
