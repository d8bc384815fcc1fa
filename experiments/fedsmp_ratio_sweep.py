"""Fed-SMP: test accuracy against the compression ratio at a fixed epsilon.

The Fed-SMP paper (Sec. 6.3.2, Fig. 3; Tables IV-VII) finds that at a fixed
privacy level the accuracy of Fed-SMP first rises, then falls as the
compression ratio r = k/d grows: a small r loses information to
sparsification, a large r spreads the Gaussian noise over many coordinates
(its norm grows as sqrt(k) while the clipped signal stays at S).

For every scheme and ratio the noise multiplier is calibrated to the target:
the smallest sigma whose epsilon after the run's rounds, as its record
computes it (``fedjax_dp.simulation.record.calibrated_sigma``: the run's
accountant, sampler, ``--cycle-length`` and ``--max-cohort``), is at most
``--epsilon``. Under this accounting sigma does
not depend on r (the sparse update is clipped to S whatever k: sensitivity S,
Sec. 5.1), so each scheme gets one sigma for all its ratios; the script still
calibrates per ratio and runs each distinct sigma separately. The accountant
defaults to ``rdp`` (the paper used Opacus' RDP accountant, Sec. 6.2).

The clip norm S is one value for all ratios, as in the paper (Sec. 6.2:
one S tuned per data set): ``--clip S`` if given, else S is calibrated once
per scheme at r = ``--clip-at`` (default 1: the norm of one client-like
momentum-SGD update of the full model on the 1,000-example public set held
out for top_k, the simulator's rule of UAI Sec. 4; the same S for every
scheme). ``--clip-at each`` leaves S to sweep.py's per-ratio calibration
(for rand_k that S grows as sqrt(d/k), which cancels the noise reduction).

Every other option goes to ``experiments/sweep.py`` unchanged (rounds,
clients, local steps, ``--clip``, ``--momentum``, ``--server-steps``, ...;
the Fed-SMP presets apply where none is given). Example, reduced for a CPU:

  python experiments/fedsmp_ratio_sweep.py --epsilon 1 \\
      --ratios 0.005 0.01 0.05 0.1 0.5 1.0 --rounds 20 --clients-per-round 50 \\
      --local-steps 2 --server-steps 20 --eval-every 10 --out results/fedsmp_ratio

Writes ``table.md`` and ``table.json`` to ``--out`` (and each sweep's
results under ``--out/<scheme>``) and prints the table. ``--out`` is checked
before any run and held while the runs write (``fedjax_dp.runlock``); the
same command run again keeps the finished runs and continues an interrupted
one from its checkpoint, as ``sweep.py`` does. A ``--out`` holding the
records of another command (a table of other schemes, or a scheme's sweep
with other settings) is refused before any run, unless ``--overwrite``.
"""

import argparse
import json
import os
import pathlib
import sys
import time

from fedjax_dp import host_devices  # imports no JAX

host_devices.configure()  # one XLA CPU device per core, before JAX starts

from fedjax_dp import datasets, distributed, simulation  # noqa: E402
from fedjax_dp.cli import sweep as experiment  # noqa: E402
from fedjax_dp.atomic import atomic_file  # noqa: E402
from fedjax_dp import interrupts  # noqa: E402
from fedjax_dp.cli import types  # noqa: E402
from fedjax_dp.data import DataError, holdout_indices, load_dataset  # noqa: E402
from fedjax_dp.simulation import record  # noqa: E402
from fedjax_dp.schemes import fedsmp, get_scheme  # noqa: E402

RATIOS = (0.005, 0.01, 0.05, 0.1, 0.5, 1.0)
OWN = ("--ratio", "--noise-multiplier", "--target-epsilon", "--out", "--schemes",
       "--overwrite")
# sweep.py's options for several processes, refused here.
PROCESSES = ("--coordinator", "--num-processes", "--process-id")
PROG = "fedsmp_ratio_sweep.py"


class _Parser(argparse.ArgumentParser):
  def error(self, message):
    raise experiment.UsageError(message)


