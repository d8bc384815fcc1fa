"""Data loading: verified MNIST / Fashion-MNIST idx files and federated splits."""

from fedjax_dp.data.federated import FederatedData, load_federated, partition_iid, public_batch
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

__all__ = [
    "CHECKSUMS",
    "DATASETS",
    "SPLITS",
    "DataError",
    "FederatedData",
    "data_dirs",
    "load_dataset",
    "load_federated",
    "locate",
    "parse_idx",
    "partition_iid",
    "public_batch",
]
