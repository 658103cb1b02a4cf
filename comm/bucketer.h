// GradBucketer: packs gradients into contiguous buckets and reduces each bucket as soon as all
// of its gradients are ready, while backward goes on (the DDP/Horovod fusion-buffer idea).
// Buckets follow the reverse of the parameter order (the order backward produces gradients),
// are the same on every rank, and are launched strictly in bucket order, so every rank issues
// the same collectives in the same order. finish() zero-fills gradients that never arrived
// (parameters unused this step), launches what is left, waits, and writes results back.
// Besides gradients, a bucket can carry any per-parameter payload of the parameter's shape (model
// deltas): write it into slot(i) and call mark_ready(i); wait() then leaves the reduced payload
// in the slots. Each launched bucket is a span on the timeline (base/timeline.h).
#pragma once

#include <memory>
#include <unordered_map>
#include <vector>

#include "comm/reducer.h"
#include "core/autograd.h"

namespace ada::comm {

struct BucketOptions {
  int64_t bucket_bytes = 25ll << 20;       // cap of every bucket but the first
  int64_t first_bucket_bytes = 1ll << 20;  // small first bucket: communication starts early
  // Make each parameter's grad a view into its bucket, so backward accumulates straight into
  // the bucket and no copy is made in or out (PyTorch DDP's gradient_as_bucket_view). A grad
  // replaced by another tensor later is still handled, by copying.
  bool grads_as_bucket_views = true;
};

// Pure bucket assignment: tensors (element counts, in bucket order) grouped greedily so a
// bucket's bytes stay within its cap (a larger tensor gets a bucket of its own).
std::vector<std::vector<size_t>> assign_buckets(const std::vector<int64_t>& numels,
                                                const BucketOptions& options);

class GradBucketer {
 public:
  // `params` in registration order (identical on every rank); each must be an f32 leaf, all on one
  // device (the buckets live there).
  GradBucketer(std::vector<Variable> params, Communicator& comm, Reducer& reducer,
               BucketOptions options = {});
  ~GradBucketer();

  // Starts a step: forgets which gradients arrived. Call before backward (after zeroing the
  // parameters' grads, as before any backward: gradients accumulate).
  void begin_step();
  // Grad-ready hook: copies the gradient into its bucket and launches every bucket that is
  // complete and whose predecessors are launched. Unknown parameters are an error.
  void on_grad_ready(const Variable& param);
  // Index of `param` in registration order; Error if it is not one of the parameters.
  size_t index_of(const Variable& param) const;
  // Parameter i's slice of its bucket, shaped like the parameter. Fill it, then mark_ready(i).
  Tensor slot(size_t param) const;
  // Parameter i's slot holds its payload: launches every bucket that is complete and whose
  // predecessors are launched. Each parameter once per step.
  void mark_ready(size_t param);
  // Waits for every bucket of the step (every parameter must be marked ready) and rethrows the
  // first reduction error. The reduced payloads are in the slots.
  void wait();
  // Completes the step: a gradient never reported ready contributes what its grad holds (zero
  // if undefined); waits for every bucket and leaves the reduced values in each parameter's grad
  // (allocated if it was undefined).
  void finish();

  // After wait() or finish(): whether every reduced value is finite — one pass per bucket (the
  // overflow check of loss scaling). The reduced buckets are identical on every rank, so every
  // rank gets the same answer.
  bool all_finite() const;

  // Reduces arbitrary tensors with the same shapes as the parameters (e.g. model deltas),
  // synchronously, through the same buckets; results are written back in place.
  void reduce(std::vector<Tensor>& tensors);

  size_t bucket_count() const { return buckets_.size(); }
  // Bucket index of each parameter (registration order), for tests and logs.
  std::vector<size_t> bucket_of_params() const;

 private:
  struct Bucket {
    std::vector<size_t> params;  // indices into params_
    std::vector<TensorSpan> spans;
    Tensor buffer;
    size_t pending = 0;
    bool launched = false;
    WorkHandle work;
  };
  void launch_ready();
  void wait_all();
  void copy_in(size_t param, const Tensor& grad);
  bool is_view(size_t param) const;  // the param's grad is its slice of the bucket

  std::vector<Variable> params_;
  std::unordered_map<const VarImpl*, size_t> index_;
  std::vector<size_t> bucket_of_;   // param -> bucket
  std::vector<int64_t> offset_of_;  // param -> element offset in its bucket
  std::vector<bool> ready_;
  std::vector<Bucket> buckets_;
  size_t next_launch_ = 0;
  int64_t launches_ = 0;  // buckets launched since construction (timeline labels)
  Communicator& comm_;
  Reducer& reducer_;
};

}  // namespace ada::comm
