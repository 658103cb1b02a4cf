// BatchUploader (core/backend/cuda_runtime.h): batches to the device through pinned memory on a
// copy stream, ordered before the compute stream's later work by events.
#include <cstring>
#include <map>
#include <string>

#include "core/backend/cuda/cuda_common.h"
#include "core/backend/cuda_runtime.h"
#include "core/tensor.h"

namespace ada::cuda {

namespace {

// An event without timing (cheap to record and wait on).
cudaEvent_t new_event() {
  cudaEvent_t e = nullptr;
  ADA_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

}  // namespace

struct BatchUploader::Impl {
  struct Slot {
    void* pinned = nullptr;  // cudaHostAlloc'd staging, `pinned_bytes` long
    size_t pinned_bytes = 0;
    std::map<std::string, Tensor> device;  // kept across uploads; views handed out
    cudaEvent_t copied = nullptr;          // on the copy stream: this slot's copies are done
    cudaEvent_t released = nullptr;        // on the compute stream: the next batch was handed over
    bool used = false;
  };
  int device = 0;
  cudaStream_t copy_stream = nullptr;
  Slot slots[2];
  int next = 0;

  ~Impl() {
    // Nothing may still copy from the pinned buffers or into the device ones.
    if (copy_stream) cudaStreamSynchronize(copy_stream);
    for (Slot& s : slots) {
      if (s.pinned) cudaFreeHost(s.pinned);
      if (s.copied) cudaEventDestroy(s.copied);
      if (s.released) cudaEventDestroy(s.released);
    }
    if (copy_stream) cudaStreamDestroy(copy_stream);
  }
};

BatchUploader::BatchUploader(int device) : impl_(std::make_unique<Impl>()) {
  require_device(device);
  impl_->device = device;
  set_device(device);
  ADA_CUDA_CHECK(cudaStreamCreateWithFlags(&impl_->copy_stream, cudaStreamNonBlocking));
  for (Impl::Slot& s : impl_->slots) {
    s.copied = new_event();
    s.released = new_event();
  }
}

BatchUploader::~BatchUploader() = default;

std::map<std::string, Tensor> BatchUploader::upload(const std::map<std::string, Tensor>& host) {
  Impl& im = *impl_;
  refuse_in_capture(im.device, "a batch upload",
                    "it waits for its copy stream and alternates buffers between steps; copy the "
                    "batch into the captured step's input tensors before each replay instead");
  set_device(im.device);
  cudaStream_t compute = stream(im.device);
  Impl::Slot& slot = im.slots[im.next];
  Impl::Slot& other = im.slots[1 - im.next];
  im.next = 1 - im.next;

  // Every use of the other slot's batch (the one before this) has been queued by now: its
  // release point on the compute stream is here. The next upload, into that slot, waits for it.
  if (other.used) ADA_CUDA_CHECK(cudaEventRecord(other.released, compute));
  // This slot's last copies (two uploads ago) must be done before its pinned buffer is
  // rewritten, and its last batch released before its device buffers are.
  if (slot.used) {
    ADA_CUDA_CHECK(cudaEventSynchronize(slot.copied));
    ADA_CUDA_CHECK(cudaStreamWaitEvent(im.copy_stream, slot.released, 0));
  }

  size_t total = 0;
  for (const auto& [name, t] : host) {
    ADA_CHECK_ARG(t.device().is_cpu(), DeviceError)
        << "BatchUploader: field '" << name << "' is " << t.str() << ", expected a CPU tensor";
    total += (t.nbytes() + 255) / 256 * 256;
  }
  if (total > slot.pinned_bytes) {
    if (slot.pinned) ADA_CUDA_CHECK(cudaFreeHost(slot.pinned));
    slot.pinned = nullptr;
    ADA_CUDA_CHECK(cudaHostAlloc(&slot.pinned, total, cudaHostAllocDefault));
    slot.pinned_bytes = total;
  }

  std::map<std::string, Tensor> out;
  bool fresh_memory = false;
  size_t off = 0;
  for (const auto& [name, t] : host) {
    Tensor& buf = slot.device[name];
    if (!buf.defined() || buf.dtype() != t.dtype() || buf.numel() < t.numel()) {
      buf = Tensor::empty({std::max<int64_t>(t.numel(), 1)}, t.dtype(), Device::cuda(im.device));
      fresh_memory = true;
    }
    out[name] = buf.narrow(0, t.numel()).reshape(t.shape());
  }
  // Fresh device memory comes from the caching allocator, whose blocks are ordered on the
  // compute stream only: the copy waits for what the compute stream has queued so far.
  if (fresh_memory) {
    cudaEvent_t now = new_event();
    ADA_CUDA_CHECK(cudaEventRecord(now, compute));
    ADA_CUDA_CHECK(cudaStreamWaitEvent(im.copy_stream, now, 0));
    ADA_CUDA_CHECK(cudaEventDestroy(now));  // destroyed once the wait completes
  }
  for (const auto& [name, t] : host) {
    char* staged = static_cast<char*>(slot.pinned) + off;
    if (t.nbytes() > 0) {
      std::memcpy(staged, t.raw_data(), t.nbytes());
      ADA_CUDA_CHECK(cudaMemcpyAsync(out[name].raw_data(), staged, t.nbytes(),
                                     cudaMemcpyHostToDevice, im.copy_stream));
    }
    off += (t.nbytes() + 255) / 256 * 256;
  }
  ADA_CUDA_CHECK(cudaEventRecord(slot.copied, im.copy_stream));
  ADA_CUDA_CHECK(cudaStreamWaitEvent(compute, slot.copied, 0));
  slot.used = true;
  return out;
}

}  // namespace ada::cuda
