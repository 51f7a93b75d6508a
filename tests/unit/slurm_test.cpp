// Slurm's environment on tables of real and broken values. Host list
// expansions were checked against Slurm's hostlist.c rules (the order of
// several bracket groups included); errors reach the user, so they are
// compared whole.
#include "flowrun/slurm.h"

#include <algorithm>
#include <catch2/catch.hpp>

#include "flowrun/files.h"

#include "testing.h"

using namespace flowrun;

namespace {

using Hosts = std::vector<std::string>;

std::string hostlist_error(std::string_view list) {
  std::string error;
  auto hosts = expand_hostlist(list, &error);
  CHECK_FALSE(hosts.has_value());
  return error;
}

std::string counts_error(std::string_view list) {
  std::string error;
  auto counts = expand_counts(list, &error);
  CHECK_FALSE(counts.has_value());
  return error;
}

std::string job_error(const EnvMap& env) {
  std::string error;
  auto job = read_slurm_job(env, &error);
  CHECK_FALSE(job.has_value());
  return error;
}

const EnvMap kJobEnv = {
    {"SLURM_JOB_ID", "4242"},          {"SLURM_JOB_NODELIST", "gpu-a[01-02],gpu-b7"},
    {"SLURM_JOB_NUM_NODES", "3"},      {"SLURM_JOB_CPUS_PER_NODE", "64(x2),32"},
    {"SLURM_GPUS_PER_NODE", "h100:4"},
};

using testing::with;
using testing::without;

}  // namespace

TEST_CASE("expand_hostlist expands Slurm's compressed host lists", "[slurm]") {
  struct Case {
    std::string list;
    Hosts hosts;
  };
  const std::vector<Case> cases = {
      {"node1", {"node1"}},
      {"node[1-3,7]", {"node1", "node2", "node3", "node7"}},
      {"gpu-a[01-03]", {"gpu-a01", "gpu-a02", "gpu-a03"}},
      {"n[8-10]", {"n8", "n9", "n10"}},
      {"n[098-100]", {"n098", "n099", "n100"}},
      {"n[007]", {"n007"}},
      {"n[1-010]", {"n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9", "n10"}},
      {"[1-2]", {"1", "2"}},
      {"node007", {"node007"}},
      {"a[1-2],b,c[5,7-8]", {"a1", "a2", "b", "c5", "c7", "c8"}},
      {"b,a,b", {"b", "a", "b"}},
      {"rack[1-2]-n[1-2]", {"rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"}},
      // Slurm's order for three groups: the middle one slowest, the last fastest.
      {"a[1-2]b[3-4]c[5-6]",
       {"a1b3c5", "a1b3c6", "a2b3c5", "a2b3c6", "a1b4c5", "a1b4c6", "a2b4c5", "a2b4c6"}},
      {"x[1,3]y[01-02]", {"x1y01", "x1y02", "x3y01", "x3y02"}},
  };
  for (const auto& c : cases) {
    INFO(c.list);
    std::string error = "untouched";
    auto hosts = expand_hostlist(c.list, &error);
    REQUIRE(hosts.has_value());
    CHECK(*hosts == c.hosts);
    CHECK(error == "untouched");
  }
  CHECK(expand_hostlist("node[1-2]", nullptr) == Hosts{"node1", "node2"});
}

TEST_CASE("expand_hostlist rejects malformed lists with the reason", "[slurm]") {
  struct Case {
    std::string list;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"", "host list is empty"},
      {"a,,b", "host list 'a,,b' has an empty entry"},
      {"a,", "host list 'a,' has an empty entry"},
      {",a", "host list ',a' has an empty entry"},
      {"node[1-", "host list entry 'node[1-': '[' without a closing ']'"},
      {"node[1-,b", "host list entry 'node[1-,b': '[' without a closing ']'"},
      {"[", "host list entry '[': '[' without a closing ']'"},
      {"node]", "host list entry 'node]': ']' without an opening '['"},
      {"n[1[2]]", "host list entry 'n[1[2]]': '[' inside brackets"},
      {"node[3-1]", "host list entry 'node[3-1]': range '3-1' goes down"},
      {"n[]", "host list entry 'n[]': empty range in '[]'"},
      {"n[1,]", "host list entry 'n[1,]': empty range in '[1,]'"},
      {"n[1-]", "host list entry 'n[1-]': '1-' in '[1-]' is not a number or a lo-hi range"},
      {"n[-3]", "host list entry 'n[-3]': '-3' in '[-3]' is not a number or a lo-hi range"},
      {"n[1--3]", "host list entry 'n[1--3]': '1--3' in '[1--3]' is not a number or a lo-hi range"},
      {"n[a-3]", "host list entry 'n[a-3]': 'a-3' in '[a-3]' is not a number or a lo-hi range"},
      {"n[ 1]", "host list entry 'n[ 1]': ' 1' in '[ 1]' is not a number or a lo-hi range"},
      {"a b", "host list entry 'a b': whitespace or a control character in a host name"},
      {"a\tb", "host list entry 'a\tb': whitespace or a control character in a host name"},
      {"n[1-2]-ib", "host list entry 'n[1-2]-ib': text '-ib' after the last ']'"},
      {"n[1234567890123456789]",
       "host list entry 'n[1234567890123456789]': '1234567890123456789' in '[1234567890123456789]' is not a "
       "number or a lo-hi range"},
  };
  for (const auto& c : cases) {
    INFO(c.list);
    CHECK(hostlist_error(c.list) == c.error);
  }
  CHECK_FALSE(expand_hostlist("n[", nullptr).has_value());
}

