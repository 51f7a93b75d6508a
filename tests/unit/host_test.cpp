// lib/base/host: the name this host goes by.
#include "flowrun/host.h"

#include <catch2/catch.hpp>
#include <climits>
#include <unistd.h>

using namespace flowrun;

TEST_CASE("host_name: FLOWRUN_HOSTNAME when it is set and not empty, else the kernel's name",
          "[base][host]") {
  char name[HOST_NAME_MAX + 1] = {};
  REQUIRE(gethostname(name, sizeof name - 1) == 0);
  const std::string kernel = name[0] != '\0' ? name : "localhost";
  CHECK(kernel_host_name() == kernel);
  CHECK(host_name({}) == kernel);
  CHECK(host_name({{"FLOWRUN_HOSTNAME", ""}}) == kernel);
  CHECK(host_name({{"FLOWRUN_HOSTNAME", "node-7"}}) == "node-7");
  CHECK(host_name({{"HOSTNAME", "other"}}) == kernel);
}
