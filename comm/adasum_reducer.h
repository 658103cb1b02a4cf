// Adasum (Maleki et al., MLSys 2021), per tensor, over any number of ranks.
//
// Pair operator, for vectors a, b of one tensor with d = a.b, A = |a|^2, B = |b|^2 (double):
//   adasum(a, b) = (1 - d/(2A)) a + (1 - d/(2B)) b,   a coefficient is 1 when its norm term is
//   below sqrt(DBL_MIN) (so adasum(0, b) = b). Orthogonal inputs add, parallel inputs average.
//
// P = 2^k ranks: the balanced binary tree over adjacent rank blocks (level 1 combines (0,1),
// (2,3), ...; level 2 combines {0,1} with {2,3}, ...), computed with Horovod's vector-halving
// distance-doubling: at distance 1, 2, 4, ... a rank swaps half of its current segment with
// rank XOR distance, the (a.b, |a|^2, |b|^2) partial sums of every tensor are gathered over the
// 2*distance ranks sharing the segment and summed in rank order, each rank combines its half,
// and an allgather phase in reverse returns the full result. Every element is computed by one
// rank and copied to the others, so all ranks hold bit-identical results.
//
// Any other P (our extension; Horovod refuses them): let Q = 2^floor(log2 P) and E = P - Q.
// Rank Q+i (i < E) first sends its buffer to rank i, which combines them with the pair operator
// (rank i's vector as a). Ranks 0..Q-1 then run the tree above, where a node now stands for 1 or
// 2 ranks; a level combining blocks with n_a and n_b ranks uses the count-weighted operator
//   (1 - w_a d/A) a + (1 - w_b d/B) b,  w_a = n_a/(n_a+n_b), w_b = n_b/(n_a+n_b),
// which is exactly the pair operator when n_a = n_b (always, for P = 2^k), still adds orthogonal
// inputs, and makes parallel inputs give the mean over all P ranks (each rank weighs 1/P).
// Finally rank i sends the result back to rank Q+i.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "comm/reducer.h"

namespace ada::comm {

class AdasumReducer : public Reducer {
 public:
  std::string name() const override { return "adasum"; }
  ReduceTarget default_target() const override { return ReduceTarget::model_delta; }
  void reduce(Tensor& buffer, const std::vector<TensorSpan>& spans, Communicator& comm) override;

 private:
  // Level groups of the tree phase (2*distance ranks each), created collectively on the first
  // reduce() over a communicator and cached by its address: a communicator must outlive the
  // reducers that used it.
  struct Groups {
    std::vector<std::unique_ptr<Communicator>> by_level;
  };
  Groups& groups_for(Communicator& comm);
  std::map<const Communicator*, Groups> groups_;
};

// The pair operator with weights (w_a = w_b = 1/2 is plain Adasum), in place into a, for one
// tensor given its full-vector sums; exposed for tests and the reduce tool's documentation.
struct AdasumCoefficients {
  double ca, cb;
};
AdasumCoefficients adasum_coefficients(double dot, double a2, double b2, double w_a = 0.5,
                                       double w_b = 0.5);

}  // namespace ada::comm
