// The per-kernel table of bench_step --profile on a GPU: the kernels a kernel tracer (CUPTI, in
// core/backend/cuda/kernel_trace.cc) saw, grouped under the op that launched them. Kept apart
// from the tracer so that the CPU build tests it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ada {

// One kernel execution: its (mangled) name, the innermost op it ran in ("" outside any op) and
// its GPU time.
struct KernelRecord {
  std::string name;
  std::string op;
  uint64_t ns = 0;
};

// A kernel's name for a table: demangled, without the argument list and the ada namespaces, with
// bf16 and f16 for CUDA's __nv_bfloat16 and __half, at most `width` characters (the tail cut and
// marked with "...").
std::string readable_kernel_name(const std::string& mangled, size_t width = 60);

// One block per op, largest first: the op's line (its kernels' calls and GPU milliseconds, its
// share of all kernels' time), then each of its kernels, largest first, with calls, milliseconds,
// share and microseconds a call. Kernels outside any op are listed under "(outside ops)". At
// most `max_lines` lines after the header; the rest is counted in a last line.
std::string kernel_report(const std::vector<KernelRecord>& records, size_t max_lines = 60);

}  // namespace ada
