"""Locating, downloading, verifying and parsing the MNIST / Fashion-MNIST idx files.

The experiments of the UAI 2021 FL-TOP paper (Appendix B) train on
Fashion-MNIST with pixels scaled to [0, 1]; the server's public batch
(Section 4) is drawn from MNIST. Both data sets ship as four gzipped idx files
each. This module finds them on disk (or downloads them from the official
mirrors), checks the SHA-256 of the *decompressed* bytes against
:data:`CHECKSUMS` and parses them into numpy arrays.

Search order (see :func:`data_dirs`): ``$FEDJAX_DP_DATA`` if set, then the user
cache ``$FEDJAX_DP_CACHE``, ``$XDG_CACHE_HOME/fedjax_dp`` or
``~/.cache/fedjax_dp``. Inside a folder, a file is looked up as
``<folder>/<name>/<file>.gz`` or uncompressed as ``<folder>/<name>/<file>``.
Set ``FEDJAX_DP_NO_DOWNLOAD=1`` to forbid network access.
"""

from __future__ import annotations

import gzip
import hashlib
import http.client
import os
import pathlib
import urllib.request
import zlib

import numpy as np

from fedjax_dp.atomic import atomic_file

__all__ = [
    "CHECKSUMS",
    "DATASETS",
    "DOWNLOAD_TIMEOUT",
    "DataError",
    "SPLITS",
    "check",
    "data_dirs",
    "load_dataset",
    "locate",
    "parse_idx",
]

#: Official download mirrors per data set; each serves ``<file>.gz``.
DATASETS: dict[str, tuple[str, ...]] = {
    "fashion-mnist": (
        "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
    ),
    "mnist": (
        "https://ossci-datasets.s3.amazonaws.com/mnist/",
        "https://storage.googleapis.com/cvdf-datasets/mnist/",
    ),
}

#: split -> (images file, labels file), names without the ``.gz`` suffix.
SPLITS: dict[str, tuple[str, str]] = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}

#: (name, file) -> (size in bytes, sha256) of the DECOMPRESSED official file.
CHECKSUMS: dict[tuple[str, str], tuple[int, str]] = {
    ("fashion-mnist", "train-images-idx3-ubyte"): (
        47040016, "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888"),
    ("fashion-mnist", "train-labels-idx1-ubyte"): (
        60008, "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9"),
    ("fashion-mnist", "t10k-images-idx3-ubyte"): (
        7840016, "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b"),
    ("fashion-mnist", "t10k-labels-idx1-ubyte"): (
        10008, "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34"),
    ("mnist", "train-images-idx3-ubyte"): (
        47040016, "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db"),
    ("mnist", "train-labels-idx1-ubyte"): (
        60008, "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5"),
    ("mnist", "t10k-images-idx3-ubyte"): (
        7840016, "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7"),
    ("mnist", "t10k-labels-idx1-ubyte"): (
        10008, "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2"),
}

#: Socket timeout (seconds) for each download request.
DOWNLOAD_TIMEOUT = 30.0

# idx magic numbers accepted: unsigned byte data, 1-D (labels) or 3-D (images).
_IDX_MAGIC_NDIM = {0x00000801: 1, 0x00000803: 3}

# (name, split) -> read-only (uint8 images (N, 28, 28, 1), int32 labels (N,)).
_ARRAY_CACHE: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = {}


class DataError(Exception):
    """A data file is missing, corrupt or malformed (one-line message)."""


def cache_dir() -> pathlib.Path:
    if os.environ.get("FEDJAX_DP_CACHE"):
        return pathlib.Path(os.environ["FEDJAX_DP_CACHE"]).expanduser()
    if os.environ.get("XDG_CACHE_HOME"):
        return pathlib.Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "fedjax_dp"
    return pathlib.Path.home() / ".cache" / "fedjax_dp"


def data_dirs() -> list[pathlib.Path]:
    """Returns the folders searched for data files, in order.

    Returns:
        ``$FEDJAX_DP_DATA`` (if set and non-empty) followed by the user cache
        folder (``$FEDJAX_DP_CACHE``, else ``$XDG_CACHE_HOME/fedjax_dp``, else
        ``~/.cache/fedjax_dp``), where downloads are stored. Duplicates are
        dropped.
    """
    dirs = []
    if os.environ.get("FEDJAX_DP_DATA"):
        dirs.append(pathlib.Path(os.environ["FEDJAX_DP_DATA"]).expanduser())
    cache = cache_dir()
    if cache not in dirs:
        dirs.append(cache)
    return dirs


