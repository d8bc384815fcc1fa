"""Clients/s of one process with N devices against N processes with one device.

The overhead of JAX's multi-process collectives (``fedjax_dp.distributed``:
gloo over TCP on CPU) against the in-process ones, on the same cohort split
the same way: layout ``1xN`` is one process with N XLA CPU devices, layout
``Nx1`` is N local processes joined by ``jax.distributed`` with one device
each. Both time the whole jitted round of ``--scheme`` (default FL-TOP-DP)
in the paper's Fashion-MNIST setting (``benchmarks/throughput.py``'s
``prepared_round``: paper CNN, 5 local steps of batch 10, a fixed cohort of
``--clients-per-round`` real clients), one round per call, best of
``--repeats`` calls after a first (compiling) one. The layouts run one after
the other, ``--alternations`` times (1xN, Nx1, 1xN, ...), so that the ratio
is measured side by side on a shared machine.

  python benchmarks/processes.py --clients-per-round 100 --repeats 3 --alternations 2

Prints one line per measurement and the ratios of the layouts' best
clients/s and best clients per CPU second (``--json``: one JSON line per
measurement, then the summary). CPU seconds are the user + system time of
every thread of every process of the layout during a timed round: on a
machine shared with other jobs, wall time also measures how much of the
cores each layout's threads won (N processes run N thread pools), CPU time
the work the layout did.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import traceback

from fedjax_dp import host_devices  # imports no JAX
from fedjax_dp.cli import types as flag_types  # imports no JAX

host_devices.configure()  # the worker's --cpu-devices, before JAX starts

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402

from fedjax_dp import distributed, keys, sharding, simulation  # noqa: E402
from fedjax_dp.cli import parser, resolve  # noqa: E402
from fedjax_dp.data import DataError, load_federated, public_batch  # noqa: E402
from fedjax_dp.models import paper_cnn  # noqa: E402
from fedjax_dp.schemes import get_scheme  # noqa: E402
from common import OneLineParser, timeout_seconds  # noqa: E402  (benchmarks/common.py)
from throughput import prepared_round, round_config  # noqa: E402  (benchmarks/throughput.py)

PROG = "benchmarks/processes.py"


def measure(args: argparse.Namespace) -> dict:
  """Times the whole round in this process (one of the run's processes)."""
  fed, _, _ = load_federated("fashion-mnist", args.num_clients, 10, seed=0)
  data = simulation.ClientData(jnp.asarray(fed.x), jnp.asarray(fed.y))
  model = paper_cnn()
  state, plan = prepared_round(model, args.scheme, data, public_batch(10, seed=0),
                               args.clients_per_round, args.ratio, None,
                               rounds=args.repeats + 1)
  state, data, run_key = sharding.replicate((state, data, plan.run_key), plan.mesh)
  rounds_fn = simulation.make_rounds_fn(model, plan, 1)
  times, cpu = [], []
  for t in range(1, args.repeats + 2):
    start, cpu_start = time.perf_counter(), time.process_time()
    state, _ = rounds_fn(state, data, run_key, jnp.int32(t))
    jax.block_until_ready(state)
    times.append(time.perf_counter() - start)
    cpu.append(time.process_time() - cpu_start)
  best = min(times[1:])
  # CPU seconds of a timed round, summed over the processes: the work done,
  # whatever share of a busy machine each layout's threads got.
  cpu_round = float(np.sum(multihost_utils.process_allgather(
      np.float32(np.mean(cpu[1:])))))
  recompiled = rounds_fn._cache_size() != 1  # pylint: disable=protected-access
  return {"scheme": plan.scheme.name, "processes": jax.process_count(),
          "devices": sharding.mesh_size(plan.mesh),
          "clients_per_round": args.clients_per_round,
          "clients_per_sec": args.clients_per_round / best, "round_seconds": best,
          "first_call_seconds": times[0], "cpu_seconds_per_round": cpu_round,
          "clients_per_cpu_second": args.clients_per_round / cpu_round,
          "recompiled": recompiled, "machine": host_devices.machine(),
          "load_average": round(os.getloadavg()[0], 2)}


def _worker(args: argparse.Namespace) -> int:
  """One process of a layout: joins the others, measures, process 0 prints."""
  try:
    distributed.initialize(resolve.processes(args), PROG)
  except ValueError as e:
    print(f"{PROG}: error: {e}", file=sys.stderr)
    return 2
  try:
    record = measure(args)
  except Exception as e:  # one process failing stops the others
    distributed.stop_if_another_failed()
    traceback.print_exc()
    distributed.abort(f"{type(e).__name__}: {e}", 1)
    raise
  if distributed.is_main():
    print(json.dumps(record), flush=True)
  return 0


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _layout(args: argparse.Namespace, processes: int) -> dict:
  """Runs one layout: ``processes`` processes sharing ``--devices`` devices."""
  common = [sys.executable, os.path.abspath(__file__), "--worker", "--scheme", args.scheme,
            "--clients-per-round", str(args.clients_per_round), "--ratio", str(args.ratio),
            "--num-clients", str(args.num_clients), "--repeats", str(args.repeats),
            host_devices.OPTION, str(args.devices // processes)]
  if processes > 1:
    common += ["--coordinator", f"127.0.0.1:{_free_port()}", "--num-processes",
               str(processes), "--process-timeout", str(args.timeout)]
  # This process's device count (XLA_FLAGS) would win over the workers' own.
  flags = [f for f in os.environ.get("XLA_FLAGS", "").split()
           if not f.startswith(host_devices.FLAG)]
  env = dict(os.environ, XLA_FLAGS=" ".join(flags))
  procs = [subprocess.Popen(common + (["--process-id", str(i)] if processes > 1 else []),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
           for i in range(processes)]
  outs = [p.communicate(timeout=args.timeout) for p in procs]
  failed = [i for i, p in enumerate(procs) if p.returncode != 0]
  if failed:
    raise RuntimeError(f"layout {processes}x{args.devices // processes}: process "
                       f"{failed[0]} failed: {outs[failed[0]][1].strip()[-2000:]}")
  record = json.loads(outs[0][0].strip().splitlines()[-1])
  return dict(record, layout=f"{processes}x{args.devices // processes}")


def _parser() -> argparse.ArgumentParser:
  p = OneLineParser(prog=PROG, description=__doc__.splitlines()[0])
  p.add_argument("--scheme", default="FL-TOP-DP")
  p.add_argument("--clients-per-round", type=flag_types.positive("--clients-per-round", int),
                 default=100)
  p.add_argument("--ratio", type=float, default=0.005)
  p.add_argument("--num-clients", type=flag_types.positive("--num-clients", int), default=6000,
                 help="Fashion-MNIST clients of 10 images (default 6000, UAI Table 5)")
  p.add_argument("--devices", type=int, default=2,
                 help="N: devices of both layouts (default 2)")
  p.add_argument("--repeats", type=flag_types.positive("--repeats", int), default=3,
                 help="timed rounds (best is kept)")
  p.add_argument("--alternations", type=flag_types.positive("--alternations", int), default=1,
                 help="times each layout runs, alternating (default 1)")
  p.add_argument("--timeout", type=flag_types.flagged("--timeout", timeout_seconds),
                 default=600, help="seconds per layout")
  p.add_argument("--json", action="store_true", help="JSON lines")
  p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
  p.add_argument(host_devices.OPTION,
                 type=flag_types.flagged(host_devices.OPTION, host_devices.parse_count),
                 default=None, help=argparse.SUPPRESS)
  parser.add_process_flags(p.add_argument_group("worker processes (set by the layouts)"))
  return p


def _check_ranges(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
  """Refuses, in one line naming the flag, --devices or --ratio out of its
  range (the counts are refused as they parse)."""
  if args.devices < 2:
    p.error(f"--devices must be >= 2 (two layouts of them), got {args.devices}")
  if args.devices > host_devices.MAX_COUNT:  # each worker's --cpu-devices
    p.error(f"--devices must be at most {host_devices.MAX_COUNT}, got {args.devices}")
  if not 0 < args.ratio <= 1:  # the scheme's config refuses it, without the flag's name
    p.error(f"--ratio must be in (0, 1], got {args.ratio}")


def main(argv: list[str] | None = None) -> int:
  p = _parser()
  args = p.parse_args(argv)
  if args.worker:
    return _worker(args)
  _check_ranges(p, args)
  try:  # here, in one line, rather than in every worker
    load_federated("fashion-mnist", args.num_clients, 10, seed=0)
    simulation.validate(round_config(args.clients_per_round, args.ratio, None,
                                     rounds=args.repeats + 1),
                        get_scheme(args.scheme), paper_cnn(), args.num_clients, 10,
                        keys.run_key(0))
  except (DataError, ValueError) as e:
    print(f"{PROG}: error: {e}", file=sys.stderr)
    return 2
  records = []
  for _ in range(args.alternations):
    for processes in (1, args.devices):
      try:
        record = _layout(args, processes)
      except (RuntimeError, subprocess.TimeoutExpired) as e:
        print(f"{PROG}: error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 1
      records.append(record)
      print(json.dumps(record) if args.json else
            f"{record['layout']}: {record['clients_per_sec']:.2f} clients/s "
            f"({record['round_seconds']:.2f} s a round, "
            f"{record['clients_per_cpu_second']:.2f} clients per CPU second, first call "
            f"{record['first_call_seconds']:.1f} s, load {record['load_average']})",
            flush=True)
  best = {r["layout"]: max(x["clients_per_sec"] for x in records if x["layout"] == r["layout"])
          for r in records}
  per_cpu = {r["layout"]: max(x["clients_per_cpu_second"] for x in records
                              if x["layout"] == r["layout"]) for r in records}
  one, many = f"1x{args.devices}", f"{args.devices}x1"
  summary = {"best_clients_per_sec": best, "ratio": best[many] / best[one],
             "best_clients_per_cpu_second": per_cpu,
             "cpu_ratio": per_cpu[many] / per_cpu[one],
             "machine": records[0]["machine"], "date": time.strftime("%Y-%m-%d %H:%M UTC",
                                                                     time.gmtime())}
  print(json.dumps(summary) if args.json else
        f"{many} / {one}: {summary['ratio']:.3f} in clients/s, {summary['cpu_ratio']:.3f} "
        f"in clients per CPU second ({records[0]['machine']})")
  return 0


if __name__ == "__main__":
  sys.exit(main())
