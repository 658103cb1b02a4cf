#!/usr/bin/env bash
# Installs what Adatrain needs from Debian's packages, and only what is missing.
# Idempotent: a second run installs nothing. Runs `apt-get update` at most once.
#   tools/setup.sh            build + test dependencies (with python3-yaml and matplotlib for
#                             the study runner, its test and the plots tools/train.sh draws;
#                             pyflakes for the Python tools' lint test)
#   tools/setup.sh --bench    also PyTorch (python3-torch) for the benchmark twins and golden files,
#                             and the tuned twin's runtime: OpenMP OpenBLAS and tcmalloc
#   tools/setup.sh --train    the same as no option (kept for scripts that pass it)
#   tools/setup.sh --fuzz     also clang, libFuzzer and clang's OpenMP, for tools/fuzz.sh
#   tools/setup.sh --twins    also PyTorch (python3-torch, ~20 s): the tests that check the
#                             benchmark twins against PyTorch's own modules (tools/test.sh)
#   tools/setup.sh --slurm    also Slurm 22.05 and MUNGE, for tools/slurm_test.sh (tools/test.sh)
set -euo pipefail

packages=(cmake g++ make ccache clang-format libeigen3-dev libyaml-cpp-dev libspdlog-dev libopenmpi-dev
          openmpi-bin libgtest-dev zlib1g-dev libjpeg62-turbo-dev python3-numpy
          nlohmann-json3-dev libcli11-dev python3-yaml python3-matplotlib libprotobuf-dev
          protobuf-compiler python3-protobuf python3-pyflakes xz-utils)
for arg in "$@"; do
  case "$arg" in
    --bench) packages+=(python3-torch python3-torchvision python3-numpy libopenblas0-openmp
                       libtcmalloc-minimal4) ;;
    --train) ;;
    --fuzz) packages+=(clang libclang-rt-14-dev libomp-dev) ;;
    --twins) packages+=(python3-torch) ;;
    --slurm) packages+=(slurmctld slurmd slurm-client munge slurm-wlm-basic-plugins) ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown option '$arg' (known: --bench, --train, --fuzz, --twins, --slurm)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages already installed"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi
echo "setup: installing ${missing[*]}"
$SUDO apt-get update -qq || { echo "setup: apt-get update failed; check the package sources" >&2; exit 1; }
for p in "${missing[@]}"; do
  if ! apt-cache show "$p" >/dev/null 2>&1; then
    echo "setup: package '$p' is not available from the configured Debian sources; Adatrain needs it" >&2
    exit 1
  fi
done
if ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/tmp/adatrain-setup.log 2>&1; then
  tail -20 /tmp/adatrain-setup.log >&2
  echo "setup: apt-get install failed for: ${missing[*]} (full log: /tmp/adatrain-setup.log)" >&2
  exit 1
fi
echo "setup: installed ${missing[*]}"
