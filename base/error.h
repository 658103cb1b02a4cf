// Error types of Adatrain and the checks that raise them.
// Library code throws; only main() aborts (MPI_Abort) so that no rank hangs. Every message says
// where (file/key/line, op, call, file:line, rank) and, where it can, what to do.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace ada {

// Base of every error Adatrain raises on purpose.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};
class ShapeError : public Error {
  using Error::Error;
};  // operands of the wrong shape
class DTypeError : public Error {
  using Error::Error;
};  // operands of the wrong dtype
class DeviceError : public Error {
  using Error::Error;
};  // wrong device / backend not built
class ConfigError : public Error {
  using Error::Error;
};  // bad or unknown configuration
class IoError : public Error {
  using Error::Error;
};  // unreadable, corrupt or truncated file
class CommError : public Error {
  using Error::Error;
};  // a communication library failed
class ExternalError : public Error {
  using Error::Error;
};  // CUDA/cuDNN/cuBLAS status
class InternalError : public Error {
  using Error::Error;
};  // a broken invariant: a bug

// Rank of this process as known to the error/log layer (set once the communicator exists;
// -1 before). Used to prefix messages with "rank r".
int process_rank();
int process_world();
void set_process_rank(int rank, int world);

namespace detail {
// Collects a message with operator<< and throws E on destruction of the temporary.
template <class E>
class Thrower {
 public:
  Thrower(const char* file, int line, const char* what) {
    if (what) os_ << what;
    file_ = file;
    line_ = line;
  }
  template <class T>
  Thrower& operator<<(const T& v) {
    os_ << v;
    return *this;
  }
  [[noreturn]] ~Thrower() noexcept(false) {
    if (file_) os_ << " [" << file_ << ":" << line_ << "]";
    throw E(os_.str());
  }

 private:
  std::ostringstream os_;
  const char* file_ = nullptr;
  int line_ = 0;
};
// Strip the directory part of __FILE__ so messages stay short.
constexpr const char* base_name(const char* path) {
  const char* b = path;
  for (const char* p = path; *p; ++p)
    if (*p == '/') b = p + 1;
  return b;
}
// Formats "CALL failed: DECODED (code N) at file:line on rank r".
std::string status_message(const char* lib, const char* call, long code, const std::string& decoded,
                           const char* file, int line);
}  // namespace detail

}  // namespace ada

// ADA_THROW(ShapeError) << "..."; always throws. ADA_CHECK(cond) << "..."; throws InternalError.
// ADA_CHECK_ARG(cond, ErrorType) << "..."; throws the given user-facing error type.
#define ADA_THROW(E) ::ada::detail::Thrower<::ada::E>(nullptr, 0, nullptr)
#define ADA_CHECK(cond)                                                                        \
  if (cond) {                                                                                  \
  } else                                                                                       \
    ::ada::detail::Thrower<::ada::InternalError>(::ada::detail::base_name(__FILE__), __LINE__, \
                                                 "internal check failed: " #cond ": ")
#define ADA_CHECK_ARG(cond, E) \
  if (cond) {                  \
  } else                       \
    ::ada::detail::Thrower<::ada::E>(nullptr, 0, nullptr)

// Checks an external library status. SUCCESS is the library's success value; DECODE(code) turns
// a status into text. Throws E with the call, the decoded status, file:line and the rank.
#define ADA_CHECK_STATUS(E, LIB, call, SUCCESS, DECODE)                                            \
  do {                                                                                             \
    auto ada_status_ = (call);                                                                     \
    if (ada_status_ != (SUCCESS))                                                                  \
      throw ::ada::E(::ada::detail::status_message(LIB, #call, static_cast<long>(ada_status_),     \
                                                   DECODE(ada_status_),                            \
                                                   ::ada::detail::base_name(__FILE__), __LINE__)); \
  } while (0)
