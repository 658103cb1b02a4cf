// Dataset: the interface every data set implements (size, get), and the Example/Batch types.
// An Example is a set of named CPU tensors ("image" f32 [C,H,W], "label" i64 scalar,
// "input_ids" i64 [L], ...); a Batch stacks each field of its examples along a new dim 0.
// Randomness inside get() (augmentation, masking) is a pure function of (seed, epoch, index):
// draw it from example_generator(), so batches do not depend on the worker count.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/random.h"
#include "core/tensor.h"

namespace ada::data {

// One example: field name -> CPU tensor. Every example of a dataset has the same field names,
// and each field the same shape and dtype (the loader checks this when it stacks a batch).
struct Example {
  std::map<std::string, Tensor> fields;

  void set(const std::string& name, Tensor t) { fields[name] = std::move(t); }
  bool has(const std::string& name) const { return fields.count(name) != 0; }
  // The field; ShapeError naming it and listing the fields present if it is missing.
  const Tensor& at(const std::string& name) const;
};

// A batch: each field of the examples stacked along a new dim 0 ([B, ...]; a scalar field
// becomes [B]), rows in sampler order. `indices[i]` is the dataset index of row i.
struct Batch {
  std::map<std::string, Tensor> fields;
  std::vector<int64_t> indices;
  int64_t epoch = 0;

  int64_t size() const { return static_cast<int64_t>(indices.size()); }
  bool has(const std::string& name) const { return fields.count(name) != 0; }
  const Tensor& at(const std::string& name) const;  // ShapeError listing the fields if missing
};

// The interface. Implementations must make get() safe to call concurrently from several
// threads on one const object (loader workers share it), and deterministic: the same
// (index, epoch) gives the same example, with any randomness drawn from
// example_generator(seed, epoch, index). Errors are ada exceptions naming the file (IoError for
// unreadable or corrupt data); the loader re-throws them on the consumer's thread.
class Dataset {
 public:
  virtual ~Dataset() = default;
  // Number of examples; indices are [0, size()).
  virtual int64_t size() const = 0;
  // Example `index` as seen in `epoch` (epoch changes the augmentation/masking, not the data).
  virtual Example get(int64_t index, int64_t epoch) const = 0;
  // A short description for messages and logs, e.g. "mnist train (data/mnist, 60000 examples)".
  virtual std::string describe() const {
    return "dataset of " + std::to_string(size()) + " examples";
  }
};

// The random stream of one example: key = mix(seed, epoch), counters start at index * 2^32, so
// each example owns 2^32 counters. Use gen.take(n) / Generator::uniform_at as in core/random.h.
Generator example_generator(uint64_t seed, int64_t epoch, int64_t index);

// Stacks examples into a batch (what the loader does). All examples need the same field names,
// and per field the same shape and dtype; otherwise ShapeError/DTypeError naming the field, the
// two examples' dataset indices and their shapes. `indices` are the examples' dataset indices.
Batch stack_examples(const std::vector<Example>& examples, const std::vector<int64_t>& indices,
                     int64_t epoch = 0);

}  // namespace ada::data
