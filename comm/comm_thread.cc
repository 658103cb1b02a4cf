#include "comm/comm_thread.h"

#include <string>

#include "base/error.h"
#include "core/parallel.h"

namespace ada::comm {

CommThread& CommThread::instance() {
  static CommThread t;
  return t;
}

CommThread::~CommThread() {
  shutdown();
}

std::exception_ptr CommThread::failure() {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_;
}

void CommThread::reset_failure() {
  std::lock_guard<std::mutex> lock(mu_);
  failed_ = nullptr;
}

std::exception_ptr CommThread::stopped_error_locked() {
  std::string first = "unknown error";
  try {
    std::rethrow_exception(failed_);
  } catch (const std::exception& e) {
    first = e.what();
  } catch (...) {
  }
  return std::make_exception_ptr(CommError("communication stopped on rank " +
                                           std::to_string(process_rank()) +
                                           " after an earlier operation failed: " + first));
}

void CommThread::start_locked() {
  if (worker_.joinable()) return;
  stop_ = false;
  worker_ = std::thread([this] { loop(); });
  worker_id_.store(worker_.get_id());
}

WorkHandle CommThread::submit(std::function<void()> op) {
  auto work = std::make_shared<Work>();
  const bool nested = on_comm_thread();  // from an op on the communication thread: run now
  {
    // One critical section for the check and the enqueue: a failure recorded between them
    // would leave this op queued behind it, and loop() would run it (a collective its peers,
    // still in the failed one, never join).
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_) {
      work->finish(stopped_error_locked());
      return work;
    }
    if (!nested) {
      start_locked();
      queue_.emplace_back(std::move(op), work);
    }
  }
  if (!nested) {
    cv_.notify_all();
    return work;
  }
  try {
    op();
    work->finish();
  } catch (...) {
    work->finish(std::current_exception());
  }
  return work;
}

void CommThread::run(const std::function<void()>& op) {
  if (on_comm_thread()) {
    op();
    return;
  }
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (failed_) std::rethrow_exception(stopped_error_locked());
    if (queue_.empty() && !busy_) {
      busy_ = true;
      lock.unlock();
      std::exception_ptr error;
      try {
        op();
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      busy_ = false;
      record_failure_locked(error);
      lock.unlock();
      cv_.notify_all();
      if (error) std::rethrow_exception(error);
      return;
    }
  }
  submit(op)->wait();
}

void CommThread::set_idle_task(std::function<void()> task, std::chrono::microseconds period) {
  if (on_comm_thread()) {  // from an op or from the idle task itself: nothing else runs now
    idle_task_ = std::move(task);
    idle_period_ = period;
    return;
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (task) start_locked();
  cv_.wait(lock, [&] { return !busy_; });  // the old task (or an op) is not running
  idle_task_ = std::move(task);
  idle_period_ = period;
  cv_.notify_all();
}

void CommThread::record_failure_locked(std::exception_ptr error) {
  if (!error || failed_) return;
  // Fail fast: nothing queued behind a failed operation runs.
  failed_ = error;
  const auto stopped = stopped_error_locked();
  for (auto& [queued_op, queued_work] : queue_) queued_work->finish(stopped);
  queue_.clear();
}

void CommThread::loop() {
  set_thread_serial(true);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    auto ready = [&] { return (!queue_.empty() && !busy_) || (stop_ && queue_.empty() && !busy_); };
    if (idle_task_ && !failed_) {
      if (!cv_.wait_for(lock, idle_period_, ready)) {
        if (busy_ || !idle_task_ || failed_) continue;
        busy_ = true;
        auto task = idle_task_;
        lock.unlock();
        std::exception_ptr error;
        try {
          task();
        } catch (...) {
          error = std::current_exception();
        }
        lock.lock();
        busy_ = false;
        record_failure_locked(error);
        cv_.notify_all();
        continue;
      }
    } else {
      cv_.wait(lock, [&] { return ready() || (idle_task_ && !failed_); });
      if (!ready()) continue;  // an idle task was set: wait with its period
    }
    if (queue_.empty()) return;  // stop requested and drained
    auto [op, work] = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    std::exception_ptr error;
    try {
      op();
    } catch (...) {
      error = std::current_exception();
    }
    work->finish(error);
    lock.lock();
    busy_ = false;
    record_failure_locked(error);
    cv_.notify_all();
  }
}

void CommThread::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!worker_.joinable()) return;
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
  std::lock_guard<std::mutex> lock(mu_);
  idle_task_ = nullptr;
  worker_ = std::thread();
  worker_id_.store(std::thread::id());
}

}  // namespace ada::comm
