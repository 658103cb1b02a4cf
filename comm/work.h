// Work: the handle of an operation queued on the communication thread. wait() blocks until it
// has finished and rethrows its exception, if any, on the waiting thread.
#pragma once

#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>

namespace ada::comm {

class Work {
 public:
  void wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_; });
    if (error_) std::rethrow_exception(error_);
  }
  bool done() const {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }
  void finish(std::exception_ptr error = nullptr) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = error;
      done_ = true;
    }
    cv_.notify_all();
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};
using WorkHandle = std::shared_ptr<Work>;

}  // namespace ada::comm
