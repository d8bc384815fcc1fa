"""Bandwidth accounting (UAI 2021, Section 4.1).

The papers report the average cost per client up to the round of best
accuracy: ``Cost(KB) = values * 32 * Round * C / 8 / 1000`` where ``values``
is r*n for a compressed direction and n for a full model, 32 bits a value, and
C the fraction of clients sampled per round.
"""

from __future__ import annotations

BITS_PER_FLOAT = 32


def cost_kb(values: int, rounds: int, sampling_rate: float,
            bits_per_value: int = BITS_PER_FLOAT) -> float:
  """Average kilobytes sent per client over ``rounds`` rounds (UAI Sec. 4.1).

  Args:
    values: Values sent per participating client per round (K or n).
    rounds: Rounds counted (the paper uses the round of best accuracy).
    sampling_rate: C, the expected fraction of clients per round.
    bits_per_value: 32 for float32.

  Returns:
    ``values * bits * rounds * C / 8 / 1000``.

  FL-TOP at r = 1% of the paper CNN's 1,663,370 weights (K = 16,634
  values), best accuracy at round 200, C = 1%:

  >>> round(cost_kb(16_634, 200, 0.01), 2)
  133.07
  """
  if values < 0 or rounds < 0 or not 0.0 < sampling_rate <= 1.0:
    raise ValueError("values and rounds must be >= 0 and sampling_rate in (0, 1]")
  return values * bits_per_value * rounds * sampling_rate / 8 / 1000


def measured_cost_kb(values: int, participations: int, num_clients: int,
                     bits_per_value: int = BITS_PER_FLOAT) -> float:
  """Kilobytes per client actually sent: total over all participations / N.

  >>> measured_cost_kb(1000, participations=500, num_clients=100)
  20.0
  """
  return values * bits_per_value * participations / num_clients / 8 / 1000
