// flowrun::Error's errno: filled by the file operations that a failed
// system call stops (lib/base/files.cpp), so a caller tells a full disk by
// the number.
#include "flowrun/error.h"

#include <catch2/catch.hpp>
#include <cerrno>
#include <fstream>
#include <string>

#include "flowrun/files.h"

#include "testing.h"

using namespace flowrun;

namespace {

// The errno of the Error `operation` throws; -1 when it throws none.
template <class F>
int err_of(F&& operation) {
  try {
    operation();
  } catch (const Error& e) {
    return e.err();
  }
  return -1;
}

}  // namespace

TEST_CASE("an Error carries the errno it is given, 0 when none", "[base][error]") {
  CHECK(Error("no errno").err() == 0);
  CHECK(Error("full", kExitFailure, ENOSPC).err() == ENOSPC);
  CHECK(Error("full", kExitFailure, ENOSPC).exit_code() == kExitFailure);
}

TEST_CASE("an Error from a file operation carries the errno that caused it", "[base][error]") {
  const testing::ScopedTempDir tmp("error-test");
  const std::string dir = tmp.path();
  std::ofstream(dir + "/file") << "x";
  CHECK(err_of([&] { make_dirs(dir + "/file/sub"); }) == ENOTDIR);
  CHECK(err_of([&] { make_dirs(dir + "/file"); }) == ENOTDIR);
  CHECK(err_of([&] { read_file(dir + "/missing", 10); }) == ENOENT);
  CHECK(err_of([&] { read_file(dir, 10); }) == 0);  // not a regular file: no errno to give
  CHECK(err_of([&] { write_file(dir + "/missing/x", "x"); }) == ENOENT);
  CHECK(err_of([&] { write_file(dir + "/file", "x"); }) == -1);
}
