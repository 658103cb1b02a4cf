#include "comm/bucketer.h"

#include <string>

#include "base/timeline.h"
#include "core/ops.h"

namespace ada::comm {

std::vector<std::vector<size_t>> assign_buckets(const std::vector<int64_t>& numels,
                                                const BucketOptions& options) {
  ADA_CHECK_ARG(options.bucket_bytes > 0 && options.first_bucket_bytes > 0, ConfigError)
      << "bucket sizes must be positive (bucket_bytes " << options.bucket_bytes
      << ", first_bucket_bytes " << options.first_bucket_bytes << ")";
  std::vector<std::vector<size_t>> buckets;
  int64_t bytes = 0;
  for (size_t i = 0; i < numels.size(); ++i) {
    const int64_t b = numels[i] * static_cast<int64_t>(sizeof(float));
    const int64_t cap = buckets.size() == 1 ? options.first_bucket_bytes : options.bucket_bytes;
    if (buckets.empty() || (bytes + b > cap && !buckets.back().empty())) {
      buckets.emplace_back();
      bytes = 0;
    }
    buckets.back().push_back(i);
    bytes += b;
  }
  return buckets;
}

GradBucketer::GradBucketer(std::vector<Variable> params, Communicator& comm, Reducer& reducer,
                           BucketOptions options)
    : params_(std::move(params)), comm_(comm), reducer_(reducer) {
  const size_t n = params_.size();
  std::vector<int64_t> numels;
  numels.reserve(n);
  for (size_t k = 0; k < n; ++k) {  // bucket order: reverse registration order
    const Variable& p = params_[n - 1 - k];
    ADA_CHECK_ARG(p.defined() && p.is_leaf(), Error)
        << "GradBucketer: parameter " << n - 1 - k << " ('" << (p.defined() ? p.name() : "")
        << "') must be a leaf Variable";
    check_dtype(p.value(), DType::f32, "GradBucketer", p.name().c_str());
    ADA_CHECK_ARG(p.value().device() == params_[n - 1].value().device(), DeviceError)
        << "GradBucketer: parameter '" << p.name() << "' is on " << p.value().device().str()
        << ", '" << params_[n - 1].name() << "' on " << params_[n - 1].value().device().str()
        << "; the buckets live on one device";
    numels.push_back(p.value().numel());
    ADA_CHECK_ARG(index_.emplace(p.impl(), n - 1 - k).second, Error)
        << "GradBucketer: parameter '" << p.name() << "' is listed twice";
  }
  bucket_of_.assign(n, 0);
  offset_of_.assign(n, 0);
  ready_.assign(n, false);
  for (const auto& members : assign_buckets(numels, options)) {
    Bucket b;
    int64_t off = 0;
    for (size_t k : members) {
      const size_t param = n - 1 - k;
      b.params.push_back(param);
      b.spans.push_back({off, numels[k]});
      bucket_of_[param] = buckets_.size();
      offset_of_[param] = off;
      off += numels[k];
    }
    b.buffer = Tensor::zeros({off}, DType::f32, params_.front().value().device());
    if (options.grads_as_bucket_views)
      for (size_t j = 0; j < b.params.size(); ++j) {
        Variable& p = params_[b.params[j]];
        Tensor view =
            b.buffer.narrow(b.spans[j].offset, b.spans[j].numel).reshape(p.value().shape());
        if (p.grad().defined()) view.copy_from(p.grad());
        p.grad() = view;
      }
    buckets_.push_back(std::move(b));
  }
  begin_step();
}

GradBucketer::~GradBucketer() {
  for (auto& b : buckets_)  // never leave a queued operation pointing at freed buffers
    if (b.work) try {
        b.work->wait();
      } catch (...) {
      }
}

std::vector<size_t> GradBucketer::bucket_of_params() const {
  return bucket_of_;
}

void GradBucketer::begin_step() {
  for (auto& b : buckets_) {
    ADA_CHECK_ARG(!b.launched || (b.work && b.work->done()), Error)
        << "GradBucketer::begin_step() while a bucket of the previous step is in flight; call "
           "finish() first";
    b.pending = b.params.size();
    b.launched = false;
    b.work.reset();
  }
  std::fill(ready_.begin(), ready_.end(), false);
  next_launch_ = 0;
}

bool GradBucketer::is_view(size_t param) const {
  const Tensor& g = params_[param].grad();
  const Bucket& b = buckets_[bucket_of_[param]];
  return g.defined() && g.shares_storage_with(b.buffer) &&
         g.raw_data() == b.buffer.data<float>() + offset_of_[param];
}

void GradBucketer::copy_in(size_t param, const Tensor& grad) {
  Bucket& b = buckets_[bucket_of_[param]];
  const int64_t n = params_[param].value().numel();
  if (grad.defined() && grad.raw_data() == b.buffer.data<float>() + offset_of_[param])
    return;  // the bucket view
  Tensor dst = b.buffer.narrow(offset_of_[param], n);
  if (grad.defined()) {
    ADA_CHECK_ARG(grad.numel() == n && grad.dtype() == DType::f32, ShapeError)
        << "GradBucketer: gradient " << grad.str() << " of '" << params_[param].name()
        << "' does not match the parameter " << params_[param].value().str();
    dst.copy_from(grad);
  } else {
    ops::fill_(dst, 0.f);
  }
}

size_t GradBucketer::index_of(const Variable& param) const {
  auto it = index_.find(param.impl());
  ADA_CHECK_ARG(it != index_.end(), Error)
      << "GradBucketer: '" << param.name() << "' is not one of the parameters it was built with";
  return it->second;
}

Tensor GradBucketer::slot(size_t param) const {
  const Bucket& b = buckets_[bucket_of_[param]];
  return b.buffer.narrow(offset_of_[param], params_[param].value().numel())
      .reshape(params_[param].value().shape());
}

void GradBucketer::mark_ready(size_t i) {
  ADA_CHECK_ARG(!ready_[i], Error)
      << "GradBucketer: '" << params_[i].name() << "' reported ready twice in one step";
  ready_[i] = true;
  --buckets_[bucket_of_[i]].pending;
  launch_ready();
}

void GradBucketer::on_grad_ready(const Variable& param) {
  const size_t i = index_of(param);
  ADA_CHECK_ARG(!ready_[i], Error)
      << "GradBucketer: gradient of '" << param.name() << "' reported ready twice in one step";
  copy_in(i, param.grad());
  mark_ready(i);
}

void GradBucketer::launch_ready() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    Bucket& b = buckets_[next_launch_++];
    b.launched = true;
    ++launches_;
    Tensor buf = b.buffer;
    const std::vector<TensorSpan>* spans = &b.spans;
    if (!Timeline::instance().enabled()) {
      b.work =
          comm_.run_async([this, buf, spans]() mutable { reducer_.reduce(buf, *spans, comm_); });
      continue;
    }
    // Timeline: the bucket's wait in the queue and its reduction, on the communication thread.
    const auto queued = Timeline::Clock::now();
    const std::string label = "bucket " + std::to_string(next_launch_ - 1);
    const std::string args = "\"bucket\": " + std::to_string(next_launch_ - 1) +
                             ", \"launch\": " + std::to_string(launches_) +
                             ", \"bytes\": " + std::to_string(buf.nbytes()) + ", \"reducer\": \"" +
                             reducer_.name() + "\"";
    b.work = comm_.run_async([this, buf, spans, queued, label, args]() mutable {
      auto& tl = Timeline::instance();
      const auto start = Timeline::Clock::now();
      tl.span(label + " queued", "comm", queued, start, args);
      reducer_.reduce(buf, *spans, comm_);
      tl.span(label + " " + reducer_.name(), "comm", start, Timeline::Clock::now(), args);
    });
  }
}

