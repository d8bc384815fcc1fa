"""mnist: MNIST's idx files with the paper CNN, in the Fashion-MNIST setting.

The thesis' MNIST experiments (Tables 4.1, 5.1, Chapter 6) use the Table
8.1/8.2 settings, which are the scheme presets of the sign family and flags
away for the others; the UAI paper ran no scheme on MNIST, so its
Fashion-MNIST setting is MNIST's base. The server's public batch comes from
Fashion-MNIST, mirroring the UAI paper's related-but-different public data.
"""

from fedjax_dp.data import settings
from fedjax_dp.data.sets import base

SETTINGS = settings.DataSetting(settings.FASHION_MNIST, "UAI Table 5 (Fashion-MNIST row)")

DATASET = base.Dataset(
    name="mnist", model="cnn", settings=SETTINGS,
    federation=base.partition_federation, loader=base.idx_loader("mnist"),
    files=base.idx_files, public_source="fashion-mnist",
    about="MNIST (the paper CNN; the public batch from Fashion-MNIST)",
    class_names=tuple(str(d) for d in range(10)))
