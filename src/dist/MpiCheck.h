#pragma once
// MPI call checks (see common/Check.h): the failure names the call, file:line, this rank,
// and MPI's own error string. MB_MPI_CHECK throws; MB_MPI_CHECK_ABORT is for destructors and
// watchdog threads.
#include <string>

#include <mpi.h>

#include "common/Check.h"

namespace mb::detail {

inline std::string mpiErrorText(int status) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(status, text, &length);
  return std::string(text, static_cast<std::size_t>(length));
}

}  // namespace mb::detail

#define MB_MPI_CHECK(expr)                                                                        \
  do {                                                                                            \
    int mbStatus_ = (expr);                                                                       \
    if (mbStatus_ != MPI_SUCCESS)                                                                 \
      ::mb::detail::throwCheckFailure(::mb::ExitCode::kFailure, "MPI", #expr, __FILE__, __LINE__, \
                                      ::mb::detail::mpiErrorText(mbStatus_));                     \
  } while (0)

#define MB_MPI_CHECK_ABORT(expr)                                              \
  do {                                                                        \
    int mbStatus_ = (expr);                                                   \
    if (mbStatus_ != MPI_SUCCESS)                                             \
      ::mb::detail::abortCheckFailure("MPI", #expr, __FILE__, __LINE__,       \
                                      ::mb::detail::mpiErrorText(mbStatus_)); \
  } while (0)
