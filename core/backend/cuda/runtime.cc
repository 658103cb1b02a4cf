// CUDA runtime seam: the caching device allocator, the per-device compute stream with its
// cuBLAS/cuDNN handles, copies and argument checks. Every CUDA status is checked.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <vector>

#include "core/backend/cuda/cuda_common.h"
#include "core/backend/cuda/kernel_trace.h"
#include "core/graph_memory.h"
#include "core/random.h"

namespace ada::cuda {
namespace {

constexpr int kMaxDevices = 16;
std::atomic<bool> g_profiling{false};  // set_profiling

// The system allocator under the cache: nullptr when the device is out of memory.
void* device_malloc(size_t bytes, int device) {
  set_device(device);
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e == cudaSuccess) return p;
  cudaGetLastError();
  if (e == cudaErrorMemoryAllocation) return nullptr;
  const std::string why = unavailable_reason();
  ADA_THROW(DeviceError) << "cannot allocate on cuda:" << device << ": " << cudaGetErrorString(e)
                         << (why.empty() ? "" : "; ") << why;
  return nullptr;
}
void device_free(void* p, int) {
  cudaFree(p);
}
void free_pinned(void* p) {
  cudaFreeHost(p);
}

// One device's state. Created on first use and never destroyed: tensors freed during static
// destruction must still find it (their blocks are then simply left to the driver).
struct DeviceState {
  explicit DeviceState(int device) : memory(device_malloc, device_free, device, free_pinned) {}
  // The device pool (up to 1 MiB: 512-byte bins, exact reuse; larger: 2 MiB bins, up to 1.25x)
  // and the graphs' pools (core/graph_memory.h).
  GraphMemory memory;
  const Generator* capture_gen = nullptr;  // the open capture's dropout generator
  std::once_flag shift_once;
  uint64_t* shift = nullptr;  // philox_shift(): device memory, never freed
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  void* cublas_workspace = nullptr;  // the handle's own, never freed
  cudnnHandle_t cudnn = nullptr;
  std::once_flag stream_once, cublas_once, cudnn_once, fault_once;
  std::atomic<DeviceFault*> fault_host{nullptr};  // mapped pinned memory, made on first use
  DeviceFault* fault_device = nullptr;
};

DeviceState& state(int device) {
  static DeviceState* states[kMaxDevices] = {};
  static std::mutex mu;
  ADA_CHECK_ARG(device >= 0 && device < kMaxDevices, DeviceError)
      << "CUDA device index " << device << " out of range";
  std::lock_guard<std::mutex> lock(mu);
  if (!states[device]) states[device] = new DeviceState(device);
  return *states[device];
}

std::string bytes_str(int64_t b) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(b) / (1 << 20));
  return buf;
}

}  // namespace

bool built_with_cuda() {
  return true;
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" status
    return 0;
  }
  return n;
}

std::string unavailable_reason() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return std::string("no usable CUDA device: cudaGetDeviceCount failed: ") +
           cudaGetErrorString(e);
  }
  if (n == 0) {
    const char* vis = std::getenv("CUDA_VISIBLE_DEVICES");
    return std::string("no CUDA device visible") +
           (vis ? std::string(" (CUDA_VISIBLE_DEVICES=") + vis + ")" : std::string());
  }
  return "";
}

void require_device(int index) {
  const std::string why = unavailable_reason();
  ADA_CHECK_ARG(why.empty(), DeviceError) << "cuda:" << index << " requested, but " << why;
  const int n = device_count();
  ADA_CHECK_ARG(index >= 0 && index < n, DeviceError)
      << "cuda:" << index << " requested, but this machine has " << n
      << " CUDA device(s): cuda:0 .. cuda:" << n - 1;
}

std::string device_name(int index) {
  cudaDeviceProp prop{};
  ADA_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  return prop.name;
}

std::array<uint8_t, 16> device_uuid(int index) {
  cudaDeviceProp prop{};
  ADA_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  std::array<uint8_t, 16> id{};
  static_assert(sizeof(prop.uuid.bytes) == 16);
  std::memcpy(id.data(), prop.uuid.bytes, id.size());
  return id;
}