def build_parser() -> argparse.ArgumentParser:
  """The script's own options; the rest goes to sweep.py."""
  p = _Parser(prog="fedsmp_ratio_sweep.py", description=__doc__.split("\n\n")[0],
              allow_abbrev=False,
              epilog="Any other option is passed to experiments/sweep.py.")
  p.add_argument("--epsilon", type=types.finite("--epsilon"), default=1.0,
                 help="target epsilon after all rounds (default 1.0; Fed-SMP Table I: 1.01)")
  p.add_argument("--ratios", type=types.finite("--ratios"), nargs="+", default=list(RATIOS),
                 help="compression ratios r (default " + " ".join(map(str, RATIOS)) + ")")
  p.add_argument("--schemes", nargs="+", default=["Fed-SMP-randk", "Fed-SMP-topk"],
                 help="schemes (default Fed-SMP-randk Fed-SMP-topk; FedAvg-randk / "
                      "FedAvg-topk run as non-private baselines)")
  p.add_argument("--clip-at", default="1.0",
                 help="ratio at which S is calibrated once per scheme when --clip is not "
                      "given (default 1.0), or 'each' to calibrate at every ratio")
  p.add_argument("--out", default="results/fedsmp_ratio",
                 help="output folder (default results/fedsmp_ratio); the same command "
                      "run again keeps its finished runs, another one is refused there")
  p.add_argument("--overwrite", action="store_true",
                 help="replace the records of another command in --out")
  return p


def check_table(out: str, schemes: list[str]) -> None:
  """Refuses an ``out`` whose table.json is of other schemes (one line,
  ValueError); the sweeps' own folders are checked by ``check_records``."""
  path = pathlib.Path(out) / "table.json"
  if not path.exists():
    return
  try:
    theirs = {run["scheme"] for run in json.loads(path.read_text())["runs"]}
  except (OSError, ValueError, KeyError, TypeError):
    raise ValueError(f"--out {out} holds a table.json that is not this script's: choose "
                     "another --out, or add --overwrite to replace it") from None
  if theirs != set(schemes):
    raise ValueError(f"--out {out} holds the table of other schemes "
                     f"({', '.join(sorted(theirs))}): choose another --out, or add "
                     "--overwrite to replace it")


def _clip_at(value: str) -> float | None:
  if value == "each":
    return None
  try:
    ratio = float(value)
  except ValueError:
    raise ValueError(f"--clip-at takes a ratio or 'each', got {value!r}") from None
  if not 0.0 < ratio <= 1.0:
    raise ValueError(f"--clip-at must be in (0, 1], got {value}")
  return ratio


def sweep_request(forward: list[str], name: str, **overrides) -> experiment.Request:
  """sweep.py's sweep of one scheme, some of its flags replaced."""
  args = experiment.build_parser().parse_args(forward + ["--schemes", name])
  for key, value in overrides.items():
    setattr(args, key, value)
  return experiment.resolve(args)


def held_out_public(request: experiment.Request) -> tuple:
  """Fashion-MNIST's or MNIST's public set held out for top_k (the same whatever N)."""
  size = request.values["public_holdout"] or fedsmp.PUBLIC_HOLDOUT
  images, labels = load_dataset(request.dataset.name, "train", as_uint8=True)
  held = holdout_indices(len(images), size, request.seed)[0]
  return images[held].astype("float32") / 255.0, labels[held].astype("int32")


def _prepared(forward: list[str], name: str, ratio: float, data=None, **config):
  """The Plan of one scheme's run at one ratio, as sweep.py prepares it (same
  w0 and keys), ``config`` replaced; and its clients' data (loaded once:
  pass it back as ``data``)."""
  request = sweep_request(forward, name, ratio=[ratio])
  run = request.runs[0]
  fed = data or experiment.load_data(request, [run]).of(run)
  # Fashion-MNIST and MNIST serve the other one's images to the schemes without
  # a hold-out; the other data sets serve one public set to every scheme (the
  # public hospital, windows or images held out of the clients' data).
  other = request.dataset.public_source in datasets.DATASETS
  public = held_out_public(request) if other else fed.public
  _, plan = simulation.prepare(request.model, run.scheme, fed.data, public,
                               run.config.replace(**config))
  return plan, fed


