"""Malicious clients of thesis Chapter 6: settings, who attacks, poisoned data, metrics.

Threat model (thesis l.1614-1616): the adversary controls a fraction alpha
of the clients, their data and their local training; the server is honest,
and so is the DP noise of the honest clients. While the attackers add their
noise shares, the honest clients' epsilon is unchanged against an observer
of the model alone; the attackers know their shares, so against them the
honest clients keep only the honest shares, S sigma sqrt((|K| - M) / |K|)
with M attackers in the cohort. With ``--attackers-skip-noise`` that is all
the model carries, against anyone (the record's
``attack.honest_noise_multiplier``; docs/attacks.md).
The attacks (thesis Sec. 6.1, ``../shared/specs/attacks.md``):

* ``random-update`` (l.1626): each malicious client sends N(0, sigma_adv^2 I),
  sigma_adv = 200, every round; no collusion, no boosting.
* ``gradient-ascent`` (l.1632): the colluding attackers run the clients'
  local training on their pooled data ascending the loss instead of
  descending it ("w_l = w_{l-1} + eta_Adv grad f(U D_k; w)": T_gd steps, a
  mini-batch each, l.1683) and send eta_adv times that update. We read
  eta_adv as the boosting the thesis calls it (l.1653: "we use the boosting
  only with FL-STD, FL-CS and FL-TOP"; void under FL-SIGN's signs, l.1671)
  and take the steps at the clients' rate eta, every step's gradient at
  the received model w as the formula has it, so that for T_gd = 1 the
  attack is the sign inversion the thesis equates it with (l.1683), and
  for T_gd = 30 (Table 8.1) the update stays finite.
* ``in-backdoor`` (l.1640): malicious clients relabel their source-class
  examples to the target class, train on the pooled data and send eta_adv
  times the update (boosting, l.1647).
* ``out-backdoor`` (l.1641, l.1720): the source class is removed from every
  honest client's data and given, relabelled to the target class, to the
  malicious clients, who keep theirs relabelled too: "excluding all samples
  with digit '0' in all clients' training datasets ... and relabeled the
  samples with '0' to '1'" (l.1720); only they hold the class (l.1791). The
  taken examples join the colluding attackers' pooled data
  (:func:`out_backdoor_pool`).

Who attacks: a fixed pool of round(alpha N) malicious clients, drawn once
from the run's seed, holds the poisoned data (the thesis' colluding
"malicious nodes" are parties, l.1655). Each round either

* ``selection="cohort"`` (the default): the pool makes up a fraction alpha
  of every cohort (``fedjax_dp.sampling.PoolShare``): honest clients are
  sampled as without attackers among the honest ones, and the pool fills
  the share alpha. This is what the thesis implies: "the model fails to
  converge even if only 1% of all selected nodes are malicious at each
  round" (l.1795); or
* ``selection="fixed"``: the pool is sampled like every client, so a round
  holds alpha |K| of them only on average.

The two coincide for the backdoor setting (N = 10, C = 1, thesis Table 8.3).

Attackers enter the round through the scheme interface: an attacker's
message is the scheme's own ``client_message`` computed with an adversarial
model (:func:`adversarial_model`), whose local update is the attack's, so
every scheme encodes it as it encodes an honest update (a sign under
FL-SIGN, where boosting is void, thesis l.1671; DCT coefficients under
FL-CS). Every scheme's attackers are boosted by eta_adv: the thesis boosts
gradient ascent under FL-STD, FL-CS and FL-TOP (l.1653) and leaves FL-CS
unboosted only in its in-backdoor tables (Tab. 6.5, l.1737), which its
reproduction rows state with ``--boost 1``. In the
vmapped round each slot has a role; a malicious slot's message replaces
its honest one (``fedjax_dp.features.attack``). The attackers then privatize like
everyone else (clip, add their noise share), unless ``skip_noise``: then,
like the thesis' FL-SIGN-DP attackers (l.1789-1795), they send eta_adv
times their message, unclipped and without noise.

This module also holds the backdoor relabelling of a federation's labels
and the attack metrics (thesis Sec. 6.2: model accuracy, accuracy on the
attacked class, and attack accuracy, the share of source-class test images
classified as the target).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp import datasets, local_training, options, sampling
from fedjax_dp.errors import ConfigError
from fedjax_dp.options import setting
from fedjax_dp.data.partitioning import PADDING_LABEL
from fedjax_dp.models import FlatModel

ATTACKS = ("random-update", "gradient-ascent", "in-backdoor", "out-backdoor")
BACKDOORS = ("in-backdoor", "out-backdoor")
RANDOM_UPDATE_SIGMA = 200.0  # sigma_adv, thesis l.1626
SELECTIONS = ("cohort", "fixed")
POOL_TRAININGS = ("steps", "epochs")
METRICS = ("class_accuracy", "attack_accuracy", "main_accuracy")  # backdoors' extra metrics


def parse_class(text: str, dataset: str) -> int:
  """A class given by index (``5``) or by name (``Sandal``, case-insensitive):
  the data set's ``class_names`` and ``class_aliases``.

  Raises:
    ValueError: An unknown class (one line, listing the names).
  """
  known = datasets.get_dataset(dataset)
  names = known.class_names
  if not names:
    named = [d.name for d in datasets.DATASETS.values() if d.class_names]
    raise ValueError(f"backdoor classes are defined for {', '.join(named)}, not {dataset}")
  text = text.strip()
  lowered = [n.lower() for n in names]
  if text.lower() in lowered:
    return lowered.index(text.lower())
  if text.lower() in known.class_aliases:
    return known.class_aliases[text.lower()]
  if text.isdigit() and int(text) < len(names):
    return int(text)
  raise ValueError(f"unknown class {text!r} of {dataset}; use 0-{len(names) - 1} or one "
                   f"of {', '.join(names)}")


def parse_backdoor(text: str, dataset: str) -> tuple[int, int]:
  """``SRC:DST`` (``5:7``, ``Sandal:Sneaker``) as (source, target) indices.

  Raises:
    ValueError: Not of the form SRC:DST, an unknown class, or SRC = DST.
  """
  parts = text.split(":")
  if len(parts) != 2:
    raise ValueError(f"backdoor must be SRC:DST (e.g. 5:7 or Sandal:Sneaker), got {text!r}")
  source, target = (parse_class(p, dataset) for p in parts)
  if source == target:
    raise ValueError(f"backdoor source and target must differ, got {text!r}")
  return source, target


@dataclasses.dataclass(frozen=True)
class AttackConfig:
  """Who attacks and how.

  Attributes:
    kind: One of ``ATTACKS``.
    fraction: alpha in [0, 1), the share of malicious clients.
    boost: eta_adv >= 1, the boosting of gradient ascent's and the backdoors'
      updates.
    source: The backdoor's source class (backdoors only).
    target: The backdoor's target class (backdoors only).
    sigma: sigma_adv of ``random-update``.
    skip_noise: DP schemes: attackers send eta_adv times their message,
      neither clipped nor noised, instead of a privatized contribution (the
      FL-SIGN-DP attackers of thesis l.1789-1795: 5000 * sign); eta_adv then
      multiplies the message, not the update.
    selection: One of ``SELECTIONS`` (see the module docstring).
    pool_training: How long colluding attackers train on their pooled data:
      ``steps``, the clients' T_gd steps of |B|; ``epochs``, as many local
      epochs as an honest client makes over its |D_k| (:func:`pooled_steps`).
      The thesis' Alg. 2 (l.418) calls T_gd "local epochs", and each of its
      settings' T_gd is 5 epochs of |D_k| at |B| (Tables 8.1-8.3: 30 x 10 /
      60, 5 x 10 / 10, 3000 x 10 / 6000); it does not say which its pooled
      attackers ran.
  """

  kind: str = setting(dataclasses.MISSING, "the malicious clients' attack (default: none)",
                      name="attack", choices=ATTACKS)
  fraction: float = setting(dataclasses.MISSING, "alpha in [0, 1): a pool of round(alpha N) "
                            "malicious clients, drawn from the seed", options.number,
                            name="malicious_fraction")
  boost: float = setting(1.0, "eta_adv >= 1: the attackers' boosting of gradient ascent and "
                         "backdoors (void under FL-SIGN)", options.number)
  source: int | None = None
  target: int | None = None
  sigma: float = setting(RANDOM_UPDATE_SIGMA, "random-update: sigma_adv of each attacker's "
                         "N(0, sigma^2 I)", options.number, name="attack_sigma")
  skip_noise: bool = setting(
      False, "DP schemes: attackers send --boost times their message, unclipped and "
      "without their noise share (thesis l.1789-1795: FL-SIGN-DP attackers send 5000 * "
      "sign); the aggregate noise then falls below S*sigma unless --max-dropouts covers "
      "them", bool, name="attackers_skip_noise")
  selection: str = setting(
      "cohort", "cohort: the pool makes up alpha of every round's cohort (thesis l.1795); "
      "fixed: the pool is sampled like every client", name="malicious_selection",
      choices=SELECTIONS)
  pool_training: str = setting(
      "steps", "colluding attackers on their pooled data: steps, the clients' "
      "--local-steps; epochs, as many passes over the pool as a client makes over its own "
      "data (T_gd per client's worth of pooled examples; the thesis calls T_gd local "
      "epochs, Alg. 2)", choices=POOL_TRAININGS)

  def validate(self, num_classes: int = 10) -> None:
    """Raises ConfigError (one line, naming the field) for a bad setting."""
    checks = [
        (self.kind in ATTACKS, "attack",
         f"{self.kind!r} is unknown; choose one of {', '.join(ATTACKS)}"),
        (0.0 <= self.fraction < 1.0, "fraction", f"must be in [0, 1), got {self.fraction}"),
        (self.boost >= 1.0, "boost", f"must be >= 1, got {self.boost}"),
        (self.selection in SELECTIONS, "selection",
         f"{self.selection!r} is unknown; choose one of {', '.join(SELECTIONS)}"),
        (self.pool_training in POOL_TRAININGS, "pool_training",
         f"{self.pool_training!r} is unknown; choose one of {', '.join(POOL_TRAININGS)}"),
        (self.pool_training == "steps" or self.colluding, "pool_training",
         f"applies to colluding attacks, not {self.kind!r}"),
        (self.sigma > 0, "sigma", f"must be > 0, got {self.sigma}"),
    ]
    backdoor = self.kind in BACKDOORS
    classes = (self.source, self.target)
    checks += [
        (not backdoor or None not in classes, "attack",
         f"{self.kind} needs a source and a target class"),
        (backdoor or classes == (None, None), "attack", f"{self.kind} takes no backdoor classes"),
    ]
    if backdoor and None not in classes:
      checks += [(0 <= c < num_classes, name, f"class must be in [0, {num_classes}), got {c}")
                 for name, c in (("source", self.source), ("target", self.target))]
      checks.append((self.source != self.target, "target",
                     f"must differ from the source class, got {self.target}"))
    for ok, field, detail in checks:
      if not ok:
        raise ConfigError(field, detail)

  @property
  def colluding(self) -> bool:
    """Whether the attackers pool their data and send one update (l.1655)."""
    return self.kind != "random-update"


def pooled_steps(steps: int, pool_rows: int, client_rows: int) -> int:
  """Local steps of colluders training ``pool_training="epochs"``: T_gd for
  each client's worth of pooled rows (rounded up), so that they pass over
  their pool as many times as an honest client over its own rows. Rows are
  counted as stored, padding included (a partition with unequal clients
  pads each to the largest)."""
  return -(-steps * pool_rows // client_rows)


def num_malicious(num_clients: int, fraction: float) -> int:
  """round(alpha N), the size of the malicious pool."""
  return int(round(fraction * num_clients))


def malicious_set(key: jax.Array, num_clients: int, fraction: float) -> jax.Array:
  """(N,) bool: the pool of round(fraction * N) malicious clients.

  Drawn from ``key`` (the run's ``keys.MALICIOUS`` key): the data poisoning
  before the run and every round's roles agree.
  """
  chosen = jax.random.permutation(key, num_clients)[:num_malicious(num_clients, fraction)]
  return jnp.zeros(num_clients, bool).at[chosen].set(True)


def cohort_share(key: jax.Array, num_clients: int,
                 config: AttackConfig | None) -> sampling.PoolShare | None:
  """The pool as the sampler sees it: a share of every cohort under
  ``selection="cohort"``; None (sampled like everyone) otherwise."""
  if config is None or config.selection != "cohort":
    return None
  return sampling.PoolShare(malicious_set(key, num_clients, config.fraction), config.fraction)


def adversarial_model(model: FlatModel, config: AttackConfig, boost: float) -> FlatModel:
  """``model`` with the attack's local update (see the module docstring).

  * random-update: sigma_adv * N(0, I), whatever the data (no boosting);
  * gradient-ascent: ``boost`` times T_gd steps of the honest optimiser at
    the rate negated on the given, pooled, data, every step's gradient
    taken at the received model w (thesis l.1632, ``grad f(D; w)``;
    ``local_training.local_train(..., gradients_at_start=True)``): ascent
    steps that each climb from where the last one reached blow up to NaN
    within 10 steps of the paper CNN at eta 0.215, and T_gd is 30 in Table
    8.1's setting. At T_gd = 1 the two are one step;
  * backdoors: ``boost`` times the honest local update on the given
    (poisoned, pooled) data.

  Masked training (``grad_mask`` / ``only_indices``, FL-TOP's T) restricts
  the attack's update exactly as it restricts an honest one.
  """
  honest = model.local_update

  def local_update_fn(_, w, x, y, key, *, steps, batch_size, lr, grad_mask=None,
                      grad_indices=None, only_indices=False, momentum=None,
                      optimizer="sgd"):
    if config.kind == "random-update":
      update = config.sigma * jax.random.normal(key, w.shape, w.dtype)
      if grad_mask is not None:
        update = update * grad_mask
      return update[grad_indices] if only_indices else update
    if config.kind == "gradient-ascent":
      # SGD at rate -eta climbs the loss: w <- w + eta * grad f(B; w) (Adam at
      # -eta likewise steps up its moment estimate's direction).
      keyed = model.train_apply_fn is not None
      update = boost * (local_training.local_train(
          model.train_loss if keyed else model.loss, w, x, y, key, steps=steps,
          batch_size=batch_size, optimizer=local_training.optimizer(optimizer, -lr, momentum),
          grad_mask=grad_mask, loss_takes_key=keyed, gradients_at_start=True) - w)
      return update[grad_indices] if only_indices else update
    return boost * honest(w, x, y, key, steps=steps, batch_size=batch_size, lr=lr,
                          grad_mask=grad_mask, grad_indices=grad_indices,
                          only_indices=only_indices, momentum=momentum,
                          optimizer=optimizer)

  return dataclasses.replace(model, local_update_fn=local_update_fn)


def poison_labels(x: np.ndarray, y: np.ndarray, malicious: np.ndarray,
                  config: AttackConfig) -> tuple[np.ndarray, np.ndarray]:
  """The federation's (x, y) as a backdoor attack sees it.

  In-backdoor: malicious clients' source-class examples are relabelled to the
  target. Out-backdoor: the same, and every honest client's source-class
  examples are removed (its remaining examples move to the front, the freed
  rows become padding: all-zero, labelled ``PADDING_LABEL``; the attackers
  receive them, :func:`out_backdoor_pool`). Other attacks leave the data
  unchanged.

  Args:
    x: (N, D, ...) the clients' examples.
    y: (N, D) their labels (``PADDING_LABEL`` on padding rows).
    malicious: (N,) bool.
    config: The attack.

  Returns:
    New (x, y) arrays; the inputs are not modified.
  """
  if config.kind not in BACKDOORS:
    return x, y
  x, y = np.array(x), np.array(y)
  source = y == config.source
  y[malicious[:, None] & source] = config.target
  if config.kind == "out-backdoor":
    drop = ~malicious[:, None] & source
    for k in np.flatnonzero(drop.any(axis=1)):
      keep = np.flatnonzero((y[k] != PADDING_LABEL) & ~drop[k])
      rows = len(keep)
      x[k, :rows], y[k, :rows] = x[k, keep], y[k, keep]
      x[k, rows:], y[k, rows:] = 0, PADDING_LABEL
  return x, y


def out_backdoor_pool(y: np.ndarray, malicious: np.ndarray,
                      config: AttackConfig) -> np.ndarray | None:
  """Where the examples an out-backdoor gives the attackers are: the
  (client, row) indices of every honest client's source-class example
  (thesis l.1720), in client then row order; None for other attacks.

  Their labels become the target class; :func:`poison_labels` removes
  them from the honest clients.
  """
  if config.kind != "out-backdoor":
    return None
  return np.argwhere(~np.asarray(malicious)[:, None] & (np.asarray(y) == config.source))


def attack_metrics(predictions: np.ndarray, labels: np.ndarray,
                   config: AttackConfig | None) -> dict:
  """Thesis Sec. 6.2's metrics of one evaluation.

  Returns:
    ``accuracy``; for a backdoor also ``class_accuracy`` (accuracy on the
    test images of the source class), ``attack_accuracy`` (the share of
    them predicted as the target class) and ``main_accuracy`` (accuracy on
    the other test images: the model accuracy of thesis Tables 6.7, 6.11
    and 6.12, whose 0.99 beside an attack accuracy of 0.99 cannot count the
    source class, 9.8% of MNIST's test images).
  """
  predictions, labels = np.asarray(predictions), np.asarray(labels)
  out = {"accuracy": float(np.mean(predictions == labels))}
  if config is not None and config.kind in BACKDOORS:
    source = labels == config.source
    out["class_accuracy"] = float(np.mean(predictions[source] == config.source))
    out["attack_accuracy"] = float(np.mean(predictions[source] == config.target))
    out["main_accuracy"] = float(np.mean(predictions[~source] == labels[~source]))
  return out