void set_device(int device) {
  thread_local int current = -1;
  if (current == device) return;
  ADA_CUDA_CHECK(cudaSetDevice(device));
  current = device;
}

cudaStream_t stream(int device) {
  DeviceState& st = state(device);
  std::call_once(st.stream_once, [&] {
    set_device(device);
    ADA_CUDA_CHECK(cudaStreamCreateWithFlags(&st.stream, cudaStreamNonBlocking));
  });
  return st.stream;
}

cublasHandle_t cublas(int device) {
  DeviceState& st = state(device);
  std::call_once(st.cublas_once, [&] {
    set_device(device);
    ADA_CUBLAS_CHECK(cublasCreate(&st.cublas));
    ADA_CUBLAS_CHECK(cublasSetStream(st.cublas, stream(device)));
    // A workspace of its own (after cublasSetStream, which resets it to cuBLAS's pool), 32 MiB as
    // cuBLAS's default on Hopper: GEMMs captured into a CUDA graph use it, as eager ones do,
    // instead of allocating their workspace inside each graph.
    constexpr size_t kWorkspaceBytes = size_t{32} << 20;
    ADA_CUDA_CHECK(cudaMalloc(&st.cublas_workspace, kWorkspaceBytes));
    ADA_CUBLAS_CHECK(cublasSetWorkspace(st.cublas, st.cublas_workspace, kWorkspaceBytes));
    // FP32 results by default; TF32 tensor cores only where a caller opts in (math mode).
    ADA_CUBLAS_CHECK(cublasSetMathMode(st.cublas, CUBLAS_DEFAULT_MATH));
  });
  return st.cublas;
}

cudnnHandle_t cudnn(int device) {
  DeviceState& st = state(device);
  std::call_once(st.cudnn_once, [&] {
    set_device(device);
    ADA_CUDNN_CHECK(cudnnCreate(&st.cudnn));
    ADA_CUDNN_CHECK(cudnnSetStream(st.cudnn, stream(device)));
  });
  return st.cudnn;
}

void* alloc(size_t bytes, int device) {
  GraphMemory& memory = state(device).memory;
  void* p = memory.alloc(bytes);
  if (!p) {
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    ADA_THROW(DeviceError) << "out of memory on cuda:" << device << " allocating "
                           << bytes_str(static_cast<int64_t>(memory.round(bytes)))
                           << " (live tensors " << bytes_str(memory_stats(device).allocated)
                           << ", device free " << bytes_str(static_cast<int64_t>(free_b)) << " of "
                           << bytes_str(static_cast<int64_t>(total_b))
                           << "); lower the batch size (data.batch_size) or sequence length";
  }
  return p;
}

void free(void* ptr, size_t bytes, int device) noexcept {
  if (ptr) state(device).memory.free(ptr, bytes);
}

void empty_cache(int device) {
  refuse_in_capture(device, "empty_cache", "it waits for the device");
  set_device(device);
  ADA_CUDA_CHECK(cudaStreamSynchronize(stream(device)));
  state(device).memory.release_cached();
}

// The device pool's figures plus every graph pool's. With graphs the peaks are each pool's own
// peak added up: an upper bound of the peak of the sum.
MemoryStats memory_stats(int device) {
  return state(device).memory.stats();
}
void reset_peak(int device) {
  state(device).memory.reset_peak();
}

bool capturing(int device) {
  return state(device).memory.capturing();
}

void refuse_in_capture(int device, const char* op, const char* why) {
  if (!capturing(device)) return;
  ADA_THROW(DeviceError) << op << " cannot be captured in a CUDA graph on cuda:" << device << ": "
                         << why << " (the capture was abandoned; run this step without graphs)";
}

void note_draw(int device, const Generator& gen) {
  DeviceState& st = state(device);
  if (!st.memory.capturing_here() || &gen == st.capture_gen) return;
  refuse_in_capture(device, "dropout",
                    st.capture_gen ? "it draws from a generator other than the one the capture "
                                     "was given (Graph::capture's generator)"
                                   : "it draws from a generator the capture was not given (pass "
                                     "the model's rng() to Graph::capture)");
}

