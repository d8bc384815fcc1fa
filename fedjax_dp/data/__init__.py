"""Data loading: verified MNIST / Fashion-MNIST idx files and federated splits.

:func:`partition` splits any in-memory data set over clients.
"""

from fedjax_dp.data.federated import (ClientData, FederatedData, holdout_indices, load_federated,
                                      load_federated_with_public, partition_iid, public_batch)
from fedjax_dp.data.idx import (
    CHECKSUMS,
    DATASETS,
    SPLITS,
    DataError,
    data_dirs,
    load_dataset,
    locate,
    parse_idx,
)
from fedjax_dp.data.partitioning import partition

__all__ = [
    "CHECKSUMS",
    "ClientData",
    "DATASETS",
    "SPLITS",
    "DataError",
    "FederatedData",
    "data_dirs",
    "holdout_indices",
    "load_dataset",
    "load_federated",
    "load_federated_with_public",
    "locate",
    "parse_idx",
    "partition",
    "partition_iid",
    "public_batch",
]
