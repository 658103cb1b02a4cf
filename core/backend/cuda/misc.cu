// CUDA dropout (the same Philox keep-mask as the CPU for the same generator state) and
// embedding gather / scatter-add of core/ops.h; checks mirror core/backend/cpu/misc.cc.
// An out-of-range id is reported as the CPU does, as a deferred device error (cuda_common.h:
// raised at the host's next wait for the device, no wait per op). embedding_backward adds with
// atomics: repeated ids sum in no fixed order, so its result is not bit-deterministic (it is exact
// when every id occurs once), except under deterministic algorithms
// (ops::set_deterministic_algorithms, ADA_CUDA_DETERMINISTIC=1): the ids are then sorted (CUB's
// stable radix sort) and each row's gradients added in their order, as the CPU: the same bits.
#include <algorithm>
#include <climits>
#include <cstdint>

#include <cub/device/device_radix_sort.cuh>

#include "core/backend/cuda/cuda_common.h"
#include "core/backend/cuda/cuda_ops.h"
#include "core/backend/cuda/kernel_util.cuh"
#include "core/philox.h"

namespace ada::cuda {
namespace {
using namespace kernel;

__device__ __forceinline__ int64_t load_index(const void* p, bool is64, int64_t i) {
  return is64 ? static_cast<const int64_t*>(p)[i]
              : static_cast<int64_t>(static_cast<const int32_t*>(p)[i]);
}

// Element i kept iff word i % 4 of philox_uniform4_at(seed, first + *shift, i / 4) >= p (the CPU
// op's stream; *shift is the device's Philox shift, 0 outside a CUDA graph's replays); one thread
// per block of four elements, moved as one access (8 or 16 bytes) when the
// pointers allow (vec) and the block is whole. The mask is written where `mask` is given.
template <class T>
__global__ void dropout_kernel(const T* x, T* y, float* mask, int64_t n, uint64_t seed,
                               uint64_t first, const uint64_t* shift, float p, float keep_scale,
                               bool vec) {
  using P = Pack<T, 4>;
  const int64_t blocks = (n + 3) / 4;
  first += *shift;
  for (int64_t j = global_tid(); j < blocks; j += global_stride()) {
    const Uniform4 w = philox_uniform4_at(seed, first, static_cast<uint64_t>(j));
    const float u[4] = {w.u0, w.u1, w.u2, w.u3};
    if (vec && 4 * j + 3 < n) {
      const P xv = reinterpret_cast<const P*>(x)[j];
      P out;
      Pack<float, 4> mv;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        mv.v[k] = u[k] >= p ? keep_scale : 0.f;
        st(out.v, k, ld(xv.v, k) * mv.v[k]);
      }
      reinterpret_cast<P*>(y)[j] = out;
      if (mask) reinterpret_cast<Pack<float, 4>*>(mask)[j] = mv;
      continue;
    }
    for (int k = 0; k < 4; ++k) {
      const int64_t i = 4 * j + k;
      if (i >= n) break;
      const float m = u[k] >= p ? keep_scale : 0.f;
      if (mask) mask[i] = m;
      st(y, i, ld(x, i) * m);
    }
  }
}

// Lowers *bad to the first position whose id lies outside [0, v).
__global__ void check_ids_kernel(const void* ids, bool i64, int64_t n, int64_t v,
                                 unsigned long long* bad) {
  for (int64_t i = global_tid(); i < n; i += global_stride()) {
    const int64_t id = load_index(ids, i64, i);
    if (id < 0 || id >= v) atomicMin(bad, static_cast<unsigned long long>(i));
  }
}

// y[i, :] = w[ids[i], :]; rows with an out-of-range id are left unwritten (the op throws). w and y
// f32 or 16-bit (Tw, Ty): read as f32, rounded once into y's type.
template <class Tw, class Ty>
__global__ void embedding_gather_kernel(const Tw* w, const void* ids, bool i64, int64_t n,
                                        int64_t v, int64_t d, Ty* y) {
  const int64_t total = n * d;
  for (int64_t e = global_tid(); e < total; e += global_stride()) {
    const int64_t i = e / d, j = e - i * d;
    const int64_t id = load_index(ids, i64, i);
    if (id >= 0 && id < v) st(y, e, ld(w, id * d + j));
  }
}

// dw[ids[i], :] += dy[i, :]; out-of-range ids are skipped (the op throws).
template <class T>
__global__ void embedding_scatter_kernel(const T* dy, const void* ids, bool i64, int64_t n,
                                         int64_t v, int64_t d, float* dw) {
  const int64_t total = n * d;
  for (int64_t e = global_tid(); e < total; e += global_stride()) {
    const int64_t i = e / d, j = e - i * d;
    const int64_t id = load_index(ids, i64, i);
    if (id >= 0 && id < v) atomicAdd(dw + id * d + j, ld(dy, e));
  }
}

// The ordered embedding backward's sort input: key[i] = ids[i] when in [0, v), else v (sorted
// last, skipped); val[i] = i.
__global__ void embedding_sort_keys_kernel(const void* ids, bool i64, int64_t n, int64_t v,
                                           uint32_t* key, uint32_t* val) {
  for (int64_t i = global_tid(); i < n; i += global_stride()) {
    const int64_t id = load_index(ids, i64, i);
    key[i] = static_cast<uint32_t>(id >= 0 && id < v ? id : v);
    val[i] = static_cast<uint32_t>(i);
  }
}

// embedding_scatter_kernel's sums without atomics, over the ids sorted stably (key, val as
// embedding_sort_keys_kernel's, sorted by key): block x is sorted position k, block y a tile of
// columns; the block at the first of a run of equal ids adds their rows of dy to dw's row in
// order, as the CPU's loop (the same bits).
template <class T>
__global__ void embedding_ordered_kernel(const T* __restrict__ dy, const uint32_t* __restrict__ key,
                                         const uint32_t* __restrict__ val, int64_t n, int64_t v,
                                         int64_t d, float* __restrict__ dw) {
  const int64_t k = blockIdx.x;
  const uint32_t id = key[k];
  if (id >= v || (k > 0 && key[k - 1] == id)) return;
  const int64_t j = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (j >= d) return;
  float* const at = dw + static_cast<int64_t>(id) * d + j;
  float acc = *at;
  for (int64_t r = k; r < n && key[r] == id; ++r)
    acc += ld(dy, static_cast<int64_t>(val[r]) * d + j);
  *at = acc;
}

// dw[ids[i], :] += dy[i, :] in the CPU's order (embedding_ordered_kernel), on stream s.
template <class T>
void embedding_backward_ordered(const T* dy, const void* ids, bool i64, int64_t n, int64_t v,
                                int64_t d, float* dw, int dev, cudaStream_t s) {
  ADA_CHECK_ARG(n <= INT_MAX && v < static_cast<int64_t>(UINT32_MAX), ShapeError)
      << "embedding_backward: " << n << " ids into " << v
      << " rows exceed the deterministic path's 32-bit sort (ADA_CUDA_DETERMINISTIC)";
  Scratch buf(4 * static_cast<size_t>(n) * sizeof(uint32_t), dev);
  uint32_t *key_in = buf.as<uint32_t>(), *val_in = key_in + n, *key = val_in + n, *val = key + n;
  embedding_sort_keys_kernel<<<blocks_for(n), kThreads, 0, s>>>(ids, i64, n, v, key_in, val_in);
  ADA_CUDA_LAUNCH_CHECK();
  int bits = 0;  // enough for every key, v itself (skipped) included
  while (bits < 32 && (static_cast<uint64_t>(v) >> bits) != 0) ++bits;
  size_t temp_bytes = 0;
  ADA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, key_in, key, val_in, val,
                                                 static_cast<int>(n), 0, bits, s));
  Scratch temp(temp_bytes, dev);
  ADA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.get(), temp_bytes, key_in, key, val_in, val,
                                                 static_cast<int>(n), 0, bits, s));
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>((d + kThreads - 1) / kThreads));
  embedding_ordered_kernel<T><<<grid, kThreads, 0, s>>>(dy, key, val, n, v, d, dw);
  ADA_CUDA_LAUNCH_CHECK();
}

