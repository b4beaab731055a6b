"""The data-set registry: every format read through torchvision's own parsers (tiny files written
here in torchvision's formats where no copy is available offline), the JPEG copy of CIFAR-10 with
its cache, and errors that say where the files must go."""
from __future__ import annotations

import hashlib
import os
import pickle
import shutil
import struct

import numpy as np
import pytest
import torch

from vecgossip.data.registry import REGISTRY, check_available, load

RNG = np.random.default_rng(0)


def md5(path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def write_cifar(root, folder: str, files: dict, label_key: str, meta: tuple[str, str, list]):
    """torchvision's CIFAR layout: pickled dicts {data: (n, 3072) uint8, <label_key>: [...]}."""
    d = root / folder
    d.mkdir(parents=True)
    want = {}
    for name, n in files.items():
        data = RNG.integers(0, 256, (n, 3072), dtype=np.uint8)
        labels = RNG.integers(0, 100 if label_key == "fine_labels" else 10, n).tolist()
        with open(d / name, "wb") as f:
            pickle.dump({"data": data, label_key: labels}, f)
        want[name] = (data, labels)
    with open(d / meta[0], "wb") as f:
        pickle.dump({meta[1]: meta[2]}, f)
    return d, want


def test_cifar100_through_torchvision_on_a_tiny_file(tmp_path, monkeypatch):
    from torchvision.datasets import CIFAR100
    d, want = write_cifar(tmp_path, "cifar-100-python", {"train": 20, "test": 8}, "fine_labels",
                          ("meta", "fine_label_names", [f"c{i}" for i in range(100)]))
    monkeypatch.setattr(CIFAR100, "train_list", [["train", md5(d / "train")]])
    monkeypatch.setattr(CIFAR100, "test_list", [["test", md5(d / "test")]])
    monkeypatch.setattr(CIFAR100, "meta", {"filename": "meta", "key": "fine_label_names", "md5": md5(d / "meta")})
    train = load("cifar100", tmp_path, train=True)
    test = load("cifar100", tmp_path, train=False)
    data, labels = want["train"]
    assert train.images.shape == (20, 3, 32, 32) and test.images.shape == (8, 3, 32, 32)
    assert torch.equal(train.images, torch.from_numpy(data).view(20, 3, 32, 32))   # CHW from torchvision's HWC
    assert train.labels.tolist() == labels and train.num_classes == 100
    assert train.augment == 4 and test.augment == 0 and train.source == "CIFAR-100"
    x, _ = train.batch(torch.arange(20))
    mean, std = torch.tensor(REGISTRY["cifar100"].mean), torch.tensor(REGISTRY["cifar100"].std)
    want_x = (torch.from_numpy(data).view(20, 3, 32, 32).float() / 255 - mean.view(3, 1, 1)) / std.view(3, 1, 1)
    torch.testing.assert_close(x, want_x)


def test_cifar10_binary_release_is_preferred_over_the_jpeg_copy(tmp_path, monkeypatch):
    from torchvision.datasets import CIFAR10
    files = {f"data_batch_{i}": 4 for i in range(1, 6)} | {"test_batch": 3}
    d, want = write_cifar(tmp_path, "cifar-10-batches-py", files, "labels",
                          ("batches.meta", "label_names", [f"c{i}" for i in range(10)]))
    monkeypatch.setattr(CIFAR10, "train_list", [[f"data_batch_{i}", md5(d / f"data_batch_{i}")] for i in range(1, 6)])
    monkeypatch.setattr(CIFAR10, "test_list", [["test_batch", md5(d / "test_batch")]])
    monkeypatch.setattr(CIFAR10, "meta", {"filename": "batches.meta", "key": "label_names", "md5": md5(d / "batches.meta")})
    (tmp_path / "CIFAR-10-images" / "train").mkdir(parents=True)      # present too, but not read
    train = load("cifar10", tmp_path, train=True)
    assert train.images.shape == (20, 3, 32, 32) and train.source == "CIFAR-10"
    assert train.labels.tolist() == sum((want[f"data_batch_{i}"][1] for i in range(1, 6)), [])


def write_idx(path, arr: np.ndarray) -> None:
    magic = 0x0803 if arr.ndim == 3 else 0x0801
    with open(path, "wb") as f:
        f.write(struct.pack(">I", magic) + b"".join(struct.pack(">I", s) for s in arr.shape) + arr.tobytes())


def test_fashion_mnist_idx_files(tmp_path):
    raw = tmp_path / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    imgs = RNG.integers(0, 256, (6, 28, 28), dtype=np.uint8)
    labels = RNG.integers(0, 10, 6).astype(np.uint8)
    for split in ("train", "t10k"):
        write_idx(raw / f"{split}-images-idx3-ubyte", imgs)
        write_idx(raw / f"{split}-labels-idx1-ubyte", labels)
    ds = load("fashion_mnist", tmp_path, train=True)
    assert ds.images.shape == (6, 1, 28, 28) and ds.labels.tolist() == labels.tolist()
    assert torch.equal(ds.images[:, 0], torch.from_numpy(imgs)) and ds.source == "Fashion-MNIST"


def test_a_root_holding_neither_cifar_format_says_where_to_put_it(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        check_available("cifar10", tmp_path)
    msg = str(err.value)
    assert "data.root" in msg and "cifar-10-batches-py" in msg and "CIFAR-10-images/{train,test}" in msg
    assert "VECGOSSIP_DATA" in msg and "data.download=true" in msg
    check_available("cifar10", tmp_path, download=True)          # will be downloaded: no error


def test_cifar10_jpeg_copy_decoded_once_and_cached(data_root, tmp_path, monkeypatch):
    if not (data_root / "CIFAR-10-images" / "test").is_dir():
        pytest.skip("no CIFAR-10 JPEG copy under the data root")
    monkeypatch.setenv("VECGOSSIP_CACHE", str(tmp_path / "cache"))
    test = load("cifar10", data_root, train=False)
    assert test.images.shape == (10000, 3, 32, 32) and test.images.dtype == torch.uint8
    assert test.source == "CIFAR-10 (JPEG copy)" and test.num_classes == 10
    assert torch.equal(torch.bincount(test.labels), torch.full((10,), 1000))
    cached = list((tmp_path / "cache").glob("*.pt"))
    assert len(cached) == 1
    again = load("cifar10", data_root, train=False)              # from the cache
    assert torch.equal(again.images, test.images) and torch.equal(again.labels, test.labels)
    means = test.images.float().mean((0, 2, 3)) / 255           # data/README.md: (0.49, 0.48, 0.45)
    torch.testing.assert_close(means, torch.tensor([0.49, 0.48, 0.45]), atol=0.01, rtol=0)


@pytest.mark.parametrize("args", [["max_ticks=20"], ["method=dfedsam", "data=cifar10", "model=cnn", "rounds=2"]])
def test_missing_data_root_is_one_line_exit_2_and_no_run_directory(tmp_path, args):
    """`python -m vecgossip data_root=/nonexistent ...`: the data check (with its download attempt)
    runs in the precheck, before Hydra makes a run directory; torchvision's mirror-by-mirror
    download errors come out as one short reason. The network is cut for the child by pointing
    its proxies at a closed loopback port, so the download fails here whether or not the machine
    has internet."""
    import subprocess
    import sys
    from test_config import REPO
    root, run_dir = tmp_path / "nonexistent" / "data", tmp_path / "run"
    env = {**os.environ, "http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9",
           "HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9", "no_proxy": ""}
    proc = subprocess.run([sys.executable, "-m", "vecgossip", f"data_root={root}", *args, f"hydra.run.dir={run_dir}"],
                          cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr[-1000:]
    assert len(lines) == 1 and lines[0].startswith("vecgossip: error: "), proc.stderr
    assert f"data.root='{root}'" in lines[0] and "download failed: " in lines[0] and "Tried" not in lines[0]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not run_dir.exists(), "a run directory was made"
    assert not (tmp_path / "nonexistent").exists(), "the failed download left folders behind"


def test_download_reason_is_one_short_line():
    from vecgossip.data.registry import download_reason
    err = RuntimeError("Error downloading train-images-idx3-ubyte.gz:\nTried https://a/, got:\n"
                       "<urlopen error [Errno -2] Name or service not known>\nTried http://b/, got:\n"
                       "<urlopen error [Errno -2] Name or service not known>\n")
    assert download_reason(err) == "no network ([Errno -2] Name or service not known)"
    assert download_reason(OSError("disk full")) == "disk full"


def test_torchvision_parsed_sets_are_cached_and_a_cached_start_skips_torchvision(data_root, tmp_path, monkeypatch):
    """MNIST's IDX files go through torchvision's parser once, then come from the cache (the same
    tensors); a process that finds the cache never imports torchvision (its import pulls in
    torch._dynamo: 1.4 s of every CLI start); a changed file is a new key."""
    import subprocess
    import sys

    from vecgossip.data import registry
    monkeypatch.setenv("VECGOSSIP_CACHE", str(tmp_path / "cache"))
    first = load("mnist", data_root, train=False)
    assert [p.name.startswith("MNIST-test-") for p in (tmp_path / "cache").glob("*.pt")] == [True]
    again = load("mnist", data_root, train=False)
    assert torch.equal(again.images, first.images) and torch.equal(again.labels, first.labels)
    assert first.images.shape == (10000, 1, 28, 28) and torch.equal(torch.bincount(first.labels)[:2],
                                                                     torch.tensor([980, 1135]))   # MNIST's test set
    code = ("import sys; from vecgossip.data.registry import load; "
            f"load('mnist', {str(data_root)!r}, train=False); print('torchvision' in sys.modules)")
    env = {**os.environ, "VECGOSSIP_CACHE": str(tmp_path / "cache")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr[-2000:]
    copy = tmp_path / "copy"                                    # the same files elsewhere, then one changed
    shutil.copytree(data_root / "MNIST", copy / "MNIST")
    key = registry.files_key(copy / "MNIST")
    assert key != registry.files_key(data_root / "MNIST")       # another folder: another key
    f = next(p for p in (copy / "MNIST").rglob("*") if p.is_file())
    os.utime(f, ns=(f.stat().st_atime_ns, f.stat().st_mtime_ns + 10**9))
    assert registry.files_key(copy / "MNIST") != key and registry.files_key(tmp_path / "none") is None


def test_image_count_is_what_imagefolder_finds(data_root):
    """The JPEG copy's cache key counts images as torchvision's ImageFolder does, without it."""
    from torchvision.datasets import ImageFolder

    from vecgossip.data.registry import image_count
    folder = data_root / "CIFAR-10-images" / "test"
    if not folder.is_dir():
        pytest.skip("no CIFAR-10 JPEG copy under the data root")
    assert image_count(folder) == len(ImageFolder(str(folder)).samples) == 10000
