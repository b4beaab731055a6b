"""The data-set registry both engines read (``data=mnist|fashion_mnist|cifar10|cifar100``).

Every data set is read with torchvision's own parser from ``<data.root>`` and held as uint8
tensors (M, C, H, W) plus int64 labels. CIFAR-10 is read from torchvision's binary release
(``cifar-10-batches-py``, ``download=true`` fetches it on a machine with internet) or, where only
that is present, from the ImageFolder copy ``CIFAR-10-images/{train,test}/<class>/*.jpg`` (a JPEG
re-encoding: its numbers are labelled "CIFAR-10 (JPEG copy)"). The JPEGs are decoded once
(torchvision.io, batched) and cached as uint8 tensors outside the repository, in
``$VECGOSSIP_CACHE`` or ``~/.cache/vecgossip``; so are the sets torchvision parses (MNIST's IDX
files, the CIFAR pickles), keyed by their files' names, sizes and times: a process that finds its
cache does not import torchvision (1.4 s of a CLI run's start on a 2-core CPU).

Normalisation: MNIST and Fashion-MNIST are scaled by 1/256 (Caffe's MNIST example, paper 1);
CIFAR by per-channel mean/std after /255, with random crop 32 / padding 4 and horizontal flips
for training (the DFedSAM setting).
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from vecgossip.data.dataset import DATA_ENV, PIXEL_SCALE, Dataset, LabelIndex, resolve_root

Tensor = torch.Tensor
CACHE_ENV = "VECGOSSIP_CACHE"
CIFAR10_MEAN, CIFAR10_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
CIFAR100_MEAN, CIFAR100_STD = (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)
JPEG_DIR = "CIFAR-10-images"


@dataclass(frozen=True)
class DatasetSpec:
    """What the validator and the models need to know before anything is loaded."""

    name: str
    label: str                       # how numbers measured on it are labelled
    num_classes: int
    shape: tuple[int, int, int]      # (C, H, W)
    n_train: int
    n_test: int
    layouts: tuple[str, ...]         # what must be under data.root (for the error message)
    present: Callable[[Path], bool]  # is some readable format under this root?
    mean: tuple[float, ...] | None = None   # None: x * 1/256 (Caffe)
    std: tuple[float, ...] | None = None
    augment: int = 0                 # padding of the random crop (0: no augmentation)
    scale: float = PIXEL_SCALE       # x * scale when mean is None (registered data sets: 1, as given)
    kind: str = "image"              # image | text (character windows, data/text.py; shape (T,))


def _torchvision(cls_name: str, folder: str):
    def load(root: Path, train: bool, download: bool) -> tuple[Tensor, Tensor, str | None]:
        split = "train" if train else "test"
        hit = cached(root / folder, f"{cls_name}-{split}")
        if hit is not None:
            return hit[0], hit[1], None
        import torchvision.datasets as tvd
        ds = getattr(tvd, cls_name)(str(root), train=train, download=download)
        data = torch.as_tensor(ds.data)
        images = data.unsqueeze(1) if data.dim() == 3 else data.permute(0, 3, 1, 2)   # (M, C, H, W)
        images, labels = images.contiguous(), torch.as_tensor(ds.targets, dtype=torch.int64)
        store(cache_path(root / folder, f"{cls_name}-{split}"), images, labels)
        return images, labels, None
    load.folder = folder
    return load


def files_key(folder: Path) -> str | None:
    """A digest of every file under ``folder``: relative name, size and modification time (None:
    no such folder). A changed or re-downloaded copy gets another key."""
    if not folder.is_dir():
        return None
    h = hashlib.sha1(str(folder.resolve()).encode())
    for dirpath, _, names in sorted(os.walk(folder)):
        for name in sorted(names):
            st = os.stat(os.path.join(dirpath, name))
            h.update(f"{os.path.relpath(os.path.join(dirpath, name), folder)}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()[:16]


def cache_path(folder: Path, name: str) -> Path | None:
    key = files_key(folder)
    return None if key is None else cache_dir() / f"{name}-{key}.pt"


def cached(folder: Path, name: str) -> tuple[Tensor, Tensor] | None:
    """The uint8 images and labels cached for ``folder``'s current files, or None."""
    path = cache_path(folder, name)
    if path is None or not path.exists():
        return None
    blob = torch.load(path, weights_only=True)
    return blob["images"], blob["labels"]


