// The simple reducers (sum, average) and the registry of built-in reducers.
#include "comm/adasum_reducer.h"
#include "comm/reducer.h"
#include "comm/wire.h"
#include "core/ops.h"

namespace ada::comm {
namespace {

// sum, and average (the sum divided by the world size, in f32 after the wire; on an fp16 wire
// before it, as PyTorch DDP's fp16 hook and Horovod's prescale do: its partial sums of P ranks'
// values would overflow from 65504 / P, e.g. 1,024 at 64 ranks, and under loss scaling an
// overflow halves the scale, so it would settle P times lower than on one rank).
class SumReducer : public Reducer {
 public:
  SumReducer(bool average, DType wire) : average_(average), wire_(wire) {}
  std::string name() const override { return average_ ? "average" : "sum"; }
  void reduce(Tensor& buffer, const std::vector<TensorSpan>&, Communicator& comm) override {
    if (comm.size() == 1) return;
    const float mean = 1.f / static_cast<float>(comm.size());
    const bool before = average_ && wire_.dtype() == DType::f16;
    if (before) ops::scale_(buffer, mean);
    wire_.allreduce(comm, buffer);
    if (average_ && !before) ops::scale_(buffer, mean);
  }

 private:
  bool average_;
  Wire wire_;
};

}  // namespace

DType read_wire_dtype(const Config& section) {
  const std::string s = section.get_or<std::string>("precision", "fp32");
  if (s == "fp32") return DType::f32;
  if (s == "bf16") return DType::bf16;
  if (s == "fp16") return DType::f16;
  ADA_THROW(ConfigError) << section.where("precision") << ": unknown precision '" << s
                         << "'; known: fp32, bf16, fp16 (what the buckets travel as)";
  return DType::f32;
}

const char* target_name(ReduceTarget t) {
  return t == ReduceTarget::gradients ? "gradients" : "model_delta";
}

ReduceTarget target_from_name(const std::string& name, const std::string& where) {
  if (name == "gradients") return ReduceTarget::gradients;
  if (name == "model_delta") return ReduceTarget::model_delta;
  ADA_THROW(ConfigError) << (where.empty() ? "" : where + ": ") << "unknown reduce target '" << name
                         << "'; known: gradients, model_delta";
  return ReduceTarget::gradients;
}

void register_builtin_reducers(ReducerRegistry& registry) {
  registry.add("sum", [](const Config& c) {
    return std::make_unique<SumReducer>(false, read_wire_dtype(c));
  });
  registry.add("average", [](const Config& c) {
    return std::make_unique<SumReducer>(true, read_wire_dtype(c));
  });
  registry.add("adasum", [](const Config& c) {
    return std::make_unique<AdasumReducer>(AdasumOptions::from_config(c));
  });
}

const ReducerRegistry& builtin_reducers() {
  return builtin_registry<ReducerRegistry>("reducer", register_builtin_reducers);
}

}  // namespace ada::comm
