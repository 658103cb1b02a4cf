#include "core/tensor.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "core/backend/cuda_runtime.h"
#include "core/host_memory.h"
#include "core/ops.h"
#include "core/parallel.h"
#include "core/random.h"

namespace ada {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
      return 4;
    case DType::f16:
      return 2;
    case DType::bf16:
      return 2;
    case DType::i32:
      return 4;
    case DType::i64:
      return 8;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "f32";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
  }
  return "?";
}

DType dtype_from_name(const std::string& name) {
  std::string n = name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::tolower(c); });
  if (n == "f32" || n == "float32" || n == "float") return DType::f32;
  if (n == "f16" || n == "float16" || n == "half") return DType::f16;
  if (n == "bf16" || n == "bfloat16") return DType::bf16;
  if (n == "i32" || n == "int32") return DType::i32;
  if (n == "i64" || n == "int64") return DType::i64;
  ADA_THROW(DTypeError) << "unknown dtype '" << name << "'; known: f32, f16, bf16, i32, i64";
  return DType::f32;  // unreachable
}

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? "," : "") << s[i];
  os << "]";
  return os.str();
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) {
    ADA_CHECK_ARG(d >= 0, ShapeError) << "negative dimension in shape " << shape_str(s);
    n *= d;
  }
  return n;
}

Storage::Storage(size_t bytes, Device device) : bytes_(bytes), device_(device) {
  data_ = device.is_cpu() ? host::alloc(bytes) : cuda::alloc(bytes, device.index);
}

Storage::~Storage() {
  if (device_.is_cpu())
    host::free(data_, bytes_);
  else
    cuda::free(data_, bytes_, device_.index);
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  Tensor t;
  t.numel_ = shape_numel(shape);
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(static_cast<size_t>(t.numel_) * dtype_size(dtype), device);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  if (device.is_cpu())
    std::memset(t.raw_data(), 0, t.nbytes());
  else
    cuda::zero(t.raw_data(), t.nbytes(), device.index);
  return t;
}

Tensor Tensor::ones(const Shape& shape, DType dtype, Device device) {
  return full(shape, 1.0, dtype, device);
}

namespace {
template <class T>
void fill_typed(Tensor& t, T v) {
  T* p = t.data<T>();
  std::fill(p, p + t.numel(), v);
}
}  // namespace

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  if (!device.is_cpu() && dtype == DType::f32) {  // filled on the device: no copy from the host
    Tensor t = empty(shape, dtype, device);
    ops::fill_(t, static_cast<float>(value));
    return t;
  }
  Tensor t = empty(shape, dtype, Device::cpu());
  switch (dtype) {
    case DType::f32:
      fill_typed<float>(t, static_cast<float>(value));
      break;
    case DType::i32:
      fill_typed<int32_t>(t, static_cast<int32_t>(value));
      break;
    case DType::i64:
      fill_typed<int64_t>(t, static_cast<int64_t>(value));
      break;
    default:
      ADA_THROW(DTypeError) << "full: dtype " << dtype_name(dtype)
                            << " has no arithmetic yet; create f32 and convert";
  }
  return device.is_cpu() ? t : t.to(device);
}

Tensor Tensor::arange(double start, double end, double step, DType dtype) {
  ADA_CHECK_ARG(step != 0, ShapeError) << "arange: step must not be 0";
  int64_t n = std::max<int64_t>(0, static_cast<int64_t>(std::ceil((end - start) / step)));
  Tensor t = empty({n}, dtype);
  for (int64_t i = 0; i < n; ++i) {
    double v = start + step * static_cast<double>(i);
    switch (dtype) {
      case DType::f32:
        t.data<float>()[i] = static_cast<float>(v);
        break;
      case DType::i32:
        t.data<int32_t>()[i] = static_cast<int32_t>(v);
        break;
      case DType::i64:
        t.data<int64_t>()[i] = static_cast<int64_t>(v);
        break;
      default:
        ADA_THROW(DTypeError) << "arange: unsupported dtype " << dtype_name(dtype);
    }
  }
  return t;
}

Tensor Tensor::randn(const Shape& shape, Generator& gen, float mean, float stddev) {
  Tensor t = empty(shape);
  float* p = t.data<float>();
  const int64_t n = t.numel();
  const uint64_t seed = gen.seed(), first = gen.take(static_cast<uint64_t>(n));
  parallel_for(0, n, 4096, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) p[i] = mean + stddev * Generator::normal_at(seed, first, i);
  });
  return t;
}

Tensor Tensor::uniform(const Shape& shape, Generator& gen, float low, float high) {
  Tensor t = empty(shape);
  float* p = t.data<float>();
  const int64_t n = t.numel();
  const uint64_t seed = gen.seed(), first = gen.take(static_cast<uint64_t>(n));
  parallel_for(0, n, 4096, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      p[i] = low + (high - low) * Generator::uniform_at(seed, first, i);
  });
  return t;
}