def store(path: Path | None, images: Tensor, labels: Tensor) -> None:
    """Cache the decoded tensors (atomically); an unwritable cache directory only costs the parse
    next time."""
    if path is None:
        return
    try:
        from vecgossip.core.files import atomic_path
        with atomic_path(path) as tmp:
            torch.save({"images": images, "labels": labels}, tmp)
    except OSError as err:  # read-only home: parse again next time
        warnings.warn(f"could not cache decoded images in {path.parent} ({err}); set ${CACHE_ENV}")


IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")   # torchvision's


def image_count(folder: Path) -> int:
    """How many images torchvision's ImageFolder finds under ``folder`` (its class folders, walked
    with links followed, its extensions), without importing torchvision."""
    return sum(1 for c in os.scandir(folder) if c.is_dir() for _, _, names in os.walk(c.path, followlinks=True)
               for f in names if f.lower().endswith(IMG_EXTENSIONS))


def _has(*parts: str) -> Callable[[Path], bool]:
    return lambda root: all((root / p).exists() for p in parts)


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "vecgossip")


def load_image_folder(folder: Path, classes: int) -> tuple[Tensor, Tensor]:
    """Decode an ImageFolder tree of JPEGs once, batched, and cache the uint8 tensors.

    The cache key is the folder's absolute path with its image count (counted as ImageFolder
    counts, :func:`image_count`, without importing torchvision), so a changed copy is decoded
    again; an unwritable cache directory only costs the decode next time."""
    key = hashlib.sha1(f"{folder.resolve()}:{image_count(folder)}".encode()).hexdigest()[:16]
    path = cache_dir() / f"{folder.parent.name}-{folder.name}-{key}.pt"
    if path.exists():
        blob = torch.load(path, weights_only=True)
        return blob["images"], blob["labels"]
    from torchvision.datasets import ImageFolder
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from torchvision.io import ImageReadMode, decode_jpeg, read_file

    samples = ImageFolder(str(folder)).samples
    if len(samples) != image_count(folder):
        raise RuntimeError(f"{folder}: counted {image_count(folder)} images, ImageFolder finds {len(samples)}")
    with warnings.catch_warnings():   # torchvision 0.29 marks its image codecs deprecated (torchcodec)
        warnings.simplefilter("ignore", DeprecationWarning)
        images = torch.stack(decode_jpeg([read_file(p) for p, _ in samples], mode=ImageReadMode.RGB))
    labels = torch.tensor([c for _, c in samples], dtype=torch.int64)
    if int(labels.max()) + 1 != classes:
        raise FileNotFoundError(f"{folder} holds {int(labels.max()) + 1} class folders, expected {classes}")
    store(path, images, labels)
    return images, labels


def _cifar10(root: Path, train: bool, download: bool) -> tuple[Tensor, Tensor, str | None]:
    """torchvision's binary release if it is there, else the JPEG copy if that is, else download."""
    jpeg = root / JPEG_DIR / ("train" if train else "test")
    if not (root / "cifar-10-batches-py").exists() and jpeg.is_dir():
        images, labels = load_image_folder(jpeg, 10)
        return images, labels, "CIFAR-10 (JPEG copy)"
    return _torchvision("CIFAR10", "cifar-10-batches-py")(root, train, download)


_cifar10.folder = "cifar-10-batches-py"


REGISTRY: dict[str, DatasetSpec] = {s.name: s for s in (
    DatasetSpec("mnist", "MNIST", 10, (1, 28, 28), 60_000, 10_000, ("MNIST/raw/ (the four IDX files)",),
                _has("MNIST/raw/train-images-idx3-ubyte", "MNIST/raw/t10k-images-idx3-ubyte")),
    DatasetSpec("fashion_mnist", "Fashion-MNIST", 10, (1, 28, 28), 60_000, 10_000,
                ("FashionMNIST/raw/ (the four IDX files)",),
                _has("FashionMNIST/raw/train-images-idx3-ubyte", "FashionMNIST/raw/t10k-images-idx3-ubyte")),
    DatasetSpec("cifar10", "CIFAR-10", 10, (3, 32, 32), 50_000, 10_000,
                ("cifar-10-batches-py/ (torchvision's CIFAR10)", f"{JPEG_DIR}/{{train,test}}/<class>/*.jpg"),
                lambda r: (r / "cifar-10-batches-py").exists()
                or ((r / JPEG_DIR / "train").is_dir() and (r / JPEG_DIR / "test").is_dir()),
                CIFAR10_MEAN, CIFAR10_STD, augment=4),
    DatasetSpec("cifar100", "CIFAR-100", 100, (3, 32, 32), 50_000, 10_000,
                ("cifar-100-python/ (torchvision's CIFAR100)",), _has("cifar-100-python"),
                CIFAR100_MEAN, CIFAR100_STD, augment=4),
    # LEAF's Shakespeare (data/shakespeare.py, data/text.py): 80-character windows -> the next of 80
    # characters; the counts are the 42 etexts' usable roles at the default split (the upper bound)
    DatasetSpec("shakespeare", "Shakespeare (LEAF)", 80, (80,), 3_017_072, 693_052,
                ("shakespeare/*_gut.txt (the plays as Gutenberg etexts)",),
                lambda r: any((r / "shakespeare").glob("*_gut.txt")), scale=1.0, kind="text"),
)}
def _no_download(root: Path, train: bool, download: bool):
    """Text sets are read from their files only (data/text.py); nothing is fetched."""
    raise OSError("no download for the plays: put the etexts there (../shared/data/shakespeare)")


