"""The simulator: a jitted federated round, its features, the run loop and the record.

Modules:
  ``config``: :class:`RunConfig`, composed of small validated parts.
  ``round``: the round core (cohort, local training, privatisation, sum,
    server update), a pure function compiled over rounds.
  ``sums``: the server's sum (plain, secure, robust).
  ``setup``: the server's work before round 1 (:func:`prepare`).
  ``plan``: the run resolved once (:class:`Plan`), which the round reads.
  ``loop``: rounds between evaluations, checkpoints, :func:`run`.
  ``record``: the run's record.
The round's optional features (attacks, the canary audit, dropouts, adaptive
clipping) are ``fedjax_dp.features``.
"""

from fedjax_dp.data import ClientData
from fedjax_dp.simulation.config import (SELECTION_METRICS, Dropouts, Execution, Privacy,
                                         RunConfig, Secure, Training)
from fedjax_dp.simulation.loop import (Counters, Trained, evaluation_metrics, make_eval_fn,
                                       make_stream_fn, run, train_loop)
from fedjax_dp.simulation.record import Record, make_record, privacy_report
from fedjax_dp.simulation.plan import Communication, Plan
from fedjax_dp.simulation.round import (Aggregate, RoundInfo, RoundInputs, ServerState,
                                        add_aggregate_noise, client_noise, make_aggregate_fn, make_privatize_fn, make_round_fn,
                                        make_rounds_fn, make_train_fn, make_trainer,
                                        round_inputs, round_noise)
from fedjax_dp.simulation.setup import (AUTO_CHUNK, AUTO_CHUNK_ABOVE, CPU_CHUNK_PER_DEVICE,
                                        Prepared, communication, default_chunk, prepare,
                                        validate)

__all__ = [
    "AUTO_CHUNK", "AUTO_CHUNK_ABOVE", "Aggregate", "CPU_CHUNK_PER_DEVICE", "ClientData",
    "Communication", "Counters", "Dropouts", "Execution", "Plan", "Prepared", "Privacy", "Record",
    "RoundInfo", "RoundInputs", "RunConfig", "SELECTION_METRICS", "Secure",
    "ServerState", "Trained", "Training", "add_aggregate_noise", "client_noise", "communication",
    "default_chunk",
    "evaluation_metrics", "make_aggregate_fn", "make_eval_fn", "make_privatize_fn", "make_record",
    "make_round_fn", "make_rounds_fn", "make_stream_fn", "make_train_fn", "make_trainer",
    "prepare", "privacy_report", "round_inputs", "round_noise", "run", "train_loop", "validate",
]