// A device word for check_ids_kernel, set to "none found" on the stream.
unsigned long long* init_bad_flag(const Scratch& s, int dev) {
  auto* bad = s.as<unsigned long long>();
  ADA_CUDA_CHECK(cudaMemsetAsync(bad, 0xFF, sizeof(unsigned long long), stream(dev)));
  return bad;
}

// Records a fault unless one is waiting to be raised (the first wins): claims the slot with
// code ~0, writes the fields, then publishes the code (runtime.cc's raise_device_fault reads
// the fields only under a published code).
__device__ void record_fault(DeviceFault* f, unsigned int code, long long where, long long value,
                             long long limit, long long extra) {
  if (atomicCAS(&f->code, 0u, ~0u) != 0u) return;
  f->where = where;
  f->value = value;
  f->limit = limit;
  f->extra = extra;
  __threadfence_system();
  atomicExch(&f->code, code);
}

// One thread: the index at position *bad, if a kernel set *bad, becomes the device's fault.
__global__ void record_bad_index_kernel(const unsigned long long* bad, const void* ids, bool i64,
                                        unsigned int code, long long limit, long long extra,
                                        DeviceFault* fault) {
  const unsigned long long at = *bad;
  if (at == ~0ULL) return;
  record_fault(fault, code, static_cast<long long>(at), load_index(ids, i64, at), limit, extra);
}

}  // namespace