_no_download.folder = "shakespeare"
LOADERS = {"mnist": _torchvision("MNIST", "MNIST"), "fashion_mnist": _torchvision("FashionMNIST", "FashionMNIST"),
           "cifar10": _cifar10, "cifar100": _torchvision("CIFAR100", "cifar-100-python"), "shakespeare": _no_download}


def register_dataset(name: str, train: tuple[Tensor, Tensor], test: tuple[Tensor, Tensor],
                     num_classes: int | None = None, label: str | None = None) -> DatasetSpec:
    """Make ``data.name=<name>`` a data set of one's own: ``train`` and ``test`` are (features
    (M, *shape), int labels (M,)) of any shape and dtype (uint8 images, float features); batches
    are the features as given, cast to the run's dtype (no normalisation is applied). Labels are
    0 .. num_classes - 1 (default: the largest label + 1). Raises ValueError naming what is wrong;
    a built-in name cannot be replaced."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"register_dataset: the name must be an identifier, got {name!r}")
    if name in LOADERS and not getattr(LOADERS[name], "registered", False):
        raise ValueError(f"register_dataset: {name!r} is a built-in data set")
    parts = {}
    for split, pair in (("train", train), ("test", test)):
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise ValueError(f"register_dataset: {split} must be (features, labels)")
        x, y = (torch.as_tensor(v) for v in pair)
        if x.dim() < 2 or y.dim() != 1 or x.shape[0] != y.shape[0] or y.numel() == 0:
            raise ValueError(f"register_dataset: {split} features must be (M, ...) and labels (M,), M >= 1; "
                             f"got {tuple(x.shape)} and {tuple(y.shape)}")
        if y.dtype.is_floating_point or y.dtype == torch.bool or int(y.min()) < 0:
            raise ValueError(f"register_dataset: {split} labels must be integers >= 0")
        parts[split] = (x.contiguous(), y.to(torch.int64))
    if parts["train"][0].shape[1:] != parts["test"][0].shape[1:]:
        raise ValueError("register_dataset: train and test features must have the same shape per sample")
    classes = num_classes if num_classes is not None else 1 + max(int(parts[s][1].max()) for s in parts)
    if max(int(parts[s][1].max()) for s in parts) >= classes:
        raise ValueError(f"register_dataset: labels must be < num_classes={classes}")

    def loader(root: Path, is_train: bool, download: bool) -> tuple[Tensor, Tensor, str | None]:
        return (*parts["train" if is_train else "test"], None)
    loader.folder, loader.registered = "", True
    spec = DatasetSpec(name, label or name, int(classes), tuple(parts["train"][0].shape[1:]),
                       parts["train"][1].numel(), parts["test"][1].numel(), ("(registered in memory)",),
                       lambda root: True, scale=1.0)
    REGISTRY[name], LOADERS[name] = spec, loader
    return spec


def get_spec(name: str) -> DatasetSpec:
    if name not in REGISTRY:
        raise ValueError(f"data.name={name!r} is unknown; allowed: {', '.join(REGISTRY)}")
    return REGISTRY[name]


def missing_message(spec: DatasetSpec, root: Path, failed: str | None = None) -> str:
    """One line: what is missing, where it must go, and (``failed``) why the download did not bring it."""
    where = (f"{spec.label} not found under data.root={str(root)!r}: expected "
             + " or ".join(f"{root}/{lay}" for lay in spec.layouts))
    if failed is not None:
        return (f"{where}; download failed: {failed}. Put the files there or point data.root=... or "
                f"${DATA_ENV} at the folder that holds them (data.download=false never tries the network).")
    return (f"{where}. Put the files there, point data.root=... or ${DATA_ENV} at the folder that holds "
            "them, or pass data.download=true on a machine with internet.")


NO_NETWORK = ("Name or service not known", "Temporary failure in name resolution", "Network is unreachable",
              "No address associated", "nodename nor servname", "getaddrinfo failed")


def download_reason(err: BaseException) -> str:
    """torchvision's download error (several lines, mirror by mirror) cut to one short reason: the
    first mirror's error, prefixed "no network" when the host could not even be resolved."""
    text = str(err)
    inner = re.search(r"<urlopen error (.*?)>", text)
    first = inner.group(1) if inner else next((ln.strip() for ln in text.splitlines() if ln.strip()), type(err).__name__)
    first = first[:160]
    return f"no network ({first})" if any(k in first for k in NO_NETWORK) else first


