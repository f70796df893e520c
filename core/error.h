// Errors: every user mistake throws a seqgrad::Error subclass whose message names the op, what was
// expected and what was given (shapes, dtypes, values). Checks are always on; nothing aborts.
#pragma once
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace seqgrad {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct ShapeError : Error {
  using Error::Error;
};
struct DTypeError : Error {
  using Error::Error;
};
struct DeviceError : Error {
  using Error::Error;
};
struct IndexError : Error {
  using Error::Error;
};
struct ValueError : Error {
  using Error::Error;
};
struct IOError : Error {
  using Error::Error;
};

}  // namespace seqgrad

// SG_CHECK(cond, "op: what was expected, got {}", value) throws seqgrad::Error when cond is false.
#define SG_CHECK_AS(ErrorType, cond, ...)                              \
  do {                                                                 \
    if (!(cond)) [[unlikely]]                                          \
      throw ::seqgrad::ErrorType(::fmt::format(__VA_ARGS__));          \
  } while (0)
#define SG_CHECK(cond, ...) SG_CHECK_AS(Error, cond, __VA_ARGS__)
#define SG_CHECK_SHAPE(cond, ...) SG_CHECK_AS(ShapeError, cond, __VA_ARGS__)
#define SG_CHECK_DTYPE(cond, ...) SG_CHECK_AS(DTypeError, cond, __VA_ARGS__)
#define SG_CHECK_DEVICE(cond, ...) SG_CHECK_AS(DeviceError, cond, __VA_ARGS__)
#define SG_CHECK_INDEX(cond, ...) SG_CHECK_AS(IndexError, cond, __VA_ARGS__)
#define SG_CHECK_VALUE(cond, ...) SG_CHECK_AS(ValueError, cond, __VA_ARGS__)
#define SG_CHECK_IO(cond, ...) SG_CHECK_AS(IOError, cond, __VA_ARGS__)

// Internal invariants (a bug in seqgrad, not in the caller's program); compiled out in release.
#include <cassert>
#define SG_ASSERT(cond) assert(cond)
