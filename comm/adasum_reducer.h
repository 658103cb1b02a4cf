// Adasum (Maleki et al., MLSys 2021), per tensor, over any number of ranks; flat, or
// hierarchical over nodes (Horovod's GPU scheme): the pair operator, the tree and its
// vector-halving distance-doubling schedule, the fold for non-power-of-two worlds, the latency
// path and the options. Exact semantics, cost and the diagnostic: docs/architecture.md, section 5.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/node_layout.h"
#include "comm/reducer.h"
#include "comm/wire.h"

namespace ada::comm {

struct AdasumOptions {
  bool hierarchical = false;
  int local_size = 0;  // hierarchical: ranks per node; 0: the nodes MPI reports
  // Buckets with world size x elements <= this take the latency path (see above); 0: never.
  int64_t gather_below = int64_t(1) << 14;
  std::string where;  // names the options in errors (a config location); may be empty
  // reducer.precision (comm/reducer.h): bf16/fp16 puts every exchange on a 16-bit wire. The
  // dot products and norms still sum in double over f32 values (the received halves widened);
  // each rank rounds its finished segment before the allgather phase, so every rank ends with
  // the same bits.
  DType wire = DType::f32;
  // Reads `hierarchical`, `local_size`, `gather_below` and `precision` from a reducer config
  // section.
  static AdasumOptions from_config(const Config& section);
};

// Not thread-safe: one reduce() at a time per instance (the communication thread runs them).
class AdasumReducer : public Reducer {
 public:
  explicit AdasumReducer(AdasumOptions options = {});
  std::string name() const override { return "adasum"; }
  ReduceTarget default_target() const override { return ReduceTarget::model_delta; }
  void reduce(Tensor& buffer, const std::vector<TensorSpan>& spans, Communicator& comm) override;
  const AdasumOptions& options() const { return options_; }
  std::vector<std::string> stat_names() const override { return {"adasum_pair_cos"}; }
  std::vector<std::pair<double, double>> take_stats() override;
  void add_stats(const std::vector<std::pair<double, double>>& stats) override;

 private:
  // Who does what for one communicator: created collectively on the first reduce() over it and
  // cached by its address (a communicator must outlive the reducers that used it).
  struct Topology {
    std::unique_ptr<NodeLayout> layout;  // hierarchical only
    int local_size = 1;
    Communicator* peers = nullptr;       // runs the tree: the world (flat) or the cross-node ranks
    Communicator* fold_group = nullptr;  // sums the fold's partial sums (the node); null: alone
    std::vector<std::unique_ptr<Communicator>> level_groups;  // sum each level's partial sums
  };
  Topology& topology_for(Communicator& comm);
  // The flat schedule over topo.peers on x (this rank's vector or slice); pieces[i] is tensor
  // i's part of x (offset relative to x, possibly empty), indexed alike on every rank.
  void tree(Tensor& x, const std::vector<TensorSpan>& pieces, Topology& topo);
  // Sends x[glo, ghi) to `partner` (nothing if glo < 0) and receives its copy of x[klo, khi)
  // into scratch, then sets `mine` to the per-tensor partial sums over [klo, khi)
  // (a = the left block's vector).
  void exchange_and_sum(Communicator& peers, int partner, int tag, Tensor& x, int64_t klo,
                        int64_t khi, int64_t glo, int64_t ghi, bool left,
                        const std::vector<TensorSpan>& pieces, std::vector<double>& mine);
  // The latency path: every rank gathers every buffer and evaluates the same tree.
  void reduce_gathered(Tensor& x, const std::vector<TensorSpan>& spans, Communicator& comm,
                       int local_size);
  Tensor scratch(int64_t n, Device device);  // the partner's data, on the buffer's device
  // Adds tensor-wise cosines of the first tree level to the diagnostic.
  void add_pair_cosines(const std::vector<double>& triples);

  AdasumOptions options_;
  std::map<const Communicator*, Topology> topologies_;
  Tensor scratch_;  // the partner's halves; grows to the largest need, reused across calls
  Tensor slice_;    // hierarchical: this rank's slice of the node sum
  Wire wire_;       // every exchange goes through it (16-bit when reducer.precision says so)
  std::mutex stats_mu_;
  double cos_sum_ = 0, cos_count_ = 0;
};

// The pair operator with weights (w_a = w_b = 1/2 is plain Adasum), in place into a, for one
// tensor given its full-vector sums; exposed for tests and the reduce tool's documentation.
struct AdasumCoefficients {
  double ca, cb;
};
AdasumCoefficients adasum_coefficients(double dot, double a2, double b2, double w_a = 0.5,
                                       double w_b = 0.5);

}  // namespace ada::comm
