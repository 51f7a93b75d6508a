// lib/base/path: a path's last component and its directory, from the text.
#include "flowrun/path.h"

#include <catch2/catch.hpp>

using namespace flowrun;

TEST_CASE("base_name is what follows the last slash", "[base][path]") {
  CHECK(base_name("a/b/c.py") == "c.py");
  CHECK(base_name("c.py") == "c.py");
  CHECK(base_name("/c") == "c");
  CHECK(base_name("a/") == "");
  CHECK(base_name("") == "");
}

TEST_CASE("dir_name is what precedes the last slash; the root stays the root", "[base][path]") {
  CHECK(dir_name("a/b/c.py") == "a/b");
  CHECK(dir_name("/run/x") == "/run");
  CHECK(dir_name("/x") == "/");
  CHECK(dir_name("x") == "");
  CHECK(dir_name("a/") == "a");
  CHECK(dir_name(dir_name("/r/train/rank0/stderr.log")) == "/r/train");
}
