// CUDA runtime seam for builds without CUDA: every call that needs a GPU says how to get one.
#include "base/error.h"
#include "core/backend/cuda_runtime.h"
#include "core/precision.h"
#include "core/tensor.h"

namespace ada::cuda {
namespace {
const char* kHowTo =
    "Adatrain was built without CUDA; reconfigure with -DADA_WITH_CUDA=ON (needs nvcc, cuBLAS "
    "and cuDNN under /usr/local/cuda)";
[[noreturn]] void no_cuda(const char* what) {
  ADA_THROW(DeviceError) << what << ": " << kHowTo;
}
}  // namespace
bool built_with_cuda() {
  return false;
}
int device_count() {
  return 0;
}
std::string unavailable_reason() {
  return kHowTo;
}
void require_device(int) {
  no_cuda("using a CUDA device");
}
std::string device_name(int) {
  no_cuda("naming a CUDA device");
}
std::array<uint8_t, 16> device_uuid(int) {
  no_cuda("identifying a CUDA device");
}
void* alloc(size_t, int) {
  no_cuda("allocating CUDA memory");
}
void free(void*, size_t, int) noexcept {}
void empty_cache(int) {}
MemoryStats memory_stats(int) {
  return {};
}
void reset_peak(int) {}
void copy(void*, bool, const void*, bool, size_t, int) {
  no_cuda("copying to/from a CUDA tensor");
}
void zero(void*, size_t, int) {
  no_cuda("zeroing a CUDA tensor");
}
void synchronize(int) {
  no_cuda("synchronising a CUDA device");
}
void set_profiling(bool on) {
  if (on) no_cuda("profiling CUDA ops");
}
std::string profile_report() {
  return "";
}
std::string epilogue_report() {
  return "";
}
std::string conv_plans_report() {
  return "";
}
void set_kernel_tracing(bool on) {
  if (on) no_cuda("tracing CUDA kernels");
}
std::string kernel_trace_report() {
  return {};
}
OpTimer::OpTimer(const char* op) : op_(op) {}
OpTimer::~OpTimer() = default;
struct BatchUploader::Impl {};
BatchUploader::BatchUploader(int) {
  no_cuda("copying batches to a CUDA device");
}
BatchUploader::~BatchUploader() = default;
std::map<std::string, Tensor> BatchUploader::upload(const std::map<std::string, Tensor>&) {
  no_cuda("copying batches to a CUDA device");
}
struct Graph::Impl {};
Graph::Graph() = default;
Graph::~Graph() = default;
void Graph::capture(int, const std::function<void()>&, Generator*) {
  no_cuda("capturing a CUDA graph");
}
void Graph::replay() {
  no_cuda("replaying a CUDA graph");
}
bool Graph::captured() const {
  return false;
}
int64_t Graph::nodes() const {
  return 0;
}
int64_t Graph::pool_bytes() const {
  return 0;
}
bool capturing(int) {
  return false;
}
void note_draw(int, const Generator&) {}
}  // namespace ada::cuda

namespace ada {
void set_cuda_matmul_precision(Precision p) {
  if (p != Precision::fp32)
    cuda::no_cuda(p == Precision::fp16 ? "fp16 matrix products on a GPU"
                                       : "bf16 matrix products on a GPU");
}
Precision cuda_matmul_precision() {
  return Precision::fp32;
}
}  // namespace ada
