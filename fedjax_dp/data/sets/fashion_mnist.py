"""fashion-mnist: UAI 2021's data (the default).

Fashion-MNIST's idx files (``fedjax_dp.data.idx``), split by partition,
with the paper CNN in the UAI Table 5 setting. The server's public batch is
10 MNIST training images (UAI Sec. 4: public data related to, but
different from, the clients').
"""

from fedjax_dp.data import settings
from fedjax_dp.data.sets import base

SETTINGS = settings.DataSetting(settings.FASHION_MNIST, "UAI Table 5")

DATASET = base.Dataset(
    name="fashion-mnist", model="cnn", settings=SETTINGS,
    federation=base.partition_federation, loader=base.idx_loader("fashion-mnist"),
    files=base.idx_files, public_source="mnist",
    about="Fashion-MNIST, UAI 2021's data (the paper CNN)",
    class_names=("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
                 "Sneaker", "Bag", "Ankle boot"),
    class_aliases={"t-shirt": 0, "tshirt": 0, "top": 0})
