// MPI start-up and shut-down for programs and MPI tests. Works under mpirun/mpiexec, under
// srun (PMIx/PMI2 through OpenMPI) and as a single process started without any launcher.
// Requests MPI_THREAD_SERIALIZED: at most one thread calls MPI at a time (the communication
// thread of later issues), and says so clearly if the library offers less.
#pragma once

namespace ada::comm {

class MpiRuntime {
 public:
  MpiRuntime(int* argc, char*** argv);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;
  int rank() const { return rank_; }
  int size() const { return size_; }
  // Aborts every rank (only main() should call this, after logging the error, which
  // ada::drain_output lets the launcher read first).
  [[noreturn]] static void abort(int code);

 private:
  int rank_ = 0, size_ = 1;
  bool owns_ = false;
};

}  // namespace ada::comm