void record_bad_index(const unsigned long long* bad, const Tensor& ids, FaultCode code,
                      long long limit, long long extra, int device) {
  record_bad_index_kernel<<<1, 1, 0, stream(device)>>>(bad, ids.raw_data(),
                                                       ids.dtype() == DType::i64, code, limit,
                                                       extra, device_fault_slot(device));
  ADA_CUDA_LAUNCH_CHECK();
}

namespace {
// y = x * mask for the stream at (seed, first); the mask also written when `mask` is given.
Tensor dropout_impl(const char* op, const Tensor& x, float p, uint64_t seed, uint64_t first,
                    Tensor* mask) {
  const DType t = x.dtype();
  const int dev = require_f32(op, {&x}, activation_type(x));
  ADA_CHECK_ARG(p >= 0.f && p < 1.f, ShapeError)
      << "dropout: probability must be in [0, 1), got " << p;
  const int64_t n = x.numel();
  Tensor y = Tensor::empty(x.shape(), t, x.device());
  if (mask) *mask = Tensor::empty(x.shape(), DType::f32, x.device());
  if (n == 0) return y;
  with_float_type(t, [&](auto tag) {
    using T = decltype(tag);
    const bool vec = aligned_to({x.raw_data(), y.raw_data()}, 4 * sizeof(T)) &&
                     aligned16({mask ? mask->raw_data() : nullptr});
    dropout_kernel<<<blocks_for((n + 3) / 4), kThreads, 0, stream(dev)>>>(
        data_as<T>(x), data_as<T>(y), mask ? mask->data<float>() : nullptr, n, seed, first,
        philox_shift(dev), p, 1.f / (1.f - p), vec);
  });
  ADA_CUDA_LAUNCH_CHECK();
  return y;
}
}  // namespace

namespace {
__global__ void write_u64_kernel(uint64_t* p, uint64_t v) {
  *p = v;
}
}  // namespace

void write_u64(uint64_t* p, uint64_t v, cudaStream_t s) {
  write_u64_kernel<<<1, 1, 0, s>>>(p, v);
  ADA_CUDA_LAUNCH_CHECK();
}

namespace {
template <class M>
__global__ void key_bias_kernel(const M* mask, float* bias, int64_t n) {
  for (int64_t i = global_tid(); i < n; i += global_stride())
    bias[i] = mask[i] != M(0) ? 0.f : -10000.f;
}
}  // namespace

Tensor attention_key_bias(const Tensor& mask) {
  ADA_CHECK_ARG(mask.defined() && !mask.device().is_cpu(), DeviceError)
      << "attention_key_bias: the mask must be a CUDA tensor here";
  const DType t = mask.dtype();
  ADA_CHECK_ARG(t == DType::f32 || t == DType::i64 || t == DType::i32, DTypeError)
      << "attention_key_bias: the mask must be f32, i64 or i32, got " << mask.str();
  const int dev = mask.device().index;
  set_device(dev);
  Tensor bias = Tensor::empty(mask.shape(), DType::f32, mask.device());
  const int64_t n = mask.numel();
  if (n == 0) return bias;
  float* b = bias.data<float>();
  const unsigned blocks = blocks_for(n);
  if (t == DType::f32)
    key_bias_kernel<<<blocks, kThreads, 0, stream(dev)>>>(mask.data<float>(), b, n);
  else if (t == DType::i64)
    key_bias_kernel<<<blocks, kThreads, 0, stream(dev)>>>(mask.data<int64_t>(), b, n);
  else
    key_bias_kernel<<<blocks, kThreads, 0, stream(dev)>>>(mask.data<int32_t>(), b, n);
  ADA_CUDA_LAUNCH_CHECK();
  return bias;
}