def _created_by(action: Callable[[], None], *paths: Path) -> None:
    """Run ``action``; if it raises, remove those of ``paths`` it created that hold no file (a
    failed download leaves no empty folders behind), then re-raise."""
    new = [p for p in paths if not p.exists()]
    try:
        action()
    except BaseException:
        for p in new:
            if p.is_dir() and not any(f.is_file() for f in p.rglob("*")):
                shutil.rmtree(p, ignore_errors=True)
        raise


def ensure(name: str, root: str | os.PathLike | None, download: bool) -> Path:
    """The data set is readable under ``root`` now, or is downloaded now (``download``): anything
    else raises FileNotFoundError with one line naming data.root, the layouts read and, for a
    failed download, its first reason. The CLI calls this before Hydra makes a run directory."""
    spec, path = get_spec(name), check_available(name, root, download)
    if spec.present(path):
        return path
    top = next((p for p in reversed([path, *path.parents]) if not p.exists()), None)
    folder = path / getattr(LOADERS[name], "folder", "")

    def fetch() -> None:
        for train in (True, False):
            LOADERS[name](path, train, True)
    try:
        _created_by(fetch, *(p for p in (top, folder) if p is not None))
    except (RuntimeError, OSError, ValueError) as err:    # URLError is an OSError
        raise FileNotFoundError(missing_message(spec, path, download_reason(err))) from None
    return path


def check_available(name: str, root: str | os.PathLike | None, download: bool = False) -> Path:
    """Raise FileNotFoundError (naming data.root and the layouts read) unless the data set is
    there or will be downloaded. Cheap: file-system checks only, no decoding."""
    spec, path = get_spec(name), resolve_root(root)
    if not download and not spec.present(path):
        raise FileNotFoundError(missing_message(spec, path))
    return path


def load(name: str, root: str | os.PathLike | None, train: bool, download: bool = False,
         device: torch.device | str = "cpu", augment: bool = True, dtype: torch.dtype = torch.float32) -> Dataset:
    """The ``train`` or test split of data set ``name`` as a :class:`Dataset` on ``device``,
    batches in ``dtype``."""
    spec = get_spec(name)
    path = check_available(name, root, download)
    download = download and not spec.present(path)      # what is there is read, never fetched again
    try:
        images, labels, source = LOADERS[name](path, train, download)
    except (RuntimeError, OSError) as err:   # torchvision: "Dataset not found or corrupted", a failed download
        if download:
            raise FileNotFoundError(missing_message(spec, path, download_reason(err))) from None
        raise FileNotFoundError(missing_message(spec, path) + f" (unreadable: {download_reason(err)})") from None
    if spec.mean is None:
        scale, shift = spec.scale, None
    else:
        std = torch.tensor(spec.std)
        scale, shift = 1.0 / (255.0 * std), -torch.tensor(spec.mean) / std
    ds = Dataset(images, labels, LabelIndex.of(labels, spec.num_classes), scale, shift,
                 spec.augment if (train and augment) else 0, name, source or spec.label)
    return ds.to(device, dtype)


def load_mnist(root: str | os.PathLike | None, train: bool, download: bool = False,
               device: torch.device | str = "cpu") -> Dataset:
    """MNIST through torchvision's parser from ``root``/MNIST/raw (datasets.load("mnist", ...))."""
    from vecgossip.data.registry import load
    return load("mnist", root, train, download, device)