void GradBucketer::wait_all() {
  // Waits for every bucket, even after a failure, so no queued operation outlives its buffer.
  std::exception_ptr error;
  for (auto& b : buckets_) {
    try {
      if (b.work) b.work->wait();
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

void GradBucketer::wait() {
  for (size_t i = 0; i < params_.size(); ++i)
    ADA_CHECK_ARG(ready_[i], Error)
        << "GradBucketer::wait(): '" << params_[i].name() << "' was never marked ready this step";
  wait_all();
}

void GradBucketer::finish() {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (ready_[i]) continue;
    // Not reported this step (unused by the last backward): contributes what its grad holds,
    // zero if it has none, and is never waited on.
    copy_in(i, params_[i].grad());
    mark_ready(i);
  }
  wait_all();
  for (size_t i = 0; i < params_.size(); ++i) {
    if (is_view(i)) continue;  // reduced in place
    Tensor& g = params_[i].grad();
    if (!g.defined())
      g = Tensor::empty(params_[i].value().shape(), DType::f32, params_[i].value().device());
    g.copy_from(slot(i));
  }
}

bool GradBucketer::all_finite() const {
  std::vector<Tensor> buffers;
  buffers.reserve(buckets_.size());
  for (const auto& b : buckets_) buffers.push_back(b.buffer);
  return ops::all_finite(buffers);  // one wait for all buckets on a GPU
}

void GradBucketer::reduce(std::vector<Tensor>& tensors) {
  ADA_CHECK_ARG(tensors.size() == params_.size(), ShapeError)
      << "GradBucketer::reduce: " << tensors.size() << " tensors for " << params_.size()
      << " parameters";
  begin_step();
  for (size_t i = 0; i < params_.size(); ++i) {
    copy_in(i, tensors[i]);
    mark_ready(i);
  }
  wait_all();
  for (size_t i = 0; i < params_.size(); ++i) tensors[i].copy_from(slot(i));
}

}  // namespace ada::comm