def _check_known(name: str, file: str) -> None:
    if name not in DATASETS:
        raise ValueError(f"unknown data set {name!r}; expected one of {sorted(DATASETS)}")
    if (name, file) not in CHECKSUMS:
        known = sorted(f for n, f in CHECKSUMS if n == name)
        raise ValueError(f"unknown file {file!r} for {name}; expected one of {known}")


def _verify(name: str, file: str, raw: bytes, origin: str) -> None:
    """Raises DataError unless ``raw`` has the official size and SHA-256."""
    size, sha256 = CHECKSUMS[(name, file)]
    if len(raw) != size:
        raise DataError(
            f"checksum mismatch for {name}/{file} from {origin}: decompressed size "
            f"{len(raw)} bytes, expected {size}; replace it with the official file")
    digest = hashlib.sha256(raw).hexdigest()
    if digest != sha256:
        raise DataError(
            f"checksum mismatch for {name}/{file} from {origin}: sha256 {digest}, "
            f"expected {sha256}; replace it with the official file")


def decompress_gz(gz: bytes, origin: str) -> bytes:
    """``gzip.decompress``, a corrupt file raising DataError naming ``origin``."""
    try:
        return gzip.decompress(gz)
    except (OSError, EOFError, zlib.error) as err:
        raise DataError(f"corrupt gzip data in {origin}: {err}; "
                        "replace it with the official file") from err


# The files verified in this process, by (path, size, modification time):
# :func:`check` reads a file again only if it changed.
_VERIFIED: set[tuple[str, int, int]] = set()


def _stamp(path: pathlib.Path) -> tuple[str, int, int]:
    stat = path.stat()
    return str(path.resolve()), stat.st_size, stat.st_mtime_ns


def _read_verified(name: str, file: str, path: pathlib.Path) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as err:
        raise DataError(f"cannot read {path}: {err}") from err
    raw = decompress_gz(data, str(path)) if path.suffix == ".gz" else data
    _verify(name, file, raw, str(path))
    _VERIFIED.add(_stamp(path))
    return raw


def _present(name: str, file: str) -> pathlib.Path | None:
    """The first of ``<dir>/<name>/<file>.gz`` and ``<dir>/<name>/<file>``
    over :func:`data_dirs`, or None."""
    for folder in data_dirs():
        for path in (folder / name / f"{file}.gz", folder / name / file):
            if path.is_file():
                return path
    return None


def check(name: str, file: str) -> None:
    """Raises as :func:`locate` without download does, unless the file is here
    and verified; a file verified before in this process and unchanged since
    (path, size, modification time) is not read again (``reproduce.py plan``
    asks for every row's data set).

    Raises:
        ValueError: Unknown ``name`` or ``file``.
        DataError: The file is corrupt, or missing.
    """
    _check_known(name, file)
    path = _present(name, file)
    if path is None or _stamp(path) not in _VERIFIED:
        locate(name, file, download=False)


def _download(name: str, file: str, target: pathlib.Path) -> bytes:
    """Downloads ``<file>.gz`` into ``target`` atomically; returns decompressed bytes.

    Each mirror is tried in turn. The bytes are verified before anything is
    written; they then go to a temporary file in the target folder that is
    moved into place with ``os.replace``, so no half-written file is left.
    """
    errors = []
    for mirror in DATASETS[name]:
        url = f"{mirror}{file}.gz"
        try:
            with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT) as response:
                gz = response.read()
            raw = decompress_gz(gz, url)
            _verify(name, file, raw, url)
        except (OSError, http.client.HTTPException, ValueError, DataError) as err:
            errors.append(f"{url}: {err}")
            continue
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with atomic_file(target) as out:
                out.write(gz)
        except OSError as err:
            raise DataError(f"downloaded {url} but could not write {target}: {err}; "
                            "set FEDJAX_DP_CACHE to a writable folder") from err
        return raw
    raise DataError("; ".join(errors))