const uint64_t* philox_shift(int device) {
  DeviceState& st = state(device);
  std::call_once(st.shift_once, [&] {
    set_device(device);
    void* p = nullptr;
    ADA_CUDA_CHECK(cudaMalloc(&p, sizeof(uint64_t)));
    // On the compute stream: ordered before every kernel that reads it (never made while a
    // capture runs: Graph::capture makes it first).
    ADA_CUDA_CHECK(cudaMemsetAsync(p, 0, sizeof(uint64_t), stream(device)));
    st.shift = static_cast<uint64_t*>(p);
  });
  return st.shift;
}

void keep_for_graph(int device, void* pinned) {
  GraphMemory& memory = state(device).memory;
  ADA_CHECK(memory.capturing_here())
      << "keep_for_graph: cuda:" << device << " is not being captured by this thread";
  memory.keep(pinned);
}

struct Graph::Impl {
  int device = -1;
  cudaGraphExec_t exec = nullptr;
  int64_t nodes = 0;
  std::shared_ptr<GraphMemory::Pool> pool;
  Generator* gen = nullptr;
  uint64_t first = 0, per_step = 0;  // the capture's counters on gen: [first, first + per_step)
  int64_t replays = 0;
};

Graph::Graph() = default;

Graph::~Graph() {
  if (!impl_) return;
  try {
    set_device(impl_->device);
    cudaStreamSynchronize(stream(impl_->device));  // its replays are done with the memory
    cudaGraphExecDestroy(impl_->exec);
    cudaGetLastError();
    state(impl_->device).memory.retire(impl_->pool);
  } catch (...) {  // a destructor must not throw; the memory is then left to the process's end
  }
}

void Graph::capture(int device, const std::function<void()>& work, Generator* generator) {
  ADA_CHECK_ARG(!impl_, DeviceError)
      << "Graph::capture: this graph holds a capture already; make another Graph";
  ADA_CHECK_ARG(!g_profiling.load() && !kernel_trace::active(), DeviceError)
      << "Graph::capture: per-op profiling or kernel tracing is on (its events and host "
         "timings cannot be replayed); turn them off to capture";
  require_device(device);
  set_device(device);
  DeviceState& st = state(device);
  cudaStream_t s = stream(device);
  philox_shift(device);  // made (and zeroed) now, not while capturing
  const uint64_t gen_first = generator ? generator->offset() : 0;
  std::shared_ptr<GraphMemory::Pool> pool = st.memory.open_capture();
  ADA_CHECK_ARG(pool, DeviceError)
      << "Graph::capture: cuda:" << device << " is being captured already";
  st.capture_gen = generator;
  // Relaxed: the caching allocator may call cudaMalloc for the graph's pool while capturing.
  cudaError_t began = cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed);
  if (began == cudaSuccess) st.memory.capture_began();
  cudaGraph_t graph = nullptr;
  // The stream capture ends before the allocator's: until it has, another thread's free must
  // still wait (a free given to the driver now would invalidate it).
  auto end_capture = [&]() {
    st.capture_gen = nullptr;
    const cudaError_t e = cudaStreamEndCapture(s, &graph);
    cudaGetLastError();  // an invalidated capture leaves no sticky error for eager work
    st.memory.close_capture();
    return e;
  };
  auto abandon = [&]() {
    if (graph) cudaGraphDestroy(graph);
    st.memory.retire(pool);
  };
  if (began != cudaSuccess) {
    end_capture();
    abandon();
    ADA_THROW(DeviceError) << "Graph::capture: cudaStreamBeginCapture on cuda:" << device
                           << " failed: " << cudaGetErrorString(began);
  }
  try {
    work();
  } catch (...) {
    end_capture();
    abandon();
    throw;
  }
  const cudaError_t ended = end_capture();
  st.memory.sweep_retired();  // what frees during the capture left to do
  if (ended != cudaSuccess || !graph) {
    abandon();
    ADA_THROW(DeviceError) << "Graph::capture on cuda:" << device
                           << ": the capture was invalidated (" << cudaGetErrorString(ended)
                           << "): an op did what a graph cannot hold without saying so (a wait "
                              "for the device, a copy from pageable host memory, another "
                              "stream); run the step without graphs";
  }
  size_t n = 0;
  cudaGraphExec_t exec = nullptr;
  const cudaError_t got = cudaGraphGetNodes(graph, nullptr, &n);
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  graph = nullptr;
  if (got != cudaSuccess || made != cudaSuccess) {
    cudaGetLastError();
    abandon();
    ADA_THROW(DeviceError) << "Graph::capture on cuda:" << device << ": cannot instantiate the "
                           << "captured graph: "
                           << cudaGetErrorString(made != cudaSuccess ? made : got);
  }
  impl_ = std::make_unique<Impl>();
  impl_->device = device;
  impl_->exec = exec;
  impl_->nodes = static_cast<int64_t>(n);
  impl_->pool = std::move(pool);
  impl_->gen = generator;
  impl_->first = gen_first;
  impl_->per_step = generator ? generator->offset() - gen_first : 0;
}

