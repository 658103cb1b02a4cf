// Which x86 instruction set the CPU kernels run with, chosen at run time. The build targets a
// baseline (ADA_MARCH, default x86-64-v3: AVX2+FMA) so one binary runs on every node of a
// mixed cluster; the GEMM kernels are built once per ISA (core/backend/cpu/gemm_*.cc) and
// picked here by CPUID. ADA_CPU_ISA=generic|avx2|avx512|amx lowers the level (never raises it),
// so the tests cover every path on the most capable machine. A binary started on a CPU without the
// baseline's features stops at once with a message naming them (no SIGILL).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace ada::cpu {

// Each level includes the ones below it. amx = avx512 plus AMX tiles with bf16 products
// (AMX-TILE, AMX-BF16, AVX512_BF16, and the operating system's permission to use the tile
// state): only the bf16 mode differs there (cpu::sbgemm runs on tiles, and the convolutions
// pick their kernels for that: core/backend/cpu/conv.cc).
enum class Isa { generic = 0, avx2 = 1, avx512 = 2, amx = 3 };

const char* isa_name(Isa isa);

// The -march the C++ code outside the dispatched kernels was built for (ADA_MARCH: x86-64-v3 by
// default): it decides the vector width of every other loop, so results depend on it too.
const char* build_march();

// The best level this CPU supports (avx512 needs AVX-512 F, BW, DQ and VL; amx, above). On Linux
// the first call asks the kernel for the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM); a
// refusal leaves the level at avx512.
Isa detected_isa();

// The level the kernels use: detected_isa(), lowered by ADA_CPU_ISA or set_isa(). Throws
// ConfigError for an ADA_CPU_ISA value that is not a level or above what the CPU has.
Isa isa();

// Forces the level (tests, benchmarks); DeviceError when the CPU lacks it.
void set_isa(Isa isa);

// True when the CPU has AVX512_BF16 dot products and the level in use is avx512 or amx, so bf16
// matrix products can run (core/precision.h). `why` (optional) gets the reason when false.
bool bf16_available(std::string* why = nullptr);

// Cache sizes in bytes. Only Eigen's GEMM (the generic level) sizes its blocks from the CPU's
// caches; our kernels use fixed blocks. ADA_CPU_CACHES=L1,L2,L3 (K and M suffixes: 32K,1M,16M)
// forces them, so one machine reproduces the summation orders of other CPU models (the tests run
// small and large caches: tests/CMakeLists.txt).
struct CacheSizes {
  int64_t l1, l2, l3;
};
// The sizes ADA_CPU_CACHES forces, or nullopt when it is unset; ConfigError when malformed.
std::optional<CacheSizes> forced_cache_sizes();
// Parses "L1,L2,L3"; ConfigError naming `what` (e.g. "ADA_CPU_CACHES=...") when malformed.
CacheSizes parse_cache_sizes(const std::string& value, const std::string& what);

// One line for logs and benchmark headers, e.g. "avx512 (cpu: amx, bf16)".
std::string isa_description();

}  // namespace ada::cpu
