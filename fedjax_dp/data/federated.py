"""Federated IID partition of a data set and the server's public batch.

Follows the UAI 2021 FL-TOP paper: Appendix B splits the 60,000 Fashion-MNIST
training images IID over 6,000 clients holding 10 samples each (pixels scaled
to [0, 1]); Section 4 gives the server a public batch of 10 MNIST images.
The Fed-SMP paper (Sec. 6.1) instead holds 1,000 Fashion-MNIST training
examples out of the clients' data as the server's public set
(:func:`load_federated_with_public`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp.data.idx import load_dataset
from fedjax_dp.errors import ConfigError

__all__ = ["ClientData", "FederatedData", "as_float", "holdout_indices", "load_federated",
           "load_federated_with_public", "partition_iid", "public_batch"]


def as_float(x: jax.Array) -> jax.Array:
    """Examples as the model reads them: uint8 images scaled to [0, 1] (any
    other dtype unchanged)."""
    return x.astype(jnp.float32) / 255.0 if x.dtype == jnp.uint8 else x


class ClientData(NamedTuple):
    """Federated training data as dense device arrays indexed by client.

    What ``fedjax_dp.simulation.run`` and the round take.

    Attributes:
        x: (num_clients, samples, ...) examples; uint8 images are scaled to
            [0, 1] on the fly.
        y: (num_clients, samples) labels.
        feature_data: Data a round feature adds before the run, by the
            feature's kind (``Feature.client_data``): under ``"attack"``,
            an out-backdoor's (x, y) pool of source-class examples that only
            the colluding malicious clients hold; None: none.
    """

    x: jax.Array
    y: jax.Array
    feature_data: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class FederatedData:
    """Client data stacked into dense arrays.

    Images are kept as uint8 on purpose: 6,000 x 10 Fashion-MNIST images take
    47 MB instead of 188 MB as float32. The simulator scales them by 1/255 on
    the fly (UAI 2021 FL-TOP paper, Appendix B: pixels in [0, 1]).

    Attributes:
        x: uint8 images of shape ``(num_clients, samples_per_client, 28, 28, 1)``.
        y: int32 labels of shape ``(num_clients, samples_per_client)``.
    """

    x: np.ndarray
    y: np.ndarray

    def __post_init__(self):
        if self.x.dtype != np.uint8 or self.x.ndim != 5:
            raise ValueError(f"x must be uint8 of shape (clients, samples, H, W, C), "
                             f"got {self.x.dtype} {self.x.shape}")
        if self.y.dtype != np.int32 or self.y.shape != self.x.shape[:2]:
            raise ValueError(f"y must be int32 of shape {self.x.shape[:2]}, "
                             f"got {self.y.dtype} {self.y.shape}")

    @property
    def num_clients(self) -> int:
        """Number of clients."""
        return self.x.shape[0]

    @property
    def samples_per_client(self) -> int:
        """Number of samples held by each client."""
        return self.x.shape[1]


def iid_order(num_examples: int, total: int, seed: int) -> np.ndarray:
    """The first ``total`` of a ``default_rng(seed)`` shuffle of the examples."""
    return np.random.default_rng(seed).permutation(num_examples)[:total]


def partition_iid(images: np.ndarray, labels: np.ndarray, num_clients: int,
                  samples_per_client: int, seed: int) -> FederatedData:
    """Splits a data set IID over clients, without replacement.

    The samples are shuffled with ``np.random.default_rng(seed)`` and the first
    ``num_clients * samples_per_client`` are dealt out, so no sample is held by
    two clients. The paper's default (UAI 2021 FL-TOP paper, Appendix B) is
    6,000 clients x 10 samples, i.e. all 60,000 Fashion-MNIST training images.

    Args:
        images: uint8 images of shape ``(N, 28, 28, 1)``, e.g. from
            ``load_dataset(..., as_uint8=True)``.
        labels: Integer labels of shape ``(N,)``.
        num_clients: Number of clients, at least 1.
        samples_per_client: Samples per client, at least 1.
        seed: Seed of the shuffle.

    Returns:
        The partition as :class:`FederatedData`.

    Raises:
        ValueError: Non-uint8 images, mismatched lengths, a count below 1, or
            more samples requested than available.
    """
    if images.dtype != np.uint8:
        raise ValueError(f"images must be uint8 (use load_dataset(..., as_uint8=True)), "
                         f"got {images.dtype}")
    if len(images) != len(labels):
        raise ValueError(f"{len(images)} images but {len(labels)} labels")
    if num_clients < 1 or samples_per_client < 1:
        raise ValueError(f"num_clients ({num_clients}) and samples_per_client "
                         f"({samples_per_client}) must both be >= 1")
    total = num_clients * samples_per_client
    if total > len(images):
        raise ValueError(f"{num_clients} clients x {samples_per_client} samples = {total} "
                         f"exceeds the {len(images)} available samples")
    order = iid_order(len(images), total, seed)
    x = images[order].reshape(num_clients, samples_per_client, *images.shape[1:])
    y = np.asarray(labels)[order].astype(np.int32).reshape(num_clients, samples_per_client)
    return FederatedData(x=x, y=y)


def public_batch(size: int = 10, seed: int = 0,
                 dataset: str = "mnist") -> tuple[np.ndarray, np.ndarray]:
    """Draws the server's public batch (UAI 2021 FL-TOP paper, Section 4).

    The server holds a small batch of public data from a related distribution:
    by default 10 MNIST training images, distinct from the clients'
    Fashion-MNIST data.

    Args:
        size: Number of images, drawn without replacement.
        seed: Seed of ``np.random.default_rng`` used for the draw.
        dataset: Training split to draw from.

    Returns:
        ``(images, labels)``: float32 images ``(size, 28, 28, 1)`` in [0, 1]
        and int32 labels ``(size,)``.

    Raises:
        ValueError: ``size`` is below 1 or larger than the training split.
        DataError: The data files cannot be found or are corrupt.
    """
    images, labels = load_dataset(dataset, "train", as_uint8=True)
    if not 1 <= size <= len(images):
        raise ConfigError("public_size", f"must be in [1, {len(images)}] (drawn from the "
                          f"{dataset} training split), got {size}")
    idx = np.random.default_rng(seed).choice(len(images), size=size, replace=False)
    return images[idx].astype(np.float32) / np.float32(255.0), labels[idx].astype(np.int32)


def load_federated(dataset: str = "fashion-mnist", num_clients: int = 6000,
                   samples_per_client: int = 10, seed: int = 0
                   ) -> tuple[FederatedData, np.ndarray, np.ndarray]:
    """Loads a data set as federated training data plus a centralised test set.

    Defaults follow the UAI 2021 FL-TOP paper, Appendix B: Fashion-MNIST split
    IID over 6,000 clients x 10 samples; test pixels scaled to [0, 1].

    Args:
        dataset: ``"fashion-mnist"`` or ``"mnist"``.
        num_clients: Number of clients.
        samples_per_client: Samples per client.
        seed: Seed of the IID partition.

    Returns:
        ``(train, test_x, test_y)``: the uint8 :class:`FederatedData`, float32
        test images ``(10000, 28, 28, 1)`` in [0, 1] and int32 test labels.

    Raises:
        ValueError: Invalid partition sizes or unknown data set.
        DataError: The data files cannot be found or are corrupt.
    """
    train_x, train_y = load_dataset(dataset, "train", as_uint8=True)
    train = partition_iid(train_x, train_y, num_clients, samples_per_client, seed)
    test_x, test_y = load_dataset(dataset, "test")
    return train, test_x, test_y


def holdout_indices(num_examples: int, public_size: int,
                    seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices of a random public set and of the examples left for clients.

    Args:
        num_examples: Size of the training split.
        public_size: Examples to hold out.
        seed: Seed of the draw (``np.random.default_rng([seed, 1])``, a stream
            distinct from the partition's).

    Returns:
        ``(public, rest)``: disjoint index arrays covering ``range(num_examples)``;
        ``rest`` is sorted.
    """
    order = np.random.default_rng([seed, 1]).permutation(num_examples)
    return order[:public_size], np.sort(order[public_size:])


