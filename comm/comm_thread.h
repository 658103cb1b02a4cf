// The communication thread: every MPI call of the process runs on it, one at a time, in the
// order submitted. That is the threading model: MPI_THREAD_SERIALIZED suffices, collectives
// keep one order on every rank, and a bucket's reduction overlaps the backward pass that runs on
// the caller's threads. A blocking call made while nothing is queued runs inline on the caller
// (no hand-off latency for small messages); otherwise it queues behind earlier work and waits.
// Fail-fast: after the first operation fails, the thread runs nothing more — queued work and
// every later submission fail at once with an error naming the first failure — so no rank goes
// on into a collective its peers will never join, and waits return instead of hanging. main()
// then aborts the job.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "comm/work.h"

namespace ada::comm {

class CommThread {
 public:
  static CommThread& instance();
  WorkHandle submit(std::function<void()> op);
  // Runs op after all queued work, on this thread if possible; rethrows its exception.
  void run(const std::function<void()>& op);
  bool on_comm_thread() const { return std::this_thread::get_id() == worker_id_.load(); }
  // Finishes queued work and joins the thread (before MPI_Finalize). Later submits restart it.
  void shutdown();
  ~CommThread();
  // The first failure, or null while every operation has succeeded. reset_failure() is for tests.
  std::exception_ptr failure();
  void reset_failure();

 private:
  CommThread() = default;
  void start_locked();
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::function<void()>, WorkHandle>> queue_;
  bool busy_ = false;  // an op is running (on the worker or inline on a caller)
  bool stop_ = false;
  std::exception_ptr failed_;  // the first operation's error; nothing runs after it
  std::exception_ptr stopped_error_locked();  // the error later operations fail with
  std::thread worker_;
  std::atomic<std::thread::id> worker_id_{};
};

}  // namespace ada::comm
