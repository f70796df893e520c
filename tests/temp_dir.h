// Temporary files for the test suites: every path lies in a directory of its own, named by the
// process id (two test runs at once never share a file) and removed with its contents when it
// goes out of scope, so a run leaves nothing behind in /tmp.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <iterator>
#include <string>
#include <system_error>

namespace seqgrad::testing {

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           ("seqgrad_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ignored;  // a test may have made the directory read-only
    std::filesystem::permissions(path, std::filesystem::perms::owner_all, std::filesystem::perm_options::add, ignored);
    std::filesystem::remove_all(path, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string file(const std::string& name) const { return (path / name).string(); }
  std::size_t entry_count() const {
    return static_cast<std::size_t>(std::distance(std::filesystem::directory_iterator(path), {}));
  }
};

// A path in the suite's own directory, which is removed when the test program exits.
inline std::string temp_path(const std::string& name) {
  static const TempDir suite_dir;
  return suite_dir.file(name);
}

}  // namespace seqgrad::testing
