// Built for plain x86-64 (core/CMakeLists.txt), so that the start-up check below runs on any
// x86-64 CPU, whatever ADA_MARCH the rest of the program uses.
#include "core/cpu_isa.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/error.h"

namespace ada::cpu {
namespace {

// The features the baseline -march lets the compiler use anywhere (ADA_BASE_* = 0/1 from CMake).
__attribute__((constructor(101))) void check_baseline() {
  __builtin_cpu_init();
  // (in the baseline, present on this CPU, name)
#define ADA_FEATURE(base, name) \
  { base != 0, __builtin_cpu_supports(name) != 0, name }
  const struct {
    bool base, have;
    const char* name;
  } features[] = {
      ADA_FEATURE(ADA_BASE_AVX, "avx"),           ADA_FEATURE(ADA_BASE_AVX2, "avx2"),
      ADA_FEATURE(ADA_BASE_FMA, "fma"),           ADA_FEATURE(ADA_BASE_BMI2, "bmi2"),
      ADA_FEATURE(ADA_BASE_AVX512F, "avx512f"),   ADA_FEATURE(ADA_BASE_AVX512BW, "avx512bw"),
      ADA_FEATURE(ADA_BASE_AVX512DQ, "avx512dq"), ADA_FEATURE(ADA_BASE_AVX512VL, "avx512vl")};
#undef ADA_FEATURE
  char missing[160] = "";
  for (const auto& f : features) {
    if (f.base && !f.have) {
      std::strncat(missing, " ", sizeof(missing) - std::strlen(missing) - 1);
      std::strncat(missing, f.name, sizeof(missing) - std::strlen(missing) - 1);
    }
  }
  if (missing[0]) {
    std::fprintf(stderr,
                 "adatrain: this binary was built with -march=%s, but this CPU lacks:%s.\n"
                 "Rebuild with a lower baseline, e.g. cmake -DADA_MARCH=x86-64-v2 (the GEMM "
                 "kernels still pick AVX2/AVX-512 at run time).\n",
                 ADA_BASE_MARCH, missing);
    std::fflush(stderr);
    _exit(70);
  }
}

// AMX tiles with bf16 products, enabled by the OS: CPUID.(7,0):EDX bits 22 (AMX-BF16) and 24
// (AMX-TILE), XCR0 bits 17-18 (tile configuration and data state), and on Linux >= 5.16 the
// process's permission for the tile data (without it the first tile instruction faults).
bool amx_usable() {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 22)) || !(d & (1u << 24)))
    return false;
  if (!__builtin_cpu_supports("avx512bf16")) return false;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return false;  // OSXSAVE
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & (3u << 17)) != (3u << 17)) return false;
#if defined(__linux__) && defined(SYS_arch_prctl)
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) return false;
#endif
  return true;
}

Isa detect() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return amx_usable() ? Isa::amx : Isa::avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::avx2;
  return Isa::generic;
}

// -1: not chosen yet.
std::atomic<int> g_isa{-1};

Isa from_env() {
  const Isa cpu = detected_isa();
  const char* v = std::getenv("ADA_CPU_ISA");
  if (!v || !*v) return cpu;
  for (Isa level : {Isa::generic, Isa::avx2, Isa::avx512, Isa::amx}) {
    if (std::strcmp(v, isa_name(level)) != 0) continue;
    if (level > cpu)
      ADA_THROW(ConfigError) << "ADA_CPU_ISA=" << v << ": this CPU supports at most '"
                             << isa_name(cpu) << "'; unset ADA_CPU_ISA or choose a lower level";
    return level;
  }
  ADA_THROW(ConfigError) << "ADA_CPU_ISA=" << v
                         << ": unknown level; use generic, avx2, avx512 or amx (or unset it)";
}

}  // namespace

const char* build_march() {
  return ADA_BASE_MARCH;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::generic:
      return "generic";
    case Isa::avx2:
      return "avx2";
    case Isa::avx512:
      return "avx512";
    case Isa::amx:
      return "amx";
  }
  return "?";
}

Isa detected_isa() {
  static const Isa cpu = detect();
  return cpu;
}

Isa isa() {
  int v = g_isa.load(std::memory_order_acquire);
  if (v < 0) {
    v = static_cast<int>(from_env());
    g_isa.store(v, std::memory_order_release);
  }
  return static_cast<Isa>(v);
}

void set_isa(Isa level) {
  if (level > detected_isa())
    ADA_THROW(DeviceError) << "cpu::set_isa(" << isa_name(level) << "): this CPU supports at most '"
                           << isa_name(detected_isa()) << "'";
  g_isa.store(static_cast<int>(level), std::memory_order_release);
}

bool bf16_available(std::string* why) {
  __builtin_cpu_init();
  const char* reason = nullptr;
  if (!__builtin_cpu_supports("avx512bf16"))
    reason = "this CPU has no AVX512_BF16 dot products (vdpbf16ps)";
  else if (isa() < Isa::avx512)
    reason = "the CPU kernels are limited below avx512 (ADA_CPU_ISA or set_isa)";
  if (reason && why) *why = reason;
  return reason == nullptr;
}

CacheSizes parse_cache_sizes(const std::string& value, const std::string& what) {
  int64_t out[3];
  size_t pos = 0;
  for (int i = 0; i < 3; ++i) {
    const size_t end = std::min(value.find(',', pos), value.size());
    const std::string item = value.substr(pos, end - pos);
    char* rest = nullptr;
    const long long n = item.empty() ? 0 : std::strtoll(item.c_str(), &rest, 10);
    const std::string suffix = rest ? rest : "";
    const int64_t unit = suffix.empty() ? 1 : suffix == "K" ? 1 << 10 : suffix == "M" ? 1 << 20 : 0;
    if (n <= 0 || unit == 0 || n > (int64_t(1) << 40) / unit || (i < 2) != (end < value.size()))
      ADA_THROW(ConfigError)
          << what << ": expected three positive sizes L1,L2,L3 in bytes with an optional K or M "
          << "suffix (e.g. 32K,1M,16M); unset it to use the CPU's own";
    out[i] = n * unit;
    pos = end + 1;
  }
  return {out[0], out[1], out[2]};
}

std::optional<CacheSizes> forced_cache_sizes() {
  const char* v = std::getenv("ADA_CPU_CACHES");
  if (!v || !*v) return std::nullopt;
  return parse_cache_sizes(v, std::string("ADA_CPU_CACHES=") + v);
}

std::string isa_description() {
  std::string s = isa_name(isa());
  s += " (cpu: ";
  s += isa_name(detected_isa());
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512bf16")) s += ", bf16";
  if (const auto c = forced_cache_sizes())
    s += ", caches forced to " + std::to_string(c->l1) + "/" + std::to_string(c->l2) + "/" +
         std::to_string(c->l3);
  s += ")";
  return s;
}

}  // namespace ada::cpu
