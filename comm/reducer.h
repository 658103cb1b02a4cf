// Reducer: how the ranks' gradients (or model deltas) become one. A reducer works on a fused
// f32 buffer (a bucket; what travels may be bf16/fp16, reducer.precision) holding several tensors
// back to back, described by spans, and must leave bit-identical contents on every rank. Built-in:
// sum, average, adasum. To add one: a class implementing reduce() in its own file plus one line in
// register_builtin_reducers() (reducers.cc).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/config.h"
#include "base/registry.h"
#include "comm/communicator.h"

namespace ada::comm {

// A tensor inside a fused buffer: element offset and count.
struct TensorSpan {
  int64_t offset = 0;
  int64_t numel = 0;
};

// What the trainer reduces: gradients before the optimizer step, or the per-tensor model delta
// of a local optimizer step (Horovod's approach for stateful optimizers with Adasum).
enum class ReduceTarget { gradients, model_delta };
const char* target_name(ReduceTarget t);
ReduceTarget target_from_name(const std::string& name, const std::string& where);

class Reducer {
 public:
  virtual ~Reducer() = default;
  virtual std::string name() const = 0;
  // The target this reducer is meant for when the config does not say.
  virtual ReduceTarget default_target() const { return ReduceTarget::gradients; }
  // Reduces `buffer` (f32) across `comm` in place. Spans are in buffer order, disjoint. The
  // buffer may live on a CUDA device when `comm` takes device tensors (NCCL): the built-in
  // reducers do their arithmetic with core ops, which run where the buffer is.
  // Collective: every rank calls it with the same spans.
  virtual void reduce(Tensor& buffer, const std::vector<TensorSpan>& spans, Communicator& comm) = 0;
  // Diagnostics, for the metrics: fixed names (the same on every rank, from construction on),
  // and for each the (sum, count) accumulated by reduce() since the previous take_stats(),
  // which resets them. The caller sums both over ranks and logs sum/count. May be called from
  // another thread than reduce(), but not while a reduce() of this step is still to come.
  virtual std::vector<std::string> stat_names() const { return {}; }
  virtual std::vector<std::pair<double, double>> take_stats() { return {}; }
  // Adds (sum, count) pairs, one per stat_names() entry, to what take_stats() will return: what
  // an earlier take_stats() gave back (a checkpoint carries the open window to a resumed run).
  virtual void add_stats(const std::vector<std::pair<double, double>>& stats) { (void)stats; }
};

// reducer.precision: what travels between ranks. fp32 (default), or bf16 / fp16: each bucket is
// rounded (to nearest even) into a 16-bit copy, reduced in that format — half the bytes moved,
// sums added in f32 and rounded at each step — and widened back into the f32 bucket. Every rank
// ends with the same bits. fp16 saturates to +-Inf past 65504: with loss scaling, an overflow
// (train.loss_scale). Returns the wire dtype (a reducer runs its exchanges through a Wire of it,
// comm/wire.h); ConfigError naming the key for anything else.
DType read_wire_dtype(const Config& section);

// Builds a reducer from its config section (the trainer's `reducer:`; tools pass a small
// parsed one). A factory reads only the options it understands (marking them read), so keys no
// reducer reads stay errors at Config::finish().
using ReducerFactory = std::function<std::unique_ptr<Reducer>(const Config& section)>;
using ReducerRegistry = Registry<ReducerFactory>;
// Adds sum, average and adasum.
void register_builtin_reducers(ReducerRegistry& registry);
// The built-in reducers, registered once.
const ReducerRegistry& builtin_reducers();

}  // namespace ada::comm