TEST_CASE("expand_hostlist stops at 65536 hosts instead of allocating", "[slurm]") {
  REQUIRE(kSlurmMaxListSize == 65536);
  auto full = expand_hostlist("n[1-65536]", nullptr);
  REQUIRE(full.has_value());
  CHECK(full->size() == 65536);
  CHECK(full->back() == "n65536");
  CHECK(expand_hostlist("a[1-256]b[1-256]", nullptr)->size() == 65536);
  CHECK(expand_hostlist("n[1-65535],x", nullptr)->size() == 65536);

  CHECK(hostlist_error("n[1-65537]") ==
        "host list entry 'n[1-65537]': '[1-65537]' has more than 65536 numbers");
  CHECK(hostlist_error("n[0-99999999999999999]") ==
        "host list entry 'n[0-99999999999999999]': '[0-99999999999999999]' has more than 65536 numbers");
  CHECK(hostlist_error("n[1-40000,1-40000]") ==
        "host list entry 'n[1-40000,1-40000]': '[1-40000,1-40000]' has more than 65536 numbers");
  CHECK(hostlist_error("a[1-256]b[1-257]") == "host list 'a[1-256]b[1-257]' has more than 65536 hosts");
  CHECK(hostlist_error("a[1-60000]b[1-60000]c[1-60000]") ==
        "host list 'a[1-60000]b[1-60000]c[1-60000]' has more than 65536 hosts");
  CHECK(hostlist_error("n[1-65536],x") == "host list 'n[1-65536],x' has more than 65536 hosts");
}

TEST_CASE("expand_counts expands SLURM_TASKS_PER_NODE and SLURM_JOB_CPUS_PER_NODE", "[slurm]") {
  CHECK(expand_counts("2(x3),1", nullptr) == std::vector<int>{2, 2, 2, 1});
  CHECK(expand_counts("4", nullptr) == std::vector<int>{4});
  CHECK(expand_counts("0", nullptr) == std::vector<int>{0});
  CHECK(expand_counts("72(x1)", nullptr) == std::vector<int>{72});
  CHECK(expand_counts("1,8(x2),16", nullptr) == std::vector<int>{1, 8, 8, 16});
  CHECK(expand_counts("2147483647", nullptr) == std::vector<int>{2147483647});
  CHECK(expand_counts("1(x65536)", nullptr)->size() == 65536);

  struct Case {
    std::string list;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"", "count list is empty"},
      {"2,,1", "count list '2,,1' has an empty entry"},
      {"2,", "count list '2,' has an empty entry"},
      {"2(x0)", "count list entry '2(x0)': a repeat count must be at least 1"},
      {"2(x)", "count list entry '2(x)': expected N or N(xR)"},
      {"2(3)", "count list entry '2(3)': expected N or N(xR)"},
      {"2(x3", "count list entry '2(x3': expected N or N(xR)"},
      {"(x3)", "count list entry '(x3)': expected N or N(xR)"},
      {"2(x3)1", "count list entry '2(x3)1': expected N or N(xR)"},
      {"-1", "count list entry '-1': expected N or N(xR)"},
      {" 2", "count list entry ' 2': expected N or N(xR)"},
      {"two", "count list entry 'two': expected N or N(xR)"},
      {"2147483648", "count list entry '2147483648': count too large"},
      {"1(x65537)", "count list '1(x65537)' has more than 65536 counts"},
      {"1(x65536),1", "count list '1(x65536),1' has more than 65536 counts"},
      {"1(x999999999999999999)", "count list '1(x999999999999999999)' has more than 65536 counts"},
  };
  for (const auto& c : cases) {
    INFO(c.list);
    CHECK(counts_error(c.list) == c.error);
  }
}