int64_t Tensor::size(int64_t d) const {
  int64_t nd = dim();
  if (d < 0) d += nd;
  ADA_CHECK_ARG(d >= 0 && d < nd, ShapeError) << "dimension " << d << " out of range for " << str();
  return shape_[d];
}

Device Tensor::device() const {
  return storage_ ? storage_->device() : Device::cpu();
}

std::string Tensor::str() const {
  if (!defined()) return "undefined";
  return std::string(dtype_name(dtype_)) + shape_str(shape_) + " " + device().str();
}

void* Tensor::raw_data() const {
  if (!storage_) return nullptr;
  return static_cast<char*>(storage_->data()) + offset_ * static_cast<int64_t>(dtype_size(dtype_));
}

Tensor Tensor::reshape(const Shape& shape) const {
  Shape s = shape;
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      ADA_CHECK_ARG(infer < 0, ShapeError)
          << "reshape " << str() << " to " << shape_str(shape) << ": only one dimension may be -1";
      infer = static_cast<int>(i);
    } else {
      ADA_CHECK_ARG(s[i] >= 0, ShapeError) << "reshape: negative dimension in " << shape_str(shape);
      known *= s[i];
    }
  }
  if (infer >= 0) {
    ADA_CHECK_ARG(known > 0 && numel_ % known == 0, ShapeError)
        << "reshape " << str() << " to " << shape_str(shape) << ": sizes do not divide";
    s[infer] = numel_ / known;
  }
  ADA_CHECK_ARG(shape_numel(s) == numel_, ShapeError)
      << "reshape " << str() << " to " << shape_str(shape) << ": element counts differ";
  Tensor t = *this;
  t.shape_ = s;
  return t;
}

Tensor Tensor::narrow(int64_t start, int64_t length) const {
  ADA_CHECK_ARG(dim() >= 1, ShapeError) << "narrow on a 0-d tensor";
  ADA_CHECK_ARG(start >= 0 && length >= 0 && start + length <= shape_[0], ShapeError)
      << "narrow(" << start << ", " << length << ") out of range for " << str();
  Tensor t = *this;
  int64_t inner = shape_[0] ? numel_ / shape_[0] : 0;
  t.offset_ += start * inner;
  t.shape_[0] = length;
  t.numel_ = length * inner;
  return t;
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape_, dtype_, device());
  t.copy_from(*this);
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  ADA_CHECK_ARG(defined() && src.defined(), ShapeError) << "copy_from with an undefined tensor";
  ADA_CHECK_ARG(src.numel_ == numel_, ShapeError)
      << "copy_from: " << src.str() << " into " << str() << ": element counts differ";
  ADA_CHECK_ARG(src.dtype_ == dtype_, DTypeError)
      << "copy_from: " << src.str() << " into " << str() << ": dtypes differ";
  if (nbytes() == 0) return;
  if (device().is_cpu() && src.device().is_cpu()) {
    std::memcpy(raw_data(), src.raw_data(), nbytes());
  } else {
    int dev = device().is_cpu() ? src.device().index : device().index;
    cuda::copy(raw_data(), !device().is_cpu(), src.raw_data(), !src.device().is_cpu(), nbytes(),
               dev);
  }
}

Tensor Tensor::to(Device device) const {
  if (device == this->device()) return *this;
  Tensor t = empty(shape_, dtype_, device);
  t.copy_from(*this);
  return t;
}

float Tensor::item() const {
  ADA_CHECK_ARG(numel_ == 1, ShapeError) << "item() on " << str() << ": needs exactly one element";
  return to_vector<float>()[0];
}

void check_defined(const Tensor& t, const char* op, const char* arg) {
  ADA_CHECK_ARG(t.defined(), ShapeError) << op << ": argument '" << arg << "' is undefined";
}

void check_dtype(const Tensor& t, DType dtype, const char* op, const char* arg) {
  check_defined(t, op, arg);
  ADA_CHECK_ARG(t.dtype() == dtype, DTypeError) << op << ": argument '" << arg << "' is " << t.str()
                                                << ", expected dtype " << dtype_name(dtype);
}

void check_same_shape(const Tensor& a, const Tensor& b, const char* op) {
  ADA_CHECK_ARG(a.shape() == b.shape(), ShapeError)
      << op << ": shapes differ: " << shape_str(a.shape()) << " vs " << shape_str(b.shape());
}

void check_dim(const Tensor& t, int64_t dim, const char* op, const char* arg) {
  check_defined(t, op, arg);
  ADA_CHECK_ARG(t.dim() == dim, ShapeError)
      << op << ": argument '" << arg << "' must be " << dim << "-d, got " << t.str();
}

}  // namespace ada