def load_federated_with_public(dataset: str = "fashion-mnist", num_clients: int = 6000,
                               samples_per_client: int = 9, public_size: int = 1000,
                               seed: int = 0
                               ) -> tuple[FederatedData, np.ndarray, np.ndarray,
                                          tuple[np.ndarray, np.ndarray]]:
    """Federated training data plus a public set held out of the same split.

    Fed-SMP paper (Hu, Gong, Guo), Sec. 6.1: for Fed-SMP-top_k, 1,000
    Fashion-MNIST training examples are drawn at random as the server's public
    set and the remaining 59,000 are partitioned over the 6,000 clients. The
    public examples are taken out *before* the partition, so no client holds
    any of them. With equal-sized client arrays 59,000 / 6,000 is not whole:
    the default keeps N = 6,000 (the sampling rate of the privacy analysis)
    and deals 9 examples to each.

    Args:
        dataset: ``"fashion-mnist"`` or ``"mnist"``.
        num_clients: Number of clients.
        samples_per_client: Samples per client.
        public_size: Size of the held-out public set (>= 1).
        seed: Seed of the hold-out draw and of the IID partition.

    Returns:
        ``(train, test_x, test_y, (public_x, public_y))``: as
        :func:`load_federated`, plus float32 public images in [0, 1] and
        int32 labels.

    Raises:
        ValueError: Invalid sizes, e.g. more client samples than remain after
            the hold-out.
        DataError: The data files cannot be found or are corrupt.
    """
    images, labels = load_dataset(dataset, "train", as_uint8=True)
    if not 1 <= public_size < len(images):
        raise ConfigError("public_size", f"must be in [1, {len(images) - 1}] (the "
                          f"{dataset} training split less one), got {public_size}")
    total = num_clients * samples_per_client
    if total > len(images) - public_size:
        raise ValueError(f"{num_clients} clients x {samples_per_client} samples = {total} "
                         f"exceeds the {len(images) - public_size} training samples left "
                         f"after holding out {public_size} public examples")
    public_idx, rest = holdout_indices(len(images), public_size, seed)
    train = partition_iid(images[rest], labels[rest], num_clients, samples_per_client, seed)
    public = (images[public_idx].astype(np.float32) / np.float32(255.0),
              labels[public_idx].astype(np.int32))
    test_x, test_y = load_dataset(dataset, "test")
    return train, test_x, test_y, public