void Graph::replay() {
  ADA_CHECK_ARG(impl_, DeviceError) << "Graph::replay: nothing was captured";
  Impl& g = *impl_;
  set_device(g.device);
  // The first replay draws the counters the capture reserved; each later one the next step's.
  const uint64_t shift =
      g.per_step > 0 && g.replays > 0 ? g.gen->take(g.per_step) - g.first : uint64_t{0};
  ++g.replays;
  cudaStream_t s = stream(g.device);
  uint64_t* slot = const_cast<uint64_t*>(philox_shift(g.device));
  if (shift != 0) write_u64(slot, shift, s);
  const cudaError_t launched = cudaGraphLaunch(g.exec, s);
  if (shift != 0) write_u64(slot, 0, s);  // eager kernels after it draw unshifted
  ADA_CUDA_CHECK(launched);
}

bool Graph::captured() const {
  return impl_ != nullptr;
}
int64_t Graph::nodes() const {
  return impl_ ? impl_->nodes : 0;
}
int64_t Graph::pool_bytes() const {
  return impl_ ? GraphMemory::reserved(*impl_->pool) : 0;
}

void copy(void* dst, bool dst_on_device, const void* src, bool src_on_device, size_t bytes,
          int device) {
  if (bytes == 0) return;
  set_device(device);
  cudaStream_t s = stream(device);
  cudaMemcpyKind kind = dst_on_device
                            ? (src_on_device ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                            : (src_on_device ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  if (!dst_on_device)
    refuse_in_capture(device, "a copy to the host (Tensor::to, a loss or metric read)",
                      "the host would read memory that no kernel has written yet");
  else if (!src_on_device)
    refuse_in_capture(device, "a copy from host memory to the device",
                      "a replay would copy the capture's host bytes again, or fail on pageable "
                      "memory; keep the step's inputs on the device");
  ADA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, s));
  // Device to host: the host reads dst next, so wait. Host to device: an async copy from
  // pageable memory returns once the source is staged (CUDA's documented behaviour), so the
  // host may reuse it at once and the queued kernels keep running (no drain per batch copy).
  if (!dst_on_device) {
    ADA_CUDA_CHECK(cudaStreamSynchronize(s));
    raise_device_fault(device);
  }
}

DeviceFault* device_fault_slot(int device) {
  DeviceState& st = state(device);
  std::call_once(st.fault_once, [&] {
    set_device(device);
    void* host = nullptr;
    ADA_CUDA_CHECK(cudaHostAlloc(&host, sizeof(DeviceFault), cudaHostAllocMapped));
    std::memset(host, 0, sizeof(DeviceFault));
    void* dev = nullptr;
    ADA_CUDA_CHECK(cudaHostGetDevicePointer(&dev, host, 0));
    st.fault_device = static_cast<DeviceFault*>(dev);
    st.fault_host.store(static_cast<DeviceFault*>(host), std::memory_order_release);
  });
  return st.fault_device;
}

