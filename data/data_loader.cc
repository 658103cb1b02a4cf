#include "data/data_loader.h"

#include <omp.h>

#include <sstream>
#include <system_error>

#include "base/error.h"
#include "core/parallel.h"

namespace ada::data {

namespace {

// Re-throws `p` as the same ada error type with `context` appended to its message.
[[noreturn]] void rethrow_with_context(const std::exception_ptr& p, const std::string& context) {
  try {
    std::rethrow_exception(p);
  } catch (const IoError& e) {
    throw IoError(e.what() + context);
  } catch (const ShapeError& e) {
    throw ShapeError(e.what() + context);
  } catch (const DTypeError& e) {
    throw DTypeError(e.what() + context);
  } catch (const DeviceError& e) {
    throw DeviceError(e.what() + context);
  } catch (const ConfigError& e) {
    throw ConfigError(e.what() + context);
  } catch (const CommError& e) {
    throw CommError(e.what() + context);
  } catch (const ExternalError& e) {
    throw ExternalError(e.what() + context);
  } catch (const InternalError& e) {
    throw InternalError(e.what() + context);
  } catch (const Error& e) {
    throw Error(e.what() + context);
  } catch (const std::exception& e) {
    throw Error(std::string(e.what()) + context);
  } catch (...) {
    throw Error("unknown exception" + context);
  }
}

}  // namespace

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DistributedSampler sampler,
                       LoaderOptions options)
    : dataset_(std::move(dataset)), sampler_(std::move(sampler)), opt_(options) {
  ADA_CHECK_ARG(dataset_ != nullptr, ConfigError) << "DataLoader: no dataset given";
  ADA_CHECK_ARG(opt_.batch_size >= 1, ConfigError)
      << "DataLoader: batch_size " << opt_.batch_size << " must be at least 1";
  ADA_CHECK_ARG(opt_.num_workers >= 0, ConfigError)
      << "DataLoader: num_workers " << opt_.num_workers << " must be 0 (synchronous) or more";
  ADA_CHECK_ARG(opt_.prefetch >= 0, ConfigError)
      << "DataLoader: prefetch " << opt_.prefetch << " must be 0 (default) or more";
  ADA_CHECK_ARG(sampler_.dataset_size() == dataset_->size(), ConfigError)
      << "DataLoader: the sampler covers " << sampler_.dataset_size() << " examples but "
      << dataset_->describe() << " has " << dataset_->size();
  if (opt_.prefetch == 0) opt_.prefetch = 2 * std::max(opt_.num_workers, 1);
  begin(sampler_.epoch(), sampler_.state().position);
}

DataLoader::~DataLoader() {
  stop_workers();
}

int64_t DataLoader::batches_per_epoch() const {
  int64_t n = sampler_.samples_per_rank();
  return opt_.drop_last_batch ? n / opt_.batch_size : (n + opt_.batch_size - 1) / opt_.batch_size;
}

void DataLoader::start_epoch(int64_t epoch) {
  begin(epoch, 0);
}

void DataLoader::restore(const SamplerState& state) {
  begin(state.epoch, state.position);
}

void DataLoader::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
}

void DataLoader::begin(int64_t epoch, int64_t position) {
  stop_workers();
  sampler_.restore({epoch, position});
  plan_.clear();
  plan_end_position_.clear();
  while (sampler_.remaining() > 0) {
    std::vector<int64_t> idx = sampler_.next(opt_.batch_size);
    if (opt_.drop_last_batch && static_cast<int64_t>(idx.size()) < opt_.batch_size) break;
    plan_.push_back(std::move(idx));
    plan_end_position_.push_back(sampler_.state().position);
  }
  epoch_ = epoch;
  consumed_position_ = position;
  next_out_ = 0;
  failed_ = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    next_claim_ = 0;
    stop_ = false;
    ready_.clear();
  }
  for (int w = 0; w < opt_.num_workers; ++w) {
    try {
      workers_.emplace_back([this, w] { worker_loop(w); });
    } catch (const std::system_error& e) {  // the system's limit on threads (or their memory)
      stop_workers();
      ADA_THROW(ConfigError) << "data loader: cannot start worker thread " << w + 1 << " of "
                             << opt_.num_workers << " (" << e.what()
                             << "); lower data.workers (a few per rank is typical)";
    }
  }
}

void DataLoader::build(int64_t k, Slot& slot, int worker_id) const {
  const std::vector<int64_t>& idx = plan_[static_cast<size_t>(k)];
  auto context = [&](const char* stage, int64_t example) {
    std::ostringstream os;
    os << " (data loader " << stage << ": " << dataset_->describe() << ", epoch " << epoch_
       << ", batch " << k;
    if (example >= 0) os << ", example index " << example;
    if (worker_id >= 0)
      os << ", worker thread " << worker_id;
    else
      os << ", no worker threads";
    os << ")";
    return os.str();
  };
  std::vector<Example> examples;
  examples.reserve(idx.size());
  for (int64_t i : idx) {
    try {
      examples.push_back(dataset_->get(i, epoch_));
    } catch (...) {
      slot.error = std::current_exception();
      slot.context = context("reading", i);
      return;
    }
  }
  try {
    slot.batch = stack_examples(examples, idx, epoch_);
  } catch (...) {
    slot.error = std::current_exception();
    slot.context = context("stacking", -1);
  }
}

void DataLoader::worker_loop(int worker_id) {
  // Any parallel_for or OpenMP region a dataset happens to enter from this thread runs inline
  // (a team of one), so the loader never starts a second OpenMP pool that would fight the
  // training threads for the cores; the workers themselves are the loader's only parallelism.
  set_thread_serial(true);
  omp_set_num_threads(1);
  const auto n = static_cast<int64_t>(plan_.size());
  for (;;) {
    int64_t k;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] {
        return stop_ || next_claim_ >= n || next_claim_ < next_out_ + opt_.prefetch;
      });
      if (stop_ || next_claim_ >= n) return;
      k = next_claim_++;
    }
    Slot slot;
    build(k, slot, worker_id);
    {
      std::lock_guard<std::mutex> lock(mu_);
      ready_.emplace(k, std::move(slot));
    }
    ready_cv_.notify_all();
  }
}

std::optional<Batch> DataLoader::next() {
  if (failed_ || next_out_ >= static_cast<int64_t>(plan_.size())) return std::nullopt;
  const int64_t k = next_out_;
  Slot slot;
  if (opt_.num_workers == 0) {
    build(k, slot, -1);
  } else {
    std::unique_lock<std::mutex> lock(mu_);
    ready_cv_.wait(lock, [&] { return ready_.count(k) != 0; });
    auto it = ready_.find(k);
    slot = std::move(it->second);
    ready_.erase(it);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    next_out_ = k + 1;  // read by workers under mu_ (the prefetch window)
  }
  work_cv_.notify_all();
  if (slot.error) {
    failed_ = true;
    stop_workers();
    rethrow_with_context(slot.error, slot.context);
  }
  consumed_position_ = plan_end_position_[static_cast<size_t>(k)];
  return std::move(slot.batch);
}

}  // namespace ada::data
