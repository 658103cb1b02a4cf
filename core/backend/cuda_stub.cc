// CUDA runtime seam for builds without CUDA: every call that needs a GPU says how to get one.
#include "core/backend/cuda_runtime.h"
#include "core/error.h"

namespace ada::cuda {
namespace {
[[noreturn]] void no_cuda(const char* what) {
  ADA_THROW(DeviceError) << what
                         << ": Adatrain was built without CUDA; reconfigure with "
                            "-DADA_WITH_CUDA=ON (needs nvcc, cuBLAS and cuDNN under /usr/local/cuda)";
}
}  // namespace
bool built_with_cuda() { return false; }
int device_count() { return 0; }
void* alloc(size_t, int) { no_cuda("allocating CUDA memory"); }
void free(void*, int) noexcept {}
void copy(void*, bool, const void*, bool, size_t, int) { no_cuda("copying to/from a CUDA tensor"); }
void zero(void*, size_t, int) { no_cuda("zeroing a CUDA tensor"); }
}  // namespace ada::cuda