void raise_device_fault(int device) {
  DeviceFault* f = state(device).fault_host.load(std::memory_order_acquire);
  if (!f) return;  // no op has asked for the slot yet
  // A kernel claims the slot with code ~0, writes the fields, then stores its code.
  unsigned int code = __atomic_load_n(&f->code, __ATOMIC_ACQUIRE);
  if (code == kFaultNone || code == ~0u) return;
  const DeviceFault got = {code, 0, f->where, f->value, f->limit, f->extra};
  if (!__atomic_compare_exchange_n(&f->code, &code, kFaultNone, false, __ATOMIC_ACQ_REL,
                                   __ATOMIC_ACQUIRE))
    return;  // another thread raises it
  std::ostringstream msg;
  switch (got.code) {
    case kFaultEmbeddingId:
      msg << "embedding: id " << got.value << " at position " << got.where
          << " is outside the vocabulary [0, " << got.limit << ")";
      break;
    case kFaultEmbeddingBackwardId:
      msg << "embedding_backward: id " << got.value << " outside [0, " << got.limit << ")";
      break;
    case kFaultCrossEntropyTarget:
      msg << "cross_entropy: target " << got.value << " at row " << got.where << " is outside [0, "
          << got.limit << ") (and is not ignore_index " << got.extra << ")";
      break;
    default:
      msg << "a kernel reported fault code " << got.code;
  }
  msg << " (found on cuda:" << device << " by a queued op; raised at the next wait for the device)";
  throw ShapeError(msg.str());
}

void wait_for(int device) {
  refuse_in_capture(device, "a wait for the device (a result read on the host)",
                    "nothing runs while a graph is captured");
  set_device(device);
  ADA_CUDA_CHECK(cudaStreamSynchronize(stream(device)));
  raise_device_fault(device);
}

void zero(void* ptr, size_t bytes, int device) {
  if (bytes == 0) return;
  set_device(device);
  ADA_CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, stream(device)));
}

void synchronize(int device) {
  wait_for(device);
}

int require_f32(const char* op, std::initializer_list<const Tensor*> ts, DType also) {
  int device = -1;
  for (const Tensor* t : ts) {
    ADA_CHECK_ARG(t->defined(), ShapeError) << op << ": an argument is undefined";
    ADA_CHECK_ARG(!t->device().is_cpu(), DeviceError)
        << op << ": tensor " << t->str() << " is on the CPU while others are on CUDA; move it with "
        << ".to(Device::cuda())";
    if (device < 0) device = t->device().index;
    ADA_CHECK_ARG(t->device().index == device, DeviceError)
        << op << ": tensors on different CUDA devices (" << t->str() << " vs cuda:" << device
        << ")";
    ADA_CHECK_ARG(t->dtype() == DType::f32 || t->dtype() == also, DTypeError)
        << op << ": expected f32"
        << (also != DType::f32 ? std::string(" or ") + dtype_name(also) : "") << ", got "
        << t->str();
  }
  ADA_CHECK(device >= 0) << op << ": no tensor given";
  set_device(device);
  return device;
}

void require_on(const char* op, int device, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    ADA_CHECK_ARG(t->defined() && !t->device().is_cpu() && t->device().index == device, DeviceError)
        << op << ": tensor " << t->str() << " is not on cuda:" << device
        << " with the op's other tensors";
}

void require_index(const char* op, const Tensor& t, const char* arg, int device) {
  ADA_CHECK_ARG(t.defined(), ShapeError) << op << ": '" << arg << "' is undefined";
  ADA_CHECK_ARG(!t.device().is_cpu() && t.device().index == device, DeviceError)
      << op << ": '" << arg << "' is " << t.str() << ", expected on cuda:" << device;
  ADA_CHECK_ARG(t.dtype() == DType::i64 || t.dtype() == DType::i32, DTypeError)
      << op << ": '" << arg << "' must be i64 or i32, got " << t.str();
}

namespace {
struct ProfileRecord {
  const char* op;
  cudaEvent_t start, end;
  int depth;
  double host_ms;
};
thread_local int t_op_depth = 0;
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
std::mutex g_profile_mu;
std::vector<ProfileRecord> g_profile;
cudaEvent_t make_event() {
  cudaEvent_t e;
  ADA_CUDA_CHECK(cudaEventCreate(&e));
  return e;
}
}  // namespace