TEST_CASE("read_slurm_job reads the allocation", "[slurm]") {
  std::string error = "stale";
  auto job = read_slurm_job(kJobEnv, &error);
  REQUIRE(job.has_value());
  CHECK(error.empty());
  CHECK(job->job_id == "4242");
  CHECK(job->nodes == Hosts{"gpu-a01", "gpu-a02", "gpu-b7"});
  CHECK(job->num_nodes == 3);
  CHECK(job->cpus_per_node == std::vector<int>{64, 64, 32});
  CHECK(job->gpus_per_node == 4);

  SECTION("outside an allocation: nothing, and no error") {
    error = "stale";
    CHECK_FALSE(
        read_slurm_job({{"PATH", "/usr/bin"}, {"SLURM_CONF", "/etc/slurm.conf"}}, &error).has_value());
    CHECK(error.empty());
  }
  SECTION("the older names, and what may be missing") {
    EnvMap env = {{"SLURM_JOB_ID", "7"}, {"SLURM_NODELIST", "n[1-2]"}, {"SLURM_NNODES", "2"}};
    auto old = read_slurm_job(env, nullptr);
    REQUIRE(old.has_value());
    CHECK(old->nodes == Hosts{"n1", "n2"});
    CHECK(old->num_nodes == 2);
    CHECK(old->cpus_per_node.empty());
    CHECK_FALSE(old->gpus_per_node.has_value());
    auto no_count = read_slurm_job(without(env, "SLURM_NNODES"), nullptr);
    REQUIRE(no_count.has_value());
    CHECK(no_count->num_nodes == 2);
  }
  SECTION("the JOB_ names win over a step's SLURM_NODELIST and SLURM_NNODES") {
    auto step = read_slurm_job(with(with(kJobEnv, "SLURM_NODELIST", "gpu-b7"), "SLURM_NNODES", "1"), nullptr);
    REQUIRE(step.has_value());
    CHECK(step->nodes == Hosts{"gpu-a01", "gpu-a02", "gpu-b7"});
    CHECK(step->num_nodes == 3);
  }
  SECTION("SLURM_GPUS_PER_NODE forms") {
    CHECK(read_slurm_job(with(kJobEnv, "SLURM_GPUS_PER_NODE", "8"), nullptr)->gpus_per_node == 8);
    CHECK(read_slurm_job(with(kJobEnv, "SLURM_GPUS_PER_NODE", "gpu:a100:2"), nullptr)->gpus_per_node == 2);
    CHECK(read_slurm_job(with(kJobEnv, "SLURM_GPUS_PER_NODE", "a100:2,v100:1"), nullptr)->gpus_per_node == 3);
    CHECK_FALSE(read_slurm_job(without(kJobEnv, "SLURM_GPUS_PER_NODE"), nullptr)->gpus_per_node.has_value());
  }
}

