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
#include <chrono>
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
  // A task run on this thread whenever nothing is queued, every `period` (e.g. polling for
  // messages that other ranks wait on while this process computes: WAGMA's passive
  // participation). It runs like an op (an error in it fails the thread). An empty task removes
  // it; when set_idle_task returns, the previous task is not running and will not run again.
  void set_idle_task(std::function<void()> task,
                     std::chrono::microseconds period = std::chrono::microseconds(500));

 private:
  CommThread() = default;
  void start_locked();
  void loop();
  void record_failure_locked(std::exception_ptr error);  // first failure: fail what is queued

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::function<void()>, WorkHandle>> queue_;
  bool busy_ = false;  // an op is running (on the worker or inline on a caller)
  bool stop_ = false;
  std::exception_ptr failed_;                 // the first operation's error; nothing runs after it
  std::exception_ptr stopped_error_locked();  // the error later operations fail with
  std::function<void()> idle_task_;
  std::chrono::microseconds idle_period_{500};
  std::thread worker_;
  std::atomic<std::thread::id> worker_id_{};
};

}  // namespace ada::comm