def calibrate_clip(forward: list[str], name: str, ratio: float) -> float:
  """S of one scheme at one ratio by ``simulation.run``'s rule (same w0 and keys).

  Every scheme calibrates on the public set held out for top_k: at r = 1 all
  give the same S.
  """
  return _prepared(forward, name, ratio, clip_norm=None)[0].clip_norm


def calibrate(args, forward: list[str], name: str) -> list[tuple[float, float]]:
  """(ratio, sigma) for each ratio of one scheme: the smallest sigma whose
  epsilon, as the run's record computes it (its accountant, sampler, cycle
  length and cohort cap: ``simulation.record.calibrated_sigma``), meets
  --epsilon. S is left out (sigma multiplies whatever S), so none is
  calibrated here. A non-private baseline (FedAvg-randk, FedAvg-topk) gets
  none (None)."""
  if not get_scheme(name).dp:
    return [(ratio, None) for ratio in args.ratios]
  pairs, fed = [], None
  for ratio in args.ratios:
    plan, fed = _prepared(forward, name, ratio, fed, clip_norm=1.0)
    pairs.append((ratio, record.calibrated_sigma(plan, args.epsilon)))
  return pairs


def markdown(rows: list[dict], schemes: list[str], epsilon: float) -> str:
  """Accuracy against ratio, one column per scheme."""
  head = "| r | " + " | ".join(f"{s}: best acc (round) | σ | S | ε" for s in schemes) + " |"
  lines = [f"Target ε = {epsilon:g}", "", head,
           "|---|" + "---|---|---|---|" * len(schemes)]
  for ratio in sorted({r["ratio"] for r in rows}):
    cells = []
    for s in schemes:
      run = next((r for r in rows if r["scheme"] == s and r["ratio"] == ratio), None)
      if run is None:
        cells.append("- | - | - | -")
        continue
      eps = "N/A" if run["epsilon_final"] is None else f"{run['epsilon_final']:.2f}"
      clip = "N/A" if run["clip_norm"] is None else f"{run['clip_norm']:.3g}"
      cells.append(f"{run['best_accuracy']:.4f} ({run['best_round']}) | "
                   f"{run['noise_multiplier']:.3f} | {clip} | {eps}")
    lines.append(f"| {ratio:g} | " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
  """Calibrates sigma, runs the sweeps, writes the table; returns the exit code."""
  start = time.perf_counter()
  try:
    args, forward = build_parser().parse_known_args(argv)
    # Also abbreviations, which sweep.py's parser would expand (--noise for
    # --noise-multiplier).
    flags = [f.split("=")[0] for f in forward if f.startswith("--")]
    clash = [o for f in flags for o in OWN if o.startswith(f) and len(f) > 3]
    if clash:
      raise ValueError(f"{clash[0]} is set by this script (use --ratios, --epsilon, "
                       "--schemes, --out, --overwrite)")
    several = [o for f in flags for o in PROCESSES if o.startswith(f) and len(f) > 3]
    if several or os.environ.get(distributed.ENV["coordinator"]):
      raise ValueError(f"{(several or ['$' + distributed.ENV['coordinator']])[0]}: this "
                       "script runs in one process (several processes: "
                       "experiments/sweep.py)")
    if not args.epsilon > 0:
      raise ValueError(f"--epsilon must be > 0, got {args.epsilon}")
    if not any(f.split("=")[0] == "--accountant" for f in forward):
      forward = ["--accountant", "rdp"] + forward  # Fed-SMP Sec. 6.2: Opacus' RDP
    clip_at = _clip_at(args.clip_at)
    plans = {name: calibrate(args, forward, get_scheme(name).name) for name in args.schemes}
    given_clip = any(f.split("=")[0] == "--clip" for f in forward)
    clips = {}  # one S for every ratio of a scheme (Sec. 6.2)
    for name in args.schemes:
      scheme = get_scheme(name)
      if scheme.dp and not given_clip and clip_at is not None:
        clips[scheme.name] = calibrate_clip(forward, scheme.name, clip_at)
    out = pathlib.Path(args.out)
    sweeps = []  # each sweep's request, its runs validated before any run
    for name, pairs in plans.items():
      scheme = get_scheme(name).name
      sigmas = sorted({s for _, s in pairs})
      for i, sigma in enumerate(sigmas):
        sub = out / (scheme if len(sigmas) == 1 else f"{scheme}-sigma{i}")
        overrides = {"ratio": [r for r, s in pairs if s == sigma], "out": str(sub),
                     "overwrite": args.overwrite}
        if sigma is not None:
          overrides["noise_multiplier"] = sigma
        if scheme in clips:
          overrides["clip"] = clips[scheme]
        sweeps.append(sweep_request(forward, scheme, **overrides))
    experiment.check_out(args.out)  # before any run, not after all of them
    if not args.overwrite:
      check_table(args.out, [get_scheme(n).name for n in args.schemes])
    for request in sweeps:
      experiment.check_records(request)
    claim = experiment.claim_out(args.out)
  except (experiment.UsageError, ValueError, DataError) as e:
    print(f"fedsmp_ratio_sweep.py: error: {e}", file=sys.stderr)
    return 2
  except KeyboardInterrupt as e:
    print(f"{PROG}: interrupted; nothing written", file=sys.stderr)
    return interrupts.exit_code(e)
  with claim:
    code, rows = _run_held(sweeps, out)
  if code:
    return code
  schemes = [get_scheme(n).name for n in args.schemes]
  table = markdown(rows, schemes, args.epsilon)
  command = "python experiments/fedsmp_ratio_sweep.py " + " ".join(
      sys.argv[1:] if argv is None else argv)
  with atomic_file(out / "table.md", "w") as f:
    f.write(table + f"\nCommand: `{command}`\n")
  with atomic_file(out / "table.json", "w") as f:
    f.write(json.dumps({"epsilon": args.epsilon, "command": command, "forwarded": forward,
                        "clip_at": clip_at, "calibrated_clips": clips,
                        "seconds": time.perf_counter() - start, "runs": rows},
                       indent=2) + "\n")
  print(table, end="")
  print(f"\nwrote {out}/table.md, table.json", file=sys.stderr)
  return 0


def _run_held(sweeps: list[experiment.Request],
              out: pathlib.Path) -> tuple[int, list[dict]]:
  """:func:`main` once ``--out`` is held: (exit code, rows); a checkpoint of
  another run refused, an interruption said in sweep.py's one line."""
  try:
    try:
      check_checkpoints(sweeps)
    except (ValueError, DataError) as e:
      print(f"{PROG}: error: {e}", file=sys.stderr)
      return 2, []
    return 0, run_sweeps(sweeps)
  except KeyboardInterrupt as e:  # the run in progress, its checkpoint and round
    print(experiment.interrupted_line(PROG, str(out), e, None), file=sys.stderr)
    return interrupts.exit_code(e), []


def check_checkpoints(sweeps: list[experiment.Request]) -> None:
  """Refuses, before any run, a checkpoint in a sweep's folder that is another
  run's or version's (``sweep.saved_round``); a sweep's data is loaded only
  when its folder holds a checkpoint.

  Raises:
    ValueError: One line naming the file.
  """
  for request in sweeps:
    done = experiment.finished_runs(request)
    todo = [run for run in request.runs if (run.scheme.name, run.ratio) not in done
            and request.checkpoint_path(run).is_file()]
    if todo:
      experiment.check_checkpoints(request, todo, experiment.load_data(request, todo))


def run_sweeps(sweeps: list[experiment.Request]) -> list[dict]:
  """Runs every planned run not finished yet (a finished one is kept from its
  sweep's results.json, as sweep.py keeps it; an interrupted one continues
  from its checkpoint), writing each sweep's results after every run.

  Returns:
    Every run's record without its history, in the sweeps' order.
  """
  rows = []
  for request in sweeps:
    done = experiment.finished_runs(request)
    todo = [run for run in request.runs if (run.scheme.name, run.ratio) not in done]
    data = experiment.load_data(request, todo) if todo else None
    records = []
    for run in request.runs:
      key = (run.scheme.name, run.ratio)
      records += [done[key]] if key in done else experiment.execute(request, [run], data,
                                                                     prog=PROG)
      experiment.write(request, records)
    rows += [{k: v for k, v in run.items() if k != "history"} for run in records]
  return rows


if __name__ == "__main__":
  with interrupts.sigterm_as_interrupt():  # SIGTERM stops it as Ctrl-C does
    code = main()
  interrupts.end(code)
