#include "core/backend/cuda/kernel_trace.h"

#include <cupti.h>
#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "core/kernel_report.h"

namespace ada::cuda::kernel_trace {

namespace {

// CUPTI's functions, from the library opened at run time (the declarations in cupti.h give the
// types; nothing links against libcupti).
struct Cupti {
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivityEnable) enable = nullptr;
  decltype(&cuptiActivityDisable) disable = nullptr;
  decltype(&cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
  decltype(&cuptiActivityPushExternalCorrelationId) push = nullptr;
  decltype(&cuptiActivityPopExternalCorrelationId) pop = nullptr;
  decltype(&cuptiGetResultString) result_string = nullptr;
};

constexpr size_t kBufferBytes = 8 << 20;
constexpr CUpti_ExternalCorrelationKind kOpKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;
// The kinds enabled: kernels, and the API calls that launch them (external correlation records
// are made for traced API calls; cuBLAS and cuDNN launch through the driver API).
constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                         CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER,
                                         CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION};

struct Kernel {
  uint32_t correlation;
  std::string name;
  uint64_t ns;
};

struct State {
  std::mutex mu;
  Cupti api;
  bool loaded = false;
  std::string why_not;  // why nothing is collected ("" once collecting worked)
  std::vector<Kernel> kernels;
  std::unordered_map<uint32_t, uint64_t> op_of;  // correlation id -> the op name's address
};
State& state() {
  static State* s = new State;  // never destroyed: CUPTI may hand back buffers at exit
  return *s;
}
std::atomic<bool> g_active{false};

std::string result_text(CUptiResult r) {
  const char* s = nullptr;
  if (state().api.result_string && state().api.result_string(r, &s) == CUPTI_SUCCESS && s) return s;
  return "CUPTI error " + std::to_string(static_cast<int>(r));
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  State& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    CUpti_Activity* rec = nullptr;
    while (s.api.next_record(buffer, valid, &rec) == CUPTI_SUCCESS) {
      if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL ||
          rec->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
        // The struct of the header this was compiled with (CUDA 13's CUPTI writes this version).
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
        s.kernels.push_back({k->correlationId, k->name ? k->name : "(unnamed)",
                             k->end > k->start ? k->end - k->start : 0});
      } else if (rec->kind == CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) {
        const auto* e = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(rec);
        if (e->externalKind == kOpKind) s.op_of[e->correlationId] = e->externalId;
      }
    }
  }
  std::free(buffer);
}

// Opens CUPTI once; false (and why_not set) if it cannot.
bool load(State& s) {
  if (s.loaded) return true;
  if (!s.why_not.empty()) return false;
  const char* env = std::getenv("ADA_CUPTI_LIBRARY");
  const std::string path = env && *env ? env : "libcupti.so.13";
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    s.why_not = "CUPTI not opened (" + path + ": " + (e ? e : "?") +
                "); set ADA_CUPTI_LIBRARY to CUDA 13's libcupti.so.13 for the per-kernel table";
    return false;
  }
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
    if (!fn && s.why_not.empty()) s.why_not = "CUPTI at " + path + " lacks " + name;
  };
  sym(s.api.register_callbacks, "cuptiActivityRegisterCallbacks");
  sym(s.api.enable, "cuptiActivityEnable");
  sym(s.api.disable, "cuptiActivityDisable");
  sym(s.api.flush_all, "cuptiActivityFlushAll");
  sym(s.api.next_record, "cuptiActivityGetNextRecord");
  sym(s.api.push, "cuptiActivityPushExternalCorrelationId");
  sym(s.api.pop, "cuptiActivityPopExternalCorrelationId");
  sym(s.api.result_string, "cuptiGetResultString");
  if (!s.why_not.empty()) return false;
  const CUptiResult r = s.api.register_callbacks(buffer_requested, buffer_completed);
  if (r != CUPTI_SUCCESS) {
    s.why_not = "CUPTI refused its buffer callbacks: " + result_text(r);
    return false;
  }
  s.loaded = true;
  return true;
}

}  // namespace

bool start() {
  State& s = state();
  if (!load(s)) return false;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.kernels.clear();
    s.op_of.clear();
  }
  for (CUpti_ActivityKind k : kKinds) {
    const CUptiResult r = s.api.enable(k);
    if (r != CUPTI_SUCCESS) {
      s.why_not = "CUPTI refused activity kind " + std::to_string(static_cast<int>(k)) + ": " +
                  result_text(r);
      for (CUpti_ActivityKind d : kKinds) s.api.disable(d);
      return false;
    }
  }
  g_active = true;
  return true;
}

void stop() {
  State& s = state();
  if (!g_active) return;
  g_active = false;
  s.api.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  for (CUpti_ActivityKind k : kKinds) s.api.disable(k);
}

bool active() {
  return g_active.load(std::memory_order_relaxed);
}

void push_op(const char* op) {
  state().api.push(kOpKind, reinterpret_cast<uint64_t>(op));
}

void pop_op() {
  uint64_t last = 0;
  state().api.pop(kOpKind, &last);
}

std::string report() {
  State& s = state();
  // Buffers CUPTI still holds (stop() flushed; this catches any it completed later).
  if (s.loaded) s.api.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.kernels.empty())
    return s.why_not.empty() ? "kernels: none recorded by CUPTI\n" : "kernels: " + s.why_not + "\n";
  std::vector<KernelRecord> recs;
  recs.reserve(s.kernels.size());
  for (const Kernel& k : s.kernels) {
    const auto it = s.op_of.find(k.correlation);
    // The external id is the address of the op's name, a string literal (OpTimer's argument).
    recs.push_back(
        {k.name, it == s.op_of.end() ? "" : reinterpret_cast<const char*>(it->second), k.ns});
  }
  s.kernels.clear();
  s.op_of.clear();
  return kernel_report(recs);
}

}  // namespace ada::cuda::kernel_trace
