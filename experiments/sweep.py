"""Sweep DP / compressed federated learning schemes on Fashion-MNIST.

Example (UAI 2021 Table 1 at r = 0.5%, the paper's setting):

  python experiments/sweep.py --ratio 0.005 --out results/table1

Run ``python experiments/sweep.py --help`` for every option.
"""

from fedjax_dp import host_devices  # imports no JAX

host_devices.configure()  # one XLA CPU device per core, before JAX starts

from fedjax_dp import interrupts  # noqa: E402
from fedjax_dp.cli.sweep import main  # noqa: E402

if __name__ == "__main__":
  interrupts.end(main())
