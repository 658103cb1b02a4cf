// The simple reducers (sum, average) and the registry of built-in reducers.
#include "comm/adasum_reducer.h"
#include "comm/reducer.h"
#include "core/ops.h"

namespace ada::comm {
namespace {

class SumReducer : public Reducer {
 public:
  std::string name() const override { return "sum"; }
  void reduce(Tensor& buffer, const std::vector<TensorSpan>&, Communicator& comm) override {
    comm.allreduce(buffer, ReduceOp::sum);
  }
};

class AverageReducer : public Reducer {
 public:
  std::string name() const override { return "average"; }
  void reduce(Tensor& buffer, const std::vector<TensorSpan>&, Communicator& comm) override {
    comm.allreduce(buffer, ReduceOp::sum);
    if (comm.size() > 1) ops::scale_(buffer, 1.f / static_cast<float>(comm.size()));
  }
};

}  // namespace

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
  registry.add("sum", [](const Config&) { return std::make_unique<SumReducer>(); });
  registry.add("average", [](const Config&) { return std::make_unique<AverageReducer>(); });
  registry.add("adasum", [](const Config& c) {
    return std::make_unique<AdasumReducer>(AdasumOptions::from_config(c));
  });
}

}  // namespace ada::comm
