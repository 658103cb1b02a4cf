#!/usr/bin/env bash
# On the GPU machine: unpacks .gpu/pack.tar.xz (tools/gpu_bundle.sh's binaries and libraries) into
# .gpu once, with tar's xz when the machine has it, else with Python's tarfile (that machine has
# Python for PyTorch). Used by gpu_test.sh and gpu_nccl.sh; ADA_UNPACK_WITH=python forces the second.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -d .gpu/bin || ! -f .gpu/pack.tar.xz ]] && exit 0
if [[ "${ADA_UNPACK_WITH:-}" != python ]] && command -v xz >/dev/null; then
  tar -C .gpu -xJf .gpu/pack.tar.xz
else
  python3 - <<'PY'
import tarfile
with tarfile.open(".gpu/pack.tar.xz") as t:
    kw = {"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}
    t.extractall(".gpu", **kw)
PY
fi
