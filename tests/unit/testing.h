// Helpers shared by the unit tests (as ninja's src/test.h): the one scratch
// directory, file reader and writer every suite uses, rather than its own. The
// unit tests compile as one file (tests/CMakeLists.txt): a helper two suites
// both need is here, not written out in each under one name.
#pragma once

#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdlib.h>
#include <string>
#include <string_view>
#include <sys/stat.h>
#include <system_error>

#include "flowrun/clock.h"
#include "flowrun/doctor.h"
#include "flowrun/messages.h"
#include "flowrun/protocol.h"
#include "flowrun/result.h"
#include "flowrun/util.h"

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

// Nanoseconds, as flowrun's clocks count them.
inline constexpr std::int64_t kSecond = 1'000'000'000;
inline constexpr std::int64_t kMs = 1'000'000;

// The file at `path`, or "" when it cannot be opened (a file not written yet).
inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// `text` into the file at `path`, replacing it; its directories made first.
inline void write_text(const std::string& path, const std::string& text) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  std::ofstream out(path, std::ios::binary);
  INFO("writing " << path);
  REQUIRE(out.is_open());
  out << text;
}

// Whether `path` names anything, a dangling symbolic link too.
inline bool exists(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0;
}

// `env` with `name` set to `value`, and without `name`.
inline EnvMap with(EnvMap env, const std::string& name, const std::string& value) {
  env[name] = value;
  return env;
}
inline EnvMap without(EnvMap env, const std::string& name) {
  env.erase(name);
  return env;
}

// A worker's exit with `code`, and its end by `signal`.
inline ExitStatus exited(int code) { return {ExitStatus::Kind::exited, code, ""}; }
inline ExitStatus killed(int signal) { return {ExitStatus::Kind::signaled, signal, ""}; }

// An agent's message that rank `rank` exited with `code`.
inline Exited exited(int rank, int code) {
  Exited m;
  m.rank = rank;
  m.code = code;
  m.start_ns = unix_now_ns();
  m.end_ns = m.start_ns;
  return m;
}

// CRC-32C of `data` in hex, as a ship's end carries it.
inline std::string crc32c_of(std::string_view data) {
  Crc32c crc;
  crc.update(data);
  return crc.hex();
}

// tests/fixtures/gpu/NAME.json: a host's `flowrun doctor` facts.
inline DoctorFacts load_doctor_facts(const std::string& name) {
  return parse_doctor_facts(
      read_file(std::string(FLOWRUN_SOURCE_DIR) + "/tests/fixtures/gpu/" + name + ".json"), name + ".json");
}

// The check of `report` named `name`; null when it has none.
inline const DoctorCheck* find_check(const DoctorReport& report, const std::string& name) {
  for (const DoctorCheck& check : report.checks) {
    if (check.name == name) return &check;
  }
  return nullptr;
}

}  // namespace flowrun::testing
