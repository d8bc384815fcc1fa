"""Data loading: verified MNIST / Fashion-MNIST idx files and federated splits.

:func:`partition` splits any in-memory data set over clients (IID, Dirichlet
label skew or label-sorted shards); :func:`from_client_indices` builds padded
client data from any grouping (padding rows are labelled ``PADDING_LABEL``).
:mod:`fedjax_dp.data.archives` reads SVHN, CIFAR-10, EMNIST (and TFF's federated
EMNIST by writer) and IMDB in their official formats, verified and downloaded
as the idx files are; :func:`load_shakespeare` builds LEAF-style Shakespeare
clients. :func:`load_medical_synth` generates (and caches) a synthetic stand-in for the
thesis' proprietary medical data (:mod:`fedjax_dp.data.medical`).
"""

from fedjax_dp.data import archives
from fedjax_dp.data.archives import (EMNIST_SUBSETS, IMDB_MAXLEN, IMDB_VOCAB_SIZE, WriterData,
                                     imdb_vocabulary, load_cifar10, load_emnist, load_femnist,
                                     load_imdb, load_svhn, tokenize)
from fedjax_dp.data.federated import (ClientData, FederatedData, as_float, holdout_indices,
                                      load_federated, load_federated_with_public, partition_iid,
                                      public_batch)
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
from fedjax_dp.data.medical import (MedicalSynth, MedicalSynthConfig, bayes_log_odds,
                                    load_medical_synth)
from fedjax_dp.data.partitioning import (PADDING_LABEL, client_sizes, from_client_indices,
                                         label_summary, partition, partition_indices)
from fedjax_dp.data.shakespeare import ShakespeareData, load_shakespeare

__all__ = [
    "EMNIST_SUBSETS",
    "IMDB_MAXLEN",
    "IMDB_VOCAB_SIZE",
    "WriterData",
    "archives",
    "imdb_vocabulary",
    "load_cifar10",
    "load_emnist",
    "load_femnist",
    "load_imdb",
    "load_svhn",
    "tokenize",
    "CHECKSUMS",
    "ClientData",
    "DATASETS",
    "SPLITS",
    "DataError",
    "PADDING_LABEL",
    "ShakespeareData",
    "FederatedData",
    "MedicalSynth",
    "MedicalSynthConfig",
    "as_float",
    "bayes_log_odds",
    "client_sizes",
    "data_dirs",
    "from_client_indices",
    "holdout_indices",
    "label_summary",
    "load_dataset",
    "load_federated",
    "load_federated_with_public",
    "load_medical_synth",
    "load_shakespeare",
    "locate",
    "parse_idx",
    "partition",
    "partition_indices",
    "partition_iid",
    "public_batch",
]
