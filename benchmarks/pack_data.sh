#!/usr/bin/env bash
# MNIST for a lent GPU (benchmarks/gpu_check.py): the device reaches nothing outside the repo, and
# ../shared does not travel. Packs $VECGOSSIP_DATA/MNIST/raw (53 MB of IDX files) into
# .gpudata/mnist.tar.gz (~11 MB, git-ignored); carry `.gpudata` and unpack it on the device:
#   tar xzf .gpudata/mnist.tar.gz -C /tmp && export VECGOSSIP_DATA=/tmp/data
set -euo pipefail
cd "$(dirname "$0")/.."
src="${VECGOSSIP_DATA:-$(cd .. && pwd)/shared/data}"
mkdir -p .gpudata
tar czf .gpudata/mnist.tar.gz --transform 's,^,data/,' -C "$src" MNIST/raw
ls -l .gpudata/mnist.tar.gz
