// Adasum (Maleki et al., MLSys 2021), per tensor, over any number of ranks; flat, or
// hierarchical over nodes (Horovod's GPU scheme). Owns the pair operator, the tree and its
// vector-halving distance-doubling schedule, its latency path, and the options.
//
// Pair operator, for vectors a, b of one tensor with d = a.b, A = |a|^2, B = |b|^2 (double):
//   adasum(a, b) = (1 - d/(2A)) a + (1 - d/(2B)) b,   a coefficient is 1 when its norm term is
//   below sqrt(DBL_MIN) (so adasum(0, b) = b). Orthogonal inputs add, parallel inputs average.
//
// Flat, P = 2^k ranks: the balanced binary tree over adjacent rank blocks (level 1 combines
// (0,1), (2,3), ...; level 2 combines {0,1} with {2,3}, ...), computed with Horovod's
// vector-halving distance-doubling: at distance 1, 2, 4, ... a rank swaps half of its current
// segment with rank XOR distance, the (a.b, |a|^2, |b|^2) partial sums of every tensor are
// gathered over the 2*distance ranks sharing the segment and summed in rank order, each rank
// combines its half, and an allgather phase in reverse returns the full result. Every element is
// computed by one rank and copied to the others, so all ranks hold bit-identical results.
//
// Flat, any other P (our extension; Horovod refuses them): let Q = 2^floor(log2 P), E = P - Q.
// Rank Q+i (i < E) first sends its buffer to rank i, which combines them with the pair operator
// (rank i's vector as a). Ranks 0..Q-1 then run the tree above, where a node now stands for 1 or
// 2 ranks; a level combining blocks with n_a and n_b ranks uses the count-weighted operator
//   (1 - w_a d/A) a + (1 - w_b d/B) b,  w_a = n_a/(n_a+n_b), w_b = n_b/(n_a+n_b),
// which is exactly the pair operator when n_a = n_b (always, for P = 2^k), still adds orthogonal
// inputs, and makes parallel inputs give the mean over all P ranks (each rank weighs 1/P).
// Finally rank i sends the result back to rank Q+i.
//
// Hierarchical (`hierarchical: true`): ranks form N nodes of L consecutive ranks (NodeLayout:
// MPI's shared-memory split, or `local_size: L` to simulate nodes). The result is, per tensor,
//   result = (1/L) * AdasumTree_nodes(S_0, ..., S_{N-1}),   S_k = sum of node k's L buffers,
// where AdasumTree_nodes is exactly the flat reducer above applied to N "ranks" holding S_k
// (so for N not a power of two the same fold rule, with nodes for ranks). One node: the average.
// Computed as Horovod does: a sum reduce-scatter inside the node (local rank j owns slice j of
// the node sum; slices are n/L elements, the first n%L one more), the flat schedule across
// nodes on the slices among ranks of equal local rank, where the partial sums of every level
// (and of the fold) are gathered over all ranks of the nodes involved, so each coefficient uses
// its tensor's full dot product and norms even when the tensor straddles slices; then x 1/L and
// an allgather inside the node. By homogeneity this equals the tree over node means. LR rule
// (Horovod's guide): the intra-node part is an average, so scale the single-rank LR by L
// (schedule.adasum_lr_factor: L), not by the world size.
//
// Cost: the data moved is that of a reduce-scatter plus an allgather (as MPI_Allreduce), plus
// one small allgather of 3 doubles per tensor per level. Received halves land in a scratch
// buffer kept by the reducer (no page faults after the first call), in pieces whose partial sums
// are taken as each arrives (sendrecv_pipelined), while the data is in cache. The arithmetic is
// core's segment ops (ops::segment_partial_sums, ops::segment_combine: every tensor of a level
// in one call), so a bucket on a CUDA device is reduced there, one launch per level, with the
// exchanges through a communicator that takes device tensors (NCCL) and no pipelining.
//
// Diagnostic (stat "adasum_pair_cos"): the cosine a.b/(|a||b|) of every tensor at the tree's
// first level (two ranks, or two nodes' sums in the hierarchical form), averaged over tensors
// with both norms non-zero. Near 1 Adasum averages, near 0 it sums (the paper: gradients grow
// more orthogonal as training goes on); free, from partial sums the combine needs anyway.
//
// Latency path: for a small bucket the schedule above is ~3 log2(P) message latencies for
// little data. When world size x elements <= gather_below (default 2^14), every rank instead
// allgathers every buffer and evaluates the same definition (node sums in local rank order,
// fold, weighted tree, partial sums in double, each combine rounded to f32) on the same inputs
// with the same code: bit-identical on every rank, equal to the schedule above up to rounding.
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
