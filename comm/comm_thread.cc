#include "comm/comm_thread.h"

#include "core/parallel.h"

namespace ada::comm {

CommThread& CommThread::instance() {
  static CommThread t;
  return t;
}

CommThread::~CommThread() { shutdown(); }

void CommThread::start_locked() {
  if (worker_.joinable()) return;
  stop_ = false;
  worker_ = std::thread([this] { loop(); });
  worker_id_.store(worker_.get_id());
}

WorkHandle CommThread::submit(std::function<void()> op) {
  auto work = std::make_shared<Work>();
  if (on_comm_thread()) {  // nested: run now, in order
    try {
      op();
      work->finish();
    } catch (...) {
      work->finish(std::current_exception());
    }
    return work;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    start_locked();
    queue_.emplace_back(std::move(op), work);
  }
  cv_.notify_all();
  return work;
}

void CommThread::run(const std::function<void()>& op) {
  if (on_comm_thread()) {
    op();
    return;
  }
  {
    std::unique_lock<std::mutex> lock(mu_);
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
      lock.unlock();
      cv_.notify_all();
      if (error) std::rethrow_exception(error);
      return;
    }
  }
  submit(op)->wait();
}

void CommThread::loop() {
  set_thread_serial(true);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return (!queue_.empty() && !busy_) || (stop_ && queue_.empty() && !busy_); });
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
  worker_ = std::thread();
  worker_id_.store(std::thread::id());
}

}  // namespace ada::comm