TEST_CASE("read_slurm_job says which variables are wrong or contradict", "[slurm]") {
  struct Case {
    EnvMap env;
    std::string error;
  };
  const std::vector<Case> cases = {
      {with(kJobEnv, "SLURM_JOB_ID", ""), "SLURM_JOB_ID is set but empty"},
      {without(kJobEnv, "SLURM_JOB_NODELIST"), "SLURM_JOB_ID=4242 is set but SLURM_JOB_NODELIST is not"},
      {with(kJobEnv, "SLURM_JOB_NODELIST", "gpu[1-"),
       "SLURM_JOB_NODELIST: host list entry 'gpu[1-': '[' without a closing ']'"},
      {with(without(kJobEnv, "SLURM_JOB_NODELIST"), "SLURM_NODELIST", "a,,b"),
       "SLURM_NODELIST: host list 'a,,b' has an empty entry"},
      {with(kJobEnv, "SLURM_JOB_NUM_NODES", "2"),
       "SLURM_JOB_NUM_NODES=2 but SLURM_JOB_NODELIST 'gpu-a[01-02],gpu-b7' names 3 nodes"},
      {with(with(kJobEnv, "SLURM_JOB_NODELIST", "n1"), "SLURM_JOB_CPUS_PER_NODE", "8"),
       "SLURM_JOB_NUM_NODES=3 but SLURM_JOB_NODELIST 'n1' names 1 node"},
      {with(without(kJobEnv, "SLURM_JOB_NUM_NODES"), "SLURM_NNODES", "4"),
       "SLURM_NNODES=4 but SLURM_JOB_NODELIST 'gpu-a[01-02],gpu-b7' names 3 nodes"},
      {with(kJobEnv, "SLURM_JOB_NUM_NODES", "three"),
       "SLURM_JOB_NUM_NODES='three': expected a positive count"},
      {with(kJobEnv, "SLURM_JOB_NUM_NODES", "0"), "SLURM_JOB_NUM_NODES='0': expected a positive count"},
      {with(kJobEnv, "SLURM_JOB_CPUS_PER_NODE", "64(x3),32"),
       "SLURM_JOB_CPUS_PER_NODE '64(x3),32' gives 4 counts for 3 nodes"},
      {with(kJobEnv, "SLURM_JOB_CPUS_PER_NODE", "64"),
       "SLURM_JOB_CPUS_PER_NODE '64' gives 1 count for 3 nodes"},
      {with(kJobEnv, "SLURM_JOB_CPUS_PER_NODE", "64(x2),"),
       "SLURM_JOB_CPUS_PER_NODE: count list '64(x2),' has an empty entry"},
      {with(kJobEnv, "SLURM_GPUS_PER_NODE", "h100:"),
       "SLURM_GPUS_PER_NODE='h100:': expected [type:]count, such as 4 or h100:4"},
      {with(kJobEnv, "SLURM_GPUS_PER_NODE", ":4"),
       "SLURM_GPUS_PER_NODE=':4': expected [type:]count, such as 4 or h100:4"},
      {with(kJobEnv, "SLURM_GPUS_PER_NODE", ""),
       "SLURM_GPUS_PER_NODE='': expected [type:]count, such as 4 or h100:4"},
      {with(kJobEnv, "SLURM_GPUS_PER_NODE", "4,"),
       "SLURM_GPUS_PER_NODE='4,': expected [type:]count, such as 4 or h100:4"},
  };
  for (const auto& c : cases) {
    INFO(c.error);
    CHECK(job_error(c.env) == c.error);
  }
}

TEST_CASE("read_slurm_restart reads a requeued job's restart count", "[slurm]") {
  std::string error = "stale";
  auto first = read_slurm_restart(kJobEnv, &error);
  REQUIRE(first.has_value());
  CHECK(error.empty());
  CHECK(first->job_id == "4242");
  CHECK(first->restart_count == 0);
  auto again = read_slurm_restart(with(kJobEnv, "SLURM_RESTART_COUNT", "2"), &error);
  REQUIRE(again.has_value());
  CHECK(again->restart_count == 2);
  CHECK(read_slurm_restart(with(kJobEnv, "SLURM_RESTART_COUNT", "0"), nullptr)->restart_count == 0);
  // Only the job id matters: a job whose node list is wrong still has a restart count.
  CHECK(read_slurm_restart({{"SLURM_JOB_ID", "7"}, {"SLURM_RESTART_COUNT", "1"}}, nullptr)->job_id == "7");

  SECTION("outside a job: nothing, and no error (a stray SLURM_RESTART_COUNT too)") {
    error = "stale";
    CHECK_FALSE(read_slurm_restart({{"SLURM_RESTART_COUNT", "1"}}, &error).has_value());
    CHECK(error.empty());
  }
  SECTION("what is not a count is said") {
    for (const std::string bad : {"", "-1", "one", "1.0", " 1", "1000001"}) {
      INFO(bad);
      CHECK_FALSE(read_slurm_restart(with(kJobEnv, "SLURM_RESTART_COUNT", bad), &error).has_value());
      CHECK(error == "SLURM_RESTART_COUNT='" + bad + "': expected a count of restarts");
    }
    CHECK_FALSE(read_slurm_restart(with(kJobEnv, "SLURM_JOB_ID", ""), &error).has_value());
    CHECK(error == "SLURM_JOB_ID is set but empty");
  }
}

