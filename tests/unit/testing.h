// Helpers shared by the unit tests (as ninja's src/test.h): the one scratch
// directory and the one file reader every suite uses, rather than its own.
#pragma once

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdlib.h>
#include <string>
#include <system_error>

namespace flowrun::testing {

// A fresh directory (mkdtemp, mode 0700) under `base`, removed with all it
// holds when the object goes. `prefix` names the test in the directory's name.
class ScopedTempDir {
 public:
  explicit ScopedTempDir(const std::string& prefix = "test", const std::string& base = "/tmp") {
    std::string pattern = base + "/flowrun-" + prefix + "-XXXXXX";
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~ScopedTempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Every byte of the file at `path`. A file that cannot be opened fails the
// test there, naming it, rather than reading as "".
inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  INFO("reading " << path);
  REQUIRE(in.is_open());
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace flowrun::testing
