// POSIX implementation of core/fileio.h: temporary file + fsync + rename + directory fsync, and
// plain whole-file reads and single-write appends.
#include "core/fileio.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <new>
#include <stdexcept>

#include "core/error.h"

namespace seqgrad {
namespace {

[[noreturn]] void throw_errno(std::string_view what, const std::string& path, int err) {
  throw IOError(fmt::format("{} '{}': {}", what, path, std::strerror(err)));
}

// Closes the descriptor when the scope ends, for paths that throw before an explicit close.
class FdGuard {
 public:
  explicit FdGuard(int fd) : fd_(fd) {}
  ~FdGuard() {
    if (fd_ >= 0) ::close(fd_);
  }
  FdGuard(const FdGuard&) = delete;
  FdGuard& operator=(const FdGuard&) = delete;
  // Closes now and reports close(2)'s result: on some filesystems a failed write surfaces only here.
  int close_now() {
    int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

// Writes all of `bytes`, retrying short writes and EINTR. Returns false with errno set on error.
bool write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

// Creates a fresh file beside `path` and returns its descriptor. The name holds the pid and a
// per-process counter; O_EXCL turns a collision (a leftover of a crashed run) into a retry.
int create_temp_beside(const std::string& path, std::string& temp_path) {
  static std::atomic<unsigned> counter{0};
  const std::filesystem::path target(path);
  constexpr int kMaxAttempts = 100;
  for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
    std::string name = fmt::format(".{}.tmp.{}.{}", target.filename().string(), ::getpid(),
                                   counter.fetch_add(1));
    temp_path = (target.parent_path() / name).string();
    int fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) return fd;
    if (errno != EEXIST) break;
  }
  throw_errno("write_file_atomic: cannot create a temporary file beside", path, errno);
}

// Removes the temporary file after a failed step and throws with the step's errno.
[[noreturn]] void abandon_temp(const std::string& temp_path, std::string_view step,
                               const std::string& path) {
  int err = errno;
  ::unlink(temp_path.c_str());
  throw_errno(fmt::format("write_file_atomic: cannot {} (temporary file '{}') for", step, temp_path),
              path, err);
}

// Makes the rename itself durable: the new directory entry is on disk once this returns.
void sync_directory_of(const std::string& path) {
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw_errno("write_file_atomic: cannot open the directory of", path, errno);
  FdGuard guard(fd);
  // EINVAL means this filesystem cannot sync directories; the rename is as durable as it gets.
  if (::fsync(fd) != 0 && errno != EINVAL)
    throw_errno("write_file_atomic: cannot fsync the directory of", path, errno);
}

}  // namespace

void write_file_atomic(const std::string& path, std::string_view bytes) {
  std::string temp_path;
  int fd = create_temp_beside(path, temp_path);
  {
    FdGuard guard(fd);
    if (!write_all(fd, bytes)) abandon_temp(temp_path, "write", path);
    if (::fsync(fd) != 0) abandon_temp(temp_path, "fsync", path);
    if (guard.close_now() != 0) abandon_temp(temp_path, "close", path);
  }
  if (::rename(temp_path.c_str(), path.c_str()) != 0) abandon_temp(temp_path, "rename onto", path);
  sync_directory_of(path);
}

namespace {

// The rest of an open descriptor's file. Reading a device such as /dev/zero runs until memory is
// exhausted: that is an IOError naming the file, not a bare std::bad_alloc.
std::string read_rest(int fd, const struct stat& info, const std::string& path) {
  std::string contents;
  try {
    if (S_ISREG(info.st_mode)) contents.reserve(static_cast<std::size_t>(info.st_size));
    char chunk[1 << 16];
    for (;;) {
      ssize_t n = ::read(fd, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw_errno("read_file: cannot read", path, errno);
      if (n == 0) return contents;
      contents.append(chunk, static_cast<std::size_t>(n));
    }
  } catch (const std::bad_alloc&) {
    throw IOError(fmt::format("read_file: '{}' does not fit in memory ({} bytes read)", path, contents.size()));
  } catch (const std::length_error&) {
    throw IOError(fmt::format("read_file: '{}' does not fit in memory ({} bytes read)", path, contents.size()));
  }
}

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

std::string read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_errno("read_file: cannot open", path, errno);
  FdGuard guard(fd);
  struct stat info {};
  if (::fstat(fd, &info) != 0) throw_errno("read_file: cannot stat", path, errno);
  if (S_ISDIR(info.st_mode)) throw_errno("read_file: cannot read", path, EISDIR);
  return read_rest(fd, info, path);
}

std::string read_regular_file(const std::string& path) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, forever.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw_errno("read_file: cannot open", path, errno);
  FdGuard guard(fd);
  struct stat info {};
  if (::fstat(fd, &info) != 0) throw_errno("read_file: cannot stat", path, errno);
  if (!S_ISREG(info.st_mode))
    throw IOError(fmt::format("read_file: '{}' is {}, expected a regular file", path, file_kind(info.st_mode)));
  return read_rest(fd, info, path);
}

void check_regular_file(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) throw_errno("cannot stat", path, errno);
  if (!S_ISREG(info.st_mode))
    throw IOError(fmt::format("'{}' is {}, expected a regular file", path, file_kind(info.st_mode)));
}

void append_line(const std::string& path, std::string_view line) {
  SG_CHECK_VALUE(line.find('\n') == std::string_view::npos,
                 "append_line: a record for '{}' contains a newline; JSON-lines records are one "
                 "line each",
                 path);
  std::string record;
  record.reserve(line.size() + 1);
  record.append(line).push_back('\n');
  int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) throw_errno("append_line: cannot open", path, errno);
  FdGuard guard(fd);
  // One write(2): O_APPEND makes it a single append, and there is no user-space buffer to flush.
  ssize_t n;
  do {
    n = ::write(fd, record.data(), record.size());
  } while (n < 0 && errno == EINTR);
  if (n < 0) throw_errno("append_line: cannot write to", path, errno);
  SG_CHECK_IO(static_cast<std::size_t>(n) == record.size(),
              "append_line: short write to '{}': {} of {} bytes (disk full?)", path, n,
              record.size());
  if (guard.close_now() != 0) throw_errno("append_line: cannot close", path, errno);
}

}  // namespace seqgrad