TEST_CASE("strip_step_variables removes the step's and the task's variables only", "[slurm]") {
  const std::vector<std::string> removed = {
      "SLURM_PROCID",           "SLURM_LOCALID",         "SLURM_NODEID",
      "SLURM_NTASKS",           "SLURM_NTASKS_PER_NODE", "SLURM_NTASKS_PER_GPU",
      "SLURM_NPROCS",           "SLURM_TASKS_PER_NODE",  "SLURM_DISTRIBUTION",
      "SLURM_STEP_ID",          "SLURM_STEP_NODELIST",   "SLURM_STEP_NUM_NODES",
      "SLURM_STEP_NUM_TASKS",   "SLURM_STEP_GPUS",       "SLURM_STEP_RESV_PORTS",
      "SLURM_STEPID",           "SLURM_TASK_PID",        "SLURM_GTIDS",
      "SLURM_CPU_BIND",         "SLURM_CPU_BIND_TYPE",   "SLURM_CPU_BIND_LIST",
      "SLURM_CPU_BIND_VERBOSE", "SLURM_MEM_BIND",        "SLURM_LAUNCH_NODE_IPADDR",
      "SLURM_SRUN_COMM_HOST",   "SLURM_SRUN_COMM_PORT",  "SLURM_UMASK",
      "SLURM_PRIO_PROCESS",
  };
  const std::vector<std::string> kept = {
      "SLURM_JOB_ID",
      "SLURM_JOB_NODELIST",
      "SLURM_JOB_NUM_NODES",
      "SLURM_JOB_CPUS_PER_NODE",
      "SLURM_JOB_PARTITION",
      "SLURM_JOB_NAME",
      "SLURM_CLUSTER_NAME",
      "SLURM_SUBMIT_DIR",
      "SLURM_SUBMIT_HOST",
      "SLURM_NODELIST",
      "SLURM_NNODES",
      "SLURM_CPUS_ON_NODE",
      "SLURM_GPUS_ON_NODE",
      "SLURM_GPUS_PER_NODE",
      "SLURMD_NODENAME",
      "SLURM_CONF",
      "SLURM_STEPS",
      "SLURM_PROCID_X_LIKE",
      "MY_SLURM_PROCID",
      "slurm_procid",
      "PATH",
      "RANK",
      "LOCAL_RANK",
      "MASTER_ADDR",
  };
  EnvMap env;
  for (const auto& name : removed) env[name] = "step";
  for (const auto& name : kept) env[name] = "job:" + name;

  EnvMap expected;
  for (const auto& name : kept) expected[name] = "job:" + name;
  CHECK(strip_step_variables(env) == expected);
  for (const auto& name : removed) CHECK(is_slurm_step_variable(name));
  for (const auto& name : kept) CHECK_FALSE(is_slurm_step_variable(name));
  CHECK(strip_step_variables({}).empty());
}

// docs/multinode.md names the variables a remote rank does not inherit, in
// backquotes (across its lines) between "minus Slurm's step-level variables:" and "(job-level";
// the code strips exactly those.
TEST_CASE("slurm_step_variables is the documented list", "[slurm]") {
  std::string doc = read_file(std::string(FLOWRUN_SOURCE_DIR) + "/docs/multinode.md", 1 << 20);
  std::replace(doc.begin(), doc.end(), '\n', ' ');
  for (auto at = doc.find("  "); at != std::string::npos; at = doc.find("  ")) doc.erase(at, 1);
  const auto begin = doc.find("minus Slurm's step-level variables:");
  REQUIRE(begin != std::string::npos);
  const auto end = doc.find("(job-level", begin);
  REQUIRE(end != std::string::npos);
  std::vector<std::string> documented;
  for (auto open = doc.find('`', begin); open < end; open = doc.find('`', open + 1)) {
    const auto close = doc.find('`', open + 1);
    REQUIRE(close < end);
    documented.push_back(doc.substr(open + 1, close - open - 1));
    open = close;
  }
  REQUIRE(documented.size() >= 10);
  for (const std::string& name : documented) {
    INFO(name);
    if (name.ends_with('*'))
      CHECK(is_slurm_step_variable(name.substr(0, name.size() - 1) + "X"));
    else
      CHECK(is_slurm_step_variable(name));
  }
  for (std::string_view pattern : slurm_step_variables()) {
    INFO(pattern);
    const bool listed = std::any_of(documented.begin(), documented.end(), [&](const std::string& name) {
      return name == pattern ||
             (pattern.ends_with('*') && name.starts_with(pattern.substr(0, pattern.size() - 1)));
    });
    CHECK(listed);
  }
  CHECK(is_slurm_step_variable("SLURM_TOPOLOGY_ADDR_PATTERN"));
  CHECK(is_slurm_step_variable("SLURM_CPUS_PER_TASK"));
  CHECK_FALSE(is_slurm_step_variable("SLURM_CPUS_ON_NODE"));
  CHECK_FALSE(is_slurm_step_variable("SLURM_JOB_ID"));
}
