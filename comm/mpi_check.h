// Checked MPI calls: ADA_MPI_CHECK(MPI_Allreduce(...)) throws CommError naming the call, the
// decoded MPI error, file:line and the rank. Communicators install MPI_ERRORS_RETURN so that
// failures reach this check instead of aborting inside MPI. The call is watched for hangs while
// it runs (watchdog.h).
#pragma once

#include <mpi.h>

#include <string>

#include "base/error.h"
#include "comm/watchdog.h"

namespace ada::comm {
inline std::string mpi_error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return "unknown MPI error";
  return std::string(buf, static_cast<size_t>(len));
}
}  // namespace ada::comm

#define ADA_MPI_CHECK(call)                                                               \
  do {                                                                                    \
    const ::ada::comm::WatchedCall ada_watched_(#call, __FILE__, __LINE__);               \
    ADA_CHECK_STATUS(CommError, "MPI", call, MPI_SUCCESS, ::ada::comm::mpi_error_string); \
  } while (0)