void set_profiling(bool on) {
  g_profiling = on;
}

void set_kernel_tracing(bool on) {
  if (on)
    kernel_trace::start();  // if CUPTI cannot be opened, the report says why
  else
    kernel_trace::stop();
}

std::string kernel_trace_report() {
  return kernel_trace::report();
}

OpTimer::OpTimer(const char* op) : op_(op) {
  if (kernel_trace::active()) {
    kernel_trace::push_op(op);
    traced_ = true;
  }
  if (!g_profiling) return;
  depth_ = t_op_depth++;
  host_start_ns_ = now_ns();
  cudaGetDevice(&device_);
  cudaEvent_t e = make_event();
  ADA_CUDA_CHECK(cudaEventRecord(e, stream(device_)));
  start_ = e;
}

OpTimer::~OpTimer() {
  if (traced_) kernel_trace::pop_op();
  if (!start_) return;
  --t_op_depth;
  cudaEvent_t end = nullptr;
  if (cudaEventCreate(&end) != cudaSuccess || cudaEventRecord(end, stream(device_)) != cudaSuccess)
    return;
  const double host_ms = 1e-6 * static_cast<double>(now_ns() - host_start_ns_);
  std::lock_guard<std::mutex> lock(g_profile_mu);
  g_profile.push_back({op_, static_cast<cudaEvent_t>(start_), end, depth_, host_ms});
}

std::string profile_report() {
  std::vector<ProfileRecord> recs;
  {
    std::lock_guard<std::mutex> lock(g_profile_mu);
    recs.swap(g_profile);
  }
  struct Row {
    int64_t calls = 0;
    double gpu_ms = 0, host_ms = 0, idle_ms = 0;
    bool nested = false;
  };
  std::map<std::string, Row> by_op;
  double gpu_total = 0, host_total = 0, idle_total = 0;
  int64_t top_calls = 0;
  cudaEvent_t prev_end = nullptr;  // the last top-level op's (records come in completion order)
  for (const auto& r : recs) {
    ADA_CUDA_CHECK(cudaEventSynchronize(r.end));
    float ms = 0;
    ADA_CUDA_CHECK(cudaEventElapsedTime(&ms, r.start, r.end));
    Row& e = by_op[r.op];
    e.calls += 1;
    e.gpu_ms += ms;
    e.host_ms += r.host_ms;
    e.nested = e.nested || r.depth > 0;
    if (r.depth == 0) {
      float idle = 0;
      if (prev_end) ADA_CUDA_CHECK(cudaEventElapsedTime(&idle, prev_end, r.start));
      e.idle_ms += std::max(0.f, idle);
      idle_total += std::max(0.f, idle);
      gpu_total += ms;
      host_total += r.host_ms;
      ++top_calls;
      prev_end = r.end;
    }
  }
  for (const auto& r : recs) {
    cudaEventDestroy(r.start);
    cudaEventDestroy(r.end);
  }
  std::vector<std::pair<std::string, Row>> rows(by_op.begin(), by_op.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.gpu_ms > b.second.gpu_ms; });
  std::ostringstream os;
  char line[200];
  std::snprintf(line, sizeof line, "%-28s %8s %10s %6s %10s %12s\n", "op (GPU time, events)",
                "calls", "GPU ms", "share", "host ms", "GPU idle ms");
  os << line;
  for (const auto& [op, v] : rows) {
    std::snprintf(line, sizeof line, "%-28s %8lld %10.2f %5.1f%% %10.2f %12.2f%s\n", op.c_str(),
                  static_cast<long long>(v.calls), v.gpu_ms,
                  gpu_total > 0 ? 100 * v.gpu_ms / gpu_total : 0.0, v.host_ms, v.idle_ms,
                  v.nested ? "  (inside another op)" : "");
    os << line;
  }
  std::snprintf(line, sizeof line, "%-28s %8lld %10.2f %6s %10.2f %12.2f\n",
                "total (top-level ops)", static_cast<long long>(top_calls), gpu_total, "",
                host_total, idle_total);
  os << line;
  return os.str();
}

}  // namespace ada::cuda
