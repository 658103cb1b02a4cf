#!/usr/bin/env bash
# Builds the CUDA configuration here (nvcc 13, sm_90, a baseline x86-64-v3 CPU target so the
# binaries run on the GPU machine's other CPU) and gathers what tools/gpu_test.sh needs on a lent
# GPU machine into .gpu/ (ignored by git, carried by the device tool): the test and benchmark
# binaries and the trainer, the shared libraries they need that such a machine lacks (not the
# driver, cuBLAS or cuDNN, which it has), OpenMPI's runtime, and MNIST gzipped. Then, through the
# device tool:
#   run(command="ADA_CALL_S=585 bash tools/gpu_test.sh session", carry=[".gpu"], timeout_s=600)
# (a first call; its last line names the second call's commands). Bundle at the commit you
# test: gpu_test.sh logs .gpu/commit, and a working tree newer than the binaries is not tested.
#   tools/gpu_bundle.sh [--no-build] [--downstream]
# --downstream also packs the BERT-tiny MLM shards and the SpamAssassin splits (about 7 MB
# compressed) for `gpu_test.sh downstream` (tools/downstream_study.py on the GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
build=build-cuda
out=.gpu
build_first=1 downstream=0
for arg in "$@"; do
  case "$arg" in
    --no-build) build_first=0 ;;
    --downstream) downstream=1 ;;
    *) echo "gpu_bundle: unknown argument '$arg' (use --no-build, --downstream)" >&2; exit 2 ;;
  esac
done
if (( build_first )); then
  command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DADA_BUILD_TESTS=ON -DADA_WITH_CUDA=ON \
        -DADA_WITH_NCCL=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DADA_MARCH=x86-64-v3 >/dev/null
  cmake --build "$build" -j "$(nproc)" --target test_cuda test_comm_gpu bench_step bench_ops bench_allreduce trainer conv_survey
fi
mkdir -p .git/info
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/lib-fallback" "$out/data/mnist"
for b in test_cuda test_comm_gpu bench_step bench_ops bench_allreduce trainer conv_survey; do
  cp "$build/bin/$b" "$out/bin/"
  strip --strip-debug "$out/bin/$b"
done
# Shared libraries: everything ldd resolves except the C runtime, the dynamic loader and the
# GPU libraries the machine provides (a carried libcuda would not match its driver). NCCL is not
# linked (opened at run time; 200 MB): gpu_test.sh finds the machine's own. The
# compiler's runtimes go to lib-fallback, used there only if the machine lacks them: an older
# libstdc++ ahead of the system's would break PyTorch, which the benchmarks start as their peer.
for b in "$out"/bin/*; do
  ldd "$b" | awk '/=> \//{print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libcuda.so*|libcublas*|libcudnn*) ;;
    libstdc++*|libgcc_s*|libgomp*|libz.so*) cp -L "$lib" "$out/lib-fallback/" ;;
    *) cp -L "$lib" "$out/lib/" ;;
  esac
done
# CUPTI (bench_step --profile's per-kernel table opens it at run time): the toolkit's, the
# version kernel_trace.cc is compiled against.
mkdir -p "$out/lib-cupti"
cupti=$(ls /usr/local/cuda/lib64/libcupti.so.13 /usr/local/cuda/lib/libcupti.so.13 \
          /usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13 2>/dev/null | head -1 || true)
if [[ -n "$cupti" ]]; then cp -L "$cupti" "$out/lib-cupti/"
else echo "gpu_bundle: libcupti.so.13 not found: the GPU profile will have no per-kernel table" >&2
fi
# The trainer's MPI runtime (a one-rank run starts as an MPI singleton, which needs orted, the
# MCA plugins and PMIx at the paths OpenMPI was built with; gpu_test.sh puts them there).
mkdir -p "$out/mpi"
cp /usr/bin/orted "$out/bin/"
cp -L /usr/bin/mpirun "$out/bin/mpirun"  # the multi-rank tests on one GPU (test_comm_gpu)
cp -r /usr/lib/x86_64-linux-gnu/openmpi "$out/mpi/openmpi"
rm -rf "$out/mpi/openmpi/include"  # headers: not needed to run, 5.6 MB of the 64 MiB a call carries
cp -r /usr/lib/x86_64-linux-gnu/pmix2 "$out/mpi/pmix2"
# Its headers and static archive are not needed to run either (5.5 MB; on 2026-12-06 the bundle
# was 1.1 MB over the limit with them).
rm -rf "$out/mpi/pmix2/include"
find "$out/mpi" -name '*.a' -delete
cp -r /usr/share/openmpi "$out/mpi/share-openmpi"
for f in t10k-images-idx3-ubyte t10k-labels-idx1-ubyte train-images-idx3-ubyte train-labels-idx1-ubyte; do
  if [[ -f data/mnist/$f.gz ]]; then cp "data/mnist/$f.gz" "$out/data/mnist/"
  elif [[ -f data/mnist/$f ]]; then gzip -c "data/mnist/$f" > "$out/data/mnist/$f.gz"
  else echo "gpu_bundle: data/mnist/$f missing: run tools/fetch_data.sh mnist" >&2; exit 1
  fi
done
# MLM shards of one corpus book for the paper's BERT-Large config over NCCL (tools/gpu_nccl.sh
# paper): Moby-Dick, ~300k tokens, about 1 MB.
bash tools/fetch_data.sh bert-vocab corpus >/dev/null
[[ -x build/bin/prepare_mlm ]] || cmake --build build -j "$(nproc)" --target prepare_mlm >/dev/null
build/bin/prepare_mlm --vocab data/bert/vocab.txt --out "$out/data/mlm-moby" data/corpus/moby-dick >/dev/null
if (( downstream )); then
  bash tools/fetch_data.sh mlm-shards spam >/dev/null
  tar -C data -czf "$out/data-downstream.tar.gz" mlm mlm-eval spam bert/vocab.txt
fi
# The binaries have this checkout's absolute paths compiled in (golden files, data).
pwd > "$out/source_dir"
git rev-parse HEAD > "$out/commit" 2>/dev/null || true
git status --short > "$out/dirty" 2>/dev/null || true
# Binaries and libraries travel packed with xz (34 MB against gzip's 44 on 2026-12-06, when
# gzip's left the bundle 0.2 MB under the limit); tools/gpu_unpack.sh unpacks them there.
tar -C "$out" -cf - bin lib lib-fallback lib-cupti mpi | xz -T0 -6 > "$out/pack.tar.xz"
rm -rf "$out/bin" "$out/lib" "$out/lib-fallback" "$out/lib-cupti" "$out/mpi"
du -sh "$out"
# The device tool moves at most 64 MiB: the working tree's files (tracked and untracked, not
# ignored) and the carried .gpu together. A bigger bundle would not arrive.
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
bytes=$(du -sb "$out" | cut -f1)
if (( tree + bytes > 64 * 1024 * 1024 )); then
  echo "gpu_bundle: the working tree ($tree bytes) and $out ($bytes bytes) are over the 64 MiB" \
       "the device tool moves: leave a binary out or shrink the data" >&2
  exit 1
fi
echo "gpu_bundle: ready at $(cat "$out/commit") ($bytes bytes, with the working tree $((tree + bytes)) of" \
     "67108864); on the GPU machine, .gpu carried: ADA_CALL_S=585 bash tools/gpu_test.sh session"
