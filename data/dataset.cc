#include "data/dataset.h"

#include <cstring>

#include "base/error.h"

namespace ada::data {

namespace {

std::string field_list(const std::map<std::string, Tensor>& fields) {
  std::string s;
  for (const auto& [name, t] : fields) s += (s.empty() ? "" : ", ") + name;
  return s.empty() ? "(none)" : s;
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

const Tensor& Example::at(const std::string& name) const {
  auto it = fields.find(name);
  ADA_CHECK_ARG(it != fields.end(), ShapeError)
      << "example has no field '" << name << "'; it has: " << field_list(fields);
  return it->second;
}

const Tensor& Batch::at(const std::string& name) const {
  auto it = fields.find(name);
  ADA_CHECK_ARG(it != fields.end(), ShapeError)
      << "batch has no field '" << name << "'; it has: " << field_list(fields);
  return it->second;
}

Generator example_generator(uint64_t seed, int64_t epoch, int64_t index) {
  uint64_t key =
      splitmix64(seed ^ splitmix64(static_cast<uint64_t>(epoch) + 0x243F6A8885A308D3ull));
  return Generator(key, static_cast<uint64_t>(index) << 32);
}

Batch stack_examples(const std::vector<Example>& examples, const std::vector<int64_t>& indices,
                     int64_t epoch) {
  ADA_CHECK_ARG(!examples.empty(), ShapeError) << "stack_examples: no examples to stack";
  ADA_CHECK_ARG(examples.size() == indices.size(), ShapeError)
      << "stack_examples: " << examples.size() << " examples but " << indices.size() << " indices";
  const Example& first = examples[0];
  const int64_t n = static_cast<int64_t>(examples.size());
  Batch batch;
  batch.indices = indices;
  batch.epoch = epoch;
  for (size_t i = 1; i < examples.size(); ++i) {
    ADA_CHECK_ARG(examples[i].fields.size() == first.fields.size(), ShapeError)
        << "stack_examples: example " << indices[i] << " has fields {"
        << field_list(examples[i].fields) << "} but example " << indices[0] << " has {"
        << field_list(first.fields) << "}; every example of a dataset needs the same fields";
  }
  for (const auto& [name, t0] : first.fields) {
    ADA_CHECK_ARG(t0.defined(), ShapeError)
        << "stack_examples: field '" << name << "' of example " << indices[0] << " is undefined";
    ADA_CHECK_ARG(t0.device().is_cpu(), DeviceError)
        << "stack_examples: field '" << name << "' of example " << indices[0] << " is on "
        << t0.device().str() << "; datasets return CPU tensors";
    Shape shape = t0.shape();
    shape.insert(shape.begin(), n);
    Tensor out = Tensor::empty(shape, t0.dtype());
    const size_t row = t0.nbytes();
    char* dst = static_cast<char*>(out.raw_data());
    for (int64_t i = 0; i < n; ++i) {
      auto it = examples[i].fields.find(name);
      ADA_CHECK_ARG(it != examples[i].fields.end(), ShapeError)
          << "stack_examples: example " << indices[i] << " has no field '" << name
          << "' (it has: " << field_list(examples[i].fields) << ")";
      const Tensor& t = it->second;
      ADA_CHECK_ARG(t.defined() && t.shape() == t0.shape(), ShapeError)
          << "stack_examples: field '" << name << "' is "
          << (t.defined() ? shape_str(t.shape()) : std::string("undefined")) << " in example "
          << indices[i] << " but " << shape_str(t0.shape()) << " in example " << indices[0]
          << "; every example needs the same shape per field";
      ADA_CHECK_ARG(t.dtype() == t0.dtype(), DTypeError)
          << "stack_examples: field '" << name << "' is " << dtype_name(t.dtype()) << " in example "
          << indices[i] << " but " << dtype_name(t0.dtype()) << " in example " << indices[0];
      ADA_CHECK_ARG(t.device().is_cpu(), DeviceError)
          << "stack_examples: field '" << name << "' of example " << indices[i] << " is on "
          << t.device().str() << "; datasets return CPU tensors";
      if (row) std::memcpy(dst + i * row, t.raw_data(), row);
    }
    batch.fields.emplace(name, std::move(out));
  }
  return batch;
}

}  // namespace ada::data
