"""imdb: the thesis' IMDB reviews (Table 8.1), int32 token sequences.

The official archive (:mod:`fedjax_dp.data.archives`): 5,000 words, length
400 (never scaled), labels 0/1, split by partition, the CNN-LSTM in thesis
Table 8.1's setting (Adam). N = 999: one client's share, 25 reviews, is held
out of the training set as the server's public set for every scheme.
"""

from fedjax_dp.data import archives, settings
from fedjax_dp.data.sets import base

# Every scheme runs the base setting (thesis Table 8.1, the setting of every scheme the
# thesis runs here: FL-SIGN, FL-CS, FL-TOP, FL-STD).
SETTINGS = settings.DataSetting(
    settings.IMDB, "thesis Table 8.1 (IMDB: |D_k| 25, |B| 25, T_gd 5, T_cl 100, Adam 0.001); "
    "N = 999 and the public set this simulator's choice", {},
    value_sources=settings.IMDB_SOURCES)


def load(split: str, seed: int):
  """int32 tokens (thesis: 5,000 words, length 400), labels 0/1: never scaled."""
  del seed
  return archives.load_imdb(split)


DATASET = base.Dataset(
    name="imdb", model="imdb-cnn-lstm", settings=SETTINGS,
    federation=base.partition_federation, loader=load,
    files=base.archive_files(("imdb", "aclImdb_v1.tar.gz")),
    public_source="one client's share held out of the training set: 25 reviews "
                  "(this simulator's choice)",
    holds_out_public=True, num_classes=2,
    about="5,000 words, length 400 (CNN-LSTM, thesis Table 8.1; the official files, the "
          "public set held out of the training set)")