Tensor dropout_forward(const Tensor& x, float p, Generator& gen, Tensor& mask) {
  if (!x.device().is_cpu()) note_draw(x.device().index, gen);
  const uint64_t seed = gen.seed(), first = gen.take(static_cast<uint64_t>(x.numel()));
  return dropout_impl("dropout_forward", x, p, seed, first, &mask);
}

Tensor dropout_apply(const Tensor& x, float p, uint64_t seed, uint64_t first) {
  return dropout_impl("dropout_apply", x, p, seed, first, nullptr);
}

Tensor embedding_forward(const Tensor& weight, const Tensor& ids, DType out) {
  const int dev = require_f32("embedding_forward", {&weight}, activation_type(weight));
  ADA_CHECK_ARG(out == DType::f32 || out == DType::bf16 || out == DType::f16, DTypeError)
      << "embedding_forward: the result must be f32, bf16 or f16, not " << dtype_name(out);
  require_index("embedding_forward", ids, "ids", dev);
  check_dim(weight, 2, "embedding_forward", "weight");
  const int64_t v = weight.size(0), d = weight.size(1), n = ids.numel();
  Shape os = ids.shape();
  os.push_back(d);
  Tensor y = Tensor::empty(os, out, weight.device());
  if (n == 0) return y;
  const bool i64 = ids.dtype() == DType::i64;
  cudaStream_t s = stream(dev);
  Scratch flag(sizeof(unsigned long long), dev);
  unsigned long long* bad = init_bad_flag(flag, dev);
  check_ids_kernel<<<blocks_for(n), kThreads, 0, s>>>(ids.raw_data(), i64, n, v, bad);
  ADA_CUDA_LAUNCH_CHECK();
  if (d > 0) {
    with_float_type(weight.dtype(), [&](auto wtag) {
      with_float_type(out, [&](auto ytag) {
        embedding_gather_kernel<<<blocks_for(n * d), kThreads, 0, s>>>(
            data_as<decltype(wtag)>(weight), ids.raw_data(), i64, n, v, d,
            data_as<decltype(ytag)>(y));
      });
    });
    ADA_CUDA_LAUNCH_CHECK();
  }
  record_bad_index(bad, ids, kFaultEmbeddingId, v, 0, dev);  // raised at the next wait
  return y;
}

void embedding_backward(const Tensor& dy, const Tensor& ids, Tensor& dweight) {
  require_f32("embedding_backward", {&dy}, activation_type(dy));
  const int dev = require_f32("embedding_backward", {&dweight});
  require_on("embedding_backward", dev, {&dy});
  require_index("embedding_backward", ids, "ids", dev);
  check_dim(dweight, 2, "embedding_backward", "dweight");
  const int64_t v = dweight.size(0), d = dweight.size(1), n = ids.numel();
  ADA_CHECK_ARG(dy.numel() == n * d, ShapeError)
      << "embedding_backward: gradient " << dy.str() << " does not match ids " << ids.str()
      << " and width " << d;
  if (n == 0 || d == 0) return;  // the CPU checks ids only while adding columns
  const bool i64 = ids.dtype() == DType::i64;
  cudaStream_t s = stream(dev);
  Scratch flag(sizeof(unsigned long long), dev);
  unsigned long long* bad = init_bad_flag(flag, dev);
  check_ids_kernel<<<blocks_for(n), kThreads, 0, s>>>(ids.raw_data(), i64, n, v, bad);
  ADA_CUDA_LAUNCH_CHECK();
  with_float_type(dy.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (deterministic_algorithms()) {
      embedding_backward_ordered(data_as<T>(dy), ids.raw_data(), i64, n, v, d,
                                 dweight.data<float>(), dev, s);
      return;
    }
    embedding_scatter_kernel<<<blocks_for(n * d), kThreads, 0, s>>>(
        data_as<T>(dy), ids.raw_data(), i64, n, v, d, dweight.data<float>());
    ADA_CUDA_LAUNCH_CHECK();
  });
  record_bad_index(bad, ids, kFaultEmbeddingBackwardId, v, 0, dev);  // raised at the next wait
}

}  // namespace ada::cuda