def locate(name: str, file: str, download: bool = True) -> bytes:
    """Finds one official idx file and returns its verified decompressed bytes.

    Each folder of :func:`data_dirs` is tried in order, accepting
    ``<dir>/<name>/<file>.gz`` or the uncompressed ``<dir>/<name>/<file>``. A
    file that is present but corrupt raises instead of being skipped. If the
    file is found nowhere it is downloaded from the official mirrors into the
    cache folder, unless ``download`` is False or ``FEDJAX_DP_NO_DOWNLOAD`` is
    set to a value other than ``0``.

    Args:
        name: Data set, ``"fashion-mnist"`` or ``"mnist"``.
        file: File name without ``.gz``, e.g. ``"train-images-idx3-ubyte"``.
        download: Whether a missing file may be downloaded.

    Returns:
        The decompressed file content, checked against :data:`CHECKSUMS`.

    Raises:
        ValueError: Unknown ``name`` or ``file``.
        DataError: The file is corrupt (bad gzip, size or SHA-256), or missing
            and could not be downloaded.
    """
    _check_known(name, file)
    path = _present(name, file)
    if path is not None:
        return _read_verified(name, file, path)

    dirs = data_dirs()
    cache = cache_dir()
    if not download:
        reason = "download=False"
    elif os.environ.get("FEDJAX_DP_NO_DOWNLOAD", "") not in ("", "0"):
        reason = "download disabled by FEDJAX_DP_NO_DOWNLOAD"
    else:
        try:
            return _download(name, file, cache / name / f"{file}.gz")
        except DataError as err:
            reason = f"download failed ({err})"

    where = ", ".join(
        f"$FEDJAX_DP_DATA={d}" if os.environ.get("FEDJAX_DP_DATA") and i == 0 else str(d)
        for i, d in enumerate(dirs))
    put = dirs[0] / name / f"{file}.gz"
    raise DataError(
        f"{name}/{file}.gz not found in {where} and {reason}; put the official file at "
        f"{put} or set FEDJAX_DP_DATA to a folder holding {name}/{file}.gz")


def parse_idx(raw: bytes) -> np.ndarray:
    """Parses an idx file holding unsigned bytes (MNIST / Fashion-MNIST format).

    Args:
        raw: Decompressed file content. The header is the big-endian magic
            number ``0x00000801`` (1-D, labels) or ``0x00000803`` (3-D, images)
            followed by one big-endian uint32 per dimension.

    Returns:
        A read-only uint8 array with the shape given by the header (a view of
        ``raw``, no copy).

    Raises:
        DataError: Unknown magic number, truncated header, or a body whose
            length differs from the product of the dimensions.
    """
    if len(raw) < 4:
        raise DataError(f"malformed idx data: {len(raw)} bytes, too short for a header")
    magic = int.from_bytes(raw[:4], "big")
    if magic not in _IDX_MAGIC_NDIM:
        raise DataError(f"malformed idx data: magic number 0x{magic:08x}, expected "
                        "0x00000801 (uint8 labels) or 0x00000803 (uint8 images)")
    ndim = _IDX_MAGIC_NDIM[magic]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(f"malformed idx data: {len(raw)} bytes, header needs {header}")
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    expected = int(np.prod(dims, dtype=np.int64))
    if len(raw) - header != expected:
        raise DataError(f"malformed idx data: body has {len(raw) - header} bytes, "
                        f"dimensions {dims} need {expected}")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims)


def _load_uint8(name: str, split: str, download: bool) -> tuple[np.ndarray, np.ndarray]:
    key = (name, split)
    if key not in _ARRAY_CACHE:
        images_file, labels_file = SPLITS[split]
        images = parse_idx(locate(name, images_file, download))[..., np.newaxis]
        labels = parse_idx(locate(name, labels_file, download)).astype(np.int32)
        labels.setflags(write=False)
        _ARRAY_CACHE[key] = (images, labels)
    return _ARRAY_CACHE[key]


def load_dataset(name: str, split: str, download: bool = True,
                 as_uint8: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Loads a verified MNIST / Fashion-MNIST split.

    Preprocessing follows the UAI 2021 FL-TOP paper, Appendix B: pixels are
    scaled to [0, 1]. Parsed arrays are cached in-process per
    ``(name, split)``; since every file is checksum-verified, the cached
    content does not depend on which folder it came from.

    Args:
        name: ``"fashion-mnist"`` or ``"mnist"``.
        split: ``"train"`` (60,000 samples) or ``"test"`` (10,000 samples).
        download: Whether missing files may be downloaded (see :func:`locate`).
        as_uint8: Return the raw uint8 pixels (0..255) instead of float32.
            These are the shared cached arrays and are read-only.

    Returns:
        ``(images, labels)``: images of shape ``(N, 28, 28, 1)``, float32 in
        [0, 1] (or read-only uint8 if ``as_uint8``), and int32 labels of shape
        ``(N,)`` with values 0..9 (read-only).

    Raises:
        ValueError: Unknown ``name`` or ``split``.
        DataError: A file is missing and cannot be downloaded, or is corrupt.
    """
    if name not in DATASETS:
        raise ValueError(f"unknown data set {name!r}; expected one of {sorted(DATASETS)}")
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {sorted(SPLITS)}")
    images, labels = _load_uint8(name, split, download)
    if as_uint8:
        return images, labels
    scaled = images.astype(np.float32)
    np.divide(scaled, np.float32(255.0), out=scaled)
    return scaled, labels
