// Tensor: a handle to shared Storage plus an element offset, a shape and a dtype.
// Tensors are always contiguous and row-major; reshape() and narrow() (along dim 0) are the only
// views. Copies are explicit (clone, copy_from, to). Storage lives on one Device; CPU storage
// is 64-byte aligned. CUDA storage exists only in builds with ADA_WITH_CUDA.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"

namespace ada {

enum class DType : uint8_t { f32, f16, bf16, i32, i64 };
size_t dtype_size(DType t);
const char* dtype_name(DType t);
// Parses "f32", "F32", "float32", ... (safetensors and config spellings); throws DTypeError.
DType dtype_from_name(const std::string& name);

template <class T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::i32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::i64;
};
// f16/bf16 are storage types: raw 16-bit words until a backend gives them arithmetic.
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};
template <>
struct DTypeOf<Half> {
  static constexpr DType value = DType::f16;
};
template <>
struct DTypeOf<BFloat16> {
  static constexpr DType value = DType::bf16;
};

enum class DeviceType : uint8_t { CPU, CUDA };
struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;
  static Device cpu() { return {}; }
  static Device cuda(int i = 0) { return {DeviceType::CUDA, i}; }
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string str() const;
};

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);
int64_t shape_numel(const Shape& s);

// A block of bytes on one device. Freed when the last Tensor referring to it goes.
class Storage {
 public:
  Storage(size_t bytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
};

class Generator;

class Tensor {
 public:
  Tensor() = default;  // undefined tensor; defined() is false

  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor ones(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32,
                     Device device = Device::cpu());
  // [start, start+step, ...) up to (not including) end; f32, i32 or i64.
  static Tensor arange(double start, double end, double step = 1.0, DType dtype = DType::f32);
  // Counter-based random numbers (see core/random.h): element i of the result depends only on
  // the generator's seed and offset and on i, never on the thread count.
  static Tensor randn(const Shape& shape, Generator& gen, float mean = 0.f, float stddev = 1.f);
  static Tensor uniform(const Shape& shape, Generator& gen, float low = 0.f, float high = 1.f);
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const { return numel_; }
  DType dtype() const { return dtype_; }
  Device device() const;
  size_t nbytes() const { return static_cast<size_t>(numel_) * dtype_size(dtype_); }
  std::string str() const;  // "f32[2,3] cpu"

  // Typed element pointer; throws DTypeError if T does not match dtype().
  template <class T>
  T* data() const;
  void* raw_data() const;

  // Views sharing storage.
  Tensor reshape(const Shape& shape) const;  // one dim may be -1
  Tensor flatten() const { return reshape({numel_}); }
  Tensor narrow(int64_t start, int64_t length) const;  // along dim 0

  // Copies.
  Tensor clone() const;
  void copy_from(const Tensor& src);  // same numel and dtype; any devices
  Tensor to(Device device) const;
  template <class T>
  std::vector<T> to_vector() const;
  float item() const;  // one-element f32 tensor

  // Identity of the underlying storage (for aliasing decisions, e.g. in autograd).
  bool shares_storage_with(const Tensor& o) const { return storage_ && storage_ == o.storage_; }
  long storage_use_count() const { return storage_.use_count(); }

 private:
  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;  // in elements
  Shape shape_;
  int64_t numel_ = 0;
  DType dtype_ = DType::f32;
};

template <class T>
T* Tensor::data() const {
  ADA_CHECK_ARG(defined(), DTypeError) << "data() on an undefined tensor";
  ADA_CHECK_ARG(dtype_ == DTypeOf<T>::value, DTypeError)
      << "tensor " << str() << " accessed as " << dtype_name(DTypeOf<T>::value);
  return static_cast<T*>(raw_data());
}

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape) {
  ADA_CHECK_ARG(shape_numel(shape) == static_cast<int64_t>(values.size()), ShapeError)
      << "from_vector: " << values.size() << " values for shape " << shape_str(shape);
  Tensor t = empty(shape, DTypeOf<T>::value);
  std::copy(values.begin(), values.end(), t.data<T>());
  return t;
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  Tensor c = device().is_cpu() ? *this : to(Device::cpu());
  const T* p = c.data<T>();
  return std::vector<T>(p, p + numel_);
}

// Argument checks shared by the op surface. `op` names the operation in the message.
void check_defined(const Tensor& t, const char* op, const char* arg);
void check_dtype(const Tensor& t, DType dtype, const char* op, const char* arg);
void check_same_shape(const Tensor& a, const Tensor& b, const char* op);
void check_dim(const Tensor& t, int64_t dim, const char* op, const char* arg);

}  // namespace ada
