// flowrun run's and flowrun init's one-step spec (lib/cli/run_spec.cpp):
// torchrun command lines, read as flowrun run reads them, on made-up hosts
// (GPUs, cores, what PATH and the working directory have, which names are
// this host, the variables), to the exact spec text and notes; how the nodes
// meet; and the command lines refused, with their messages. build_spec reads
// nothing of the machine, so no file, process or socket is involved.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <map>
#include <set>

#include "flowrun/error.h"
#include "flowrun/gpu.h"
#include "flowrun/spec.h"

#include "run_detail.h"

using namespace flowrun;
using namespace flowrun::run_detail;

namespace {

constexpr const char* kNoDriver = "libnvidia-ml.so.1 not found: no NVIDIA driver on this host";
// Why a step without --nproc-per-node on a host without GPUs has one worker.
constexpr const char* kOneCpu = "this host has no GPUs, so 1 CPU worker per node (torchrun's default)";

// A made-up host: its GPUs (none: kNoDriver says why), its cores, the
// programs PATH and the working directory have, the names that are this
// host, and the variables flowrun starts with (PET_ ones included).
struct FakeHost {
  int gpus = 0;
  int cpus = 6;
  std::set<std::string> path = {"python3", "python"};
  std::set<std::string> workdir = {};
  std::set<std::string> here = {"localhost"};
  EnvMap env = {};
};

RunHost run_host(const FakeHost& fake) {
  RunHost host;
  SystemGpus system = fake_system_gpus(fake.gpus);
  if (fake.gpus == 0) {
    system.source = "none";
    system.unavailable_reason = kNoDriver;
  }
  host.facts = HostFacts{"host-a", select_gpus(system, {}), {}, {}, {}};
  host.cpus = fake.cpus;
  host.env = fake.env;
  host.on_path = [path = fake.path](const std::string& name) { return path.count(name) > 0; };
  host.in_workdir = [workdir = fake.workdir](const std::string& name) { return workdir.count(name) > 0; };
  host.is_this_host = [here = fake.here](const std::string& name) { return here.count(name) > 0; };
  return host;
}

// parse_request reads the PET_ variables of torchrun's options from this
// process's environment: while it lives, those the host sets and no other.
class PetVariables {
 public:
  explicit PetVariables(const EnvMap& env) {
    for (const OptionDef& def : kOptions) {
      if (def.own != Own::torchrun) continue;
      const std::string name = pet_name(def);
      if (const char* value = std::getenv(name.c_str())) saved_.emplace(name, value);
      if (auto it = env.find(name); it != env.end())
        setenv(name.c_str(), it->second.c_str(), 1);
      else
        unsetenv(name.c_str());
    }
  }
  ~PetVariables() {
    for (const OptionDef& def : kOptions) {
      if (def.own != Own::torchrun) continue;
      const std::string name = pet_name(def);
      if (auto it = saved_.find(name); it != saved_.end())
        setenv(name.c_str(), it->second.c_str(), 1);
      else
        unsetenv(name.c_str());
    }
  }
  PetVariables(const PetVariables&) = delete;
  PetVariables& operator=(const PetVariables&) = delete;

 private:
  std::map<std::string, std::string> saved_;
};

// The command line as cmd_torchrun and cmd_init get it: the command ("run"
// or "init"), then torchrun's words.
Request parse(std::vector<std::string> argv, const FakeHost& host) {
  PetVariables pet(host.env);
  std::vector<char*> pointers;
  for (auto& word : argv) pointers.push_back(word.data());
  auto request = parse_request(static_cast<int>(pointers.size()), pointers.data(), argv.front());
  REQUIRE(request);
  return *request;
}

Built build(const std::vector<std::string>& argv, const FakeHost& host) {
  const Request request = parse(argv, host);
  return build_spec(request, run_host(host), argv.front(), argv.front() == "init");
}

std::string words(const std::vector<std::string>& argv) {
  std::string line;
  for (const auto& word : argv) line += (line.empty() ? "" : " ") + shell_quote(word);
  return line;
}

// One command line and the spec it makes: the text, byte for byte, and the
// notes said on stderr.
struct SpecRow {
  const char* what;
  std::vector<std::string> argv;
  FakeHost host;
  std::string text;
  std::vector<std::string> notes = {};
};

// The text of a one-step spec whose step is named `name` and runs `run`,
// with the `why` comment and the lines under parallel: (none: `{}`).
std::string step_text(const std::string& comment, const std::string& name, const std::string& run,
                      const std::string& why, const std::string& parallel, bool collect = true) {
  return "# flowrun run: " + comment + "\nname: \"" + name + "\"\nsteps:\n  - name: \"" + name +
         "\"\n    run: [" + run + "]\n    # " + why +
         "\n    parallel:" + (parallel.empty() ? " {}\n" : "\n") + parallel +
         (collect ? "    collect: all\n" : "");
}

}  // namespace

TEST_CASE("build_spec: a torchrun command line on a host gives one spec text", "[run_spec]") {
  const FakeHost cpu_host;
  const FakeHost gpu8{.gpus = 8};
  const std::string train = R"("python3", "train.py")";
  const SpecRow row = GENERATE_COPY(values<SpecRow>({
      {"a count that divides the GPUs: each worker sees the node's GPUs, as torchrun",
       {"run", "--nproc-per-node", "4", "train.py", "--lr", "1"},
       gpu8,
       step_text("python3 train.py --lr 1", "train", R"("python3", "train.py", "--lr", "1")",
                 "--nproc-per-node 4: 2 GPUs per worker, every worker sees the node's 8 (as torchrun)",
                 "      procs_per_node: 4\n")},
      {"as many workers as GPUs",
       {"run", "--nproc_per_node=4", "train.py"},
       {.gpus = 4},
       step_text("python3 train.py", "train", train, "--nproc-per-node 4: one worker per GPU", "")},
      {"a count that does not divide the GPUs: the first N",
       {"run", "--nproc-per-node", "3", "train.py"},
       gpu8,
       step_text("python3 train.py", "train", train,
                 "--nproc-per-node 3: the first 3 of the node's 8 GPUs, one per worker", "      gpus: 3\n")},
      {"a count without GPUs: CPU workers",
       {"run", "--nproc-per-node", "4", "train.py"},
       cpu_host,
       step_text("python3 train.py", "train", train, "--nproc-per-node 4 on a host without GPUs: CPU workers",
                 "      cpus: 4\n")},
      {"no count with GPUs: one worker per GPU",
       {"run", "train.py"},
       gpu8,
       step_text("python3 train.py", "train", train, "one worker per GPU (the default)", "")},
      {"no count without GPUs: one CPU worker",
       {"run", "train.py"},
       cpu_host,
       step_text("python3 train.py", "train", train, kOneCpu, "      cpus: 1\n")},
      {"gpu with GPUs",
       {"run", "--nproc-per-node", "gpu", "train.py"},
       gpu8,
       step_text("python3 train.py", "train", train, "--nproc-per-node gpu: one worker per GPU", "")},
      {"auto with GPUs",
       {"run", "--nproc-per-node", "auto", "train.py"},
       gpu8,
       step_text("python3 train.py", "train", train, "--nproc-per-node auto: one worker per GPU", "")},
      {"auto without GPUs: one worker per core",
       {"run", "--nproc-per-node", "auto", "train.py"},
       cpu_host,
       step_text("python3 train.py", "train", train,
                 "--nproc-per-node auto on a host without GPUs: one worker per CPU core", "      cpus: 6\n")},
      {"cpu: one worker per core, GPUs or not",
       {"run", "--nproc-per-node", "cpu", "train.py"},
       {.gpus = 2, .cpus = 3},
       step_text("python3 train.py", "train", train, "--nproc-per-node cpu: one worker per CPU core",
                 "      cpus: 3\n")},
      {"--cpus over the GPUs",
       {"run", "--cpus", "3", "--nproc-per-node", "8", "train.py"},
       gpu8,
       step_text("python3 train.py", "train", train, "--cpus 3", "      cpus: 3\n")},
      {"--standalone, --max-restarts, --role",
       {"run", "--standalone", "--max-restarts", "3", "--role", "trainer", "--nproc-per-node", "2",
        "train.py"},
       {.gpus = 2},
       step_text("python3 train.py", "train", train, "--nproc-per-node 2: one worker per GPU",
                 "      max_restarts: 3\n      role: \"trainer\"\n")},
      {"--no-node-checks is the step's node_checks: false",
       {"run", "--no-node-checks", "train.py"},
       cpu_host,
       step_text("python3 train.py", "train", train, kOneCpu, "      cpus: 1\n      node_checks: false\n")},
      {"--rdzv-id is the step's job_id",
       {"run", "--rdzv-id", "job 7", "train.py"},
       cpu_host,
       step_text("python3 train.py", "train", train, kOneCpu, "      cpus: 1\n      job_id: \"job 7\"\n")},
      {"--rdzv-id is passed over with --standalone, said",
       {"run", "--standalone", "--rdzv-id", "j", "train.py"},
       cpu_host,
       step_text("python3 train.py", "train", train, kOneCpu, "      cpus: 1\n"),
       {"--rdzv-id is passed over with --standalone, as torchrun does: TORCHELASTIC_RUN_ID is the run id"}},
      {"PET_RDZV_ID is passed over with --standalone, unsaid",
       {"run", "--standalone", "train.py"},
       {.env = {{"PET_RDZV_ID", "j"}}},
       step_text("python3 train.py", "train", train, kOneCpu, "      cpus: 1\n")},
      {"PET_NPROC_PER_NODE as --nproc-per-node",
       {"run", "train.py"},
       {.env = {{"PET_NPROC_PER_NODE", "2"}}},
       step_text("python3 train.py", "train", train, "--nproc-per-node 2 on a host without GPUs: CPU workers",
                 "      cpus: 2\n")},
      {"--timeout and --stall-timeout",
       {"run", "--timeout", "1h", "--stall-timeout", "10m", "train.py"},
       cpu_host,
       "# flowrun run: python3 train.py\nname: \"train\"\nsteps:\n  - name: \"train\"\n"
       "    run: [\"python3\", \"train.py\"]\n    timeout: \"1h\"\n    stall_timeout: \"10m\"\n"
       "    # this host has no GPUs, so 1 CPU worker per node (torchrun's default)\n"
       "    parallel:\n      cpus: 1\n    collect: all\n"},
      {"an endpoint with one node is not used, said",
       {"run", "--rdzv-endpoint", "node0:29400", "train.py"},
       cpu_host,
       step_text("python3 train.py", "train", train, kOneCpu, "      cpus: 1\n"),
       {"one node: its workers meet on this host (MASTER_ADDR=127.0.0.1, a free port); node0:29400 is used "
        "only with --nnodes above 1"}},
      {"two nodes meeting at node 0's endpoint: engine manual",
       {"run", "--nnodes", "2", "--nproc-per-node", "8", "--rdzv-endpoint", "node0:29400", "--node-rank", "1",
        "train.py"},
       gpu8,
       step_text("python3 train.py", "train", train, "--nproc-per-node 8: one worker per GPU",
                 "      nodes: 2\n") +
           "cluster:\n  engine: manual\n"},
      {"two nodes in a Slurm allocation: engine slurm",
       {"run", "--nnodes", "2", "--nproc-per-node", "2", "train.py"},
       {.env = {{"SLURM_JOB_ID", "7"}}},
       step_text("python3 train.py", "train", train, "--nproc-per-node 2 on a host without GPUs: CPU workers",
                 "      cpus: 4\n      nodes: 2\n") +
           "cluster:\n  engine: slurm\n"},
      {"elastic nodes, the local address, the rendezvous' timeouts; the rest of --rdzv-conf said",
       {"run", "--nnodes", "1:4", "--rdzv-endpoint", "node0", "--node-rank", "0", "--local-addr", "10.0.0.1",
        "--rdzv-conf", "join_timeout=30,timeout=9,last_call_timeout=5", "train.py"},
       gpu8,
       step_text("python3 train.py", "train", train, "one worker per GPU (the default)",
                 "      nodes: \"1:4\"\n") +
           "cluster:\n  engine: manual\n  address: \"10.0.0.1\"\n  join_timeout: \"30\"\n"
           "  last_call_timeout: \"5\"\n",
       {"--rdzv-conf timeout=9 has no effect (only join_timeout=SECONDS and last_call_timeout=SECONDS are "
        "used)"}},
      {"-m: the module's last name",
       {"run", "-m", "pkg.train_lm", "--lr", "1"},
       cpu_host,
       step_text("python3 -m pkg.train_lm --lr 1", "train_lm",
                 R"("python3", "-m", "pkg.train_lm", "--lr", "1")", kOneCpu, "      cpus: 1\n")},
      {"--no-python: the program as given",
       {"run", "--no-python", "./bin/run.sh", "a"},
       cpu_host,
       step_text("./bin/run.sh a", "run", R"("./bin/run.sh", "a")", kOneCpu, "      cpus: 1\n")},
      {"--: a program on PATH",
       {"run", "--", "hostname", "-f"},
       {.path = {"hostname"}, .workdir = {"hostname"}},
       step_text("hostname -f", "hostname", R"("hostname", "-f")", kOneCpu, "      cpus: 1\n")},
      {"--no-python: a program only in the working directory runs as ./, said",
       {"run", "--no-python", "tool"},
       {.workdir = {"tool"}},
       step_text("./tool", "tool", R"("./tool")", kOneCpu, "      cpus: 1\n"),
       {"tool is not on PATH: running ./tool from the working directory"}},
      {"--no-python: a program nowhere is left for the worker to report",
       {"run", "--no-python", "tool"},
       cpu_host,
       step_text("tool", "tool", R"("tool")", kOneCpu, "      cpus: 1\n")},
      {"--run-path: Python whatever -m says, and not PYTHON_EXEC",
       {"run", "--run-path", "-m", "train.py"},
       {.env = {{"PYTHON_EXEC", "/opt/py/bin/python"}}},
       step_text("python3 train.py", "train", train, kOneCpu, "      cpus: 1\n")},
      {"PYTHON_EXEC",
       {"run", "train.py"},
       {.env = {{"PYTHON_EXEC", "/opt/py/bin/python"}}},
       step_text("/opt/py/bin/python train.py", "train", R"("/opt/py/bin/python", "train.py")", kOneCpu,
                 "      cpus: 1\n")},
      {"--python over PYTHON_EXEC",
       {"run", "--python", "venv/bin/python", "train.py"},
       {.env = {{"PYTHON_EXEC", "/opt/py/bin/python"}}},
       step_text("venv/bin/python train.py", "train", R"("venv/bin/python", "train.py")", kOneCpu,
                 "      cpus: 1\n")},
      {"python when PATH has no python3",
       {"run", "train.py"},
       {.path = {"python"}},
       step_text("python train.py", "train", R"("python", "train.py")", kOneCpu, "      cpus: 1\n")},
      {"a script's odd name, and arguments YAML or a template would read",
       {"run", "runs/my train!.py", "lr=${args.lr}", "null", "a\nb: c"},
       cpu_host,
       step_text("python3 'runs/my train!.py' 'lr=${args.lr}' null 'a\\nb: c'", "my-train-",
                 R"("python3", "runs/my train!.py", "lr=$${args.lr}", "null", "a\nb: c")", kOneCpu,
                 "      cpus: 1\n")},
      {"a script's name with dots before .py: the step's name has none",
       {"run", "runs/my model.v2.py"},
       cpu_host,
       step_text("python3 'runs/my model.v2.py'", "my-model-v2", R"("python3", "runs/my model.v2.py")",
                 kOneCpu, "      cpus: 1\n")},
      {"a name begins with a letter or a digit, and is at most 40 long",
       {"run", "_.-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.py"},
       cpu_host,
       step_text("python3 _.-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.py",
                 "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                 R"("python3", "_.-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.py")", kOneCpu,
                 "      cpus: 1\n")},
      {"a name of no letter or digit is train",
       {"run", "--no-python", "./+++"},
       cpu_host,
       step_text("./+++", "train", R"("./+++")", kOneCpu, "      cpus: 1\n")},
      {"init: nothing is collected, and the engine is left to choose",
       {"init", "--nnodes", "2", "--nproc-per-node", "2", "--rdzv-endpoint", "node0:1", "train.py"},
       gpu8,
       step_text("python3 train.py", "train", train,
                 "--nproc-per-node 2: 4 GPUs per worker, every worker sees the node's 8 (as torchrun)",
                 "      procs_per_node: 2\n      nodes: 2\n", false) +
           "cluster:\n  engine: slurm   # or ssh (with hosts:), or manual\n"},
  }));
  INFO(row.what << "\n" << words(row.argv));
  const Built built = build(row.argv, row.host);
  CHECK(built.text == row.text);
  CHECK(built.notes == row.notes);
  // The text is a spec that flowrun reads.
  SpecParse parsed = parse_spec(built.text, "flowrun run", "/w");
  INFO(built.text);
  CHECK(parsed.diagnostics.empty());
}

namespace {

// How a command line's nodes meet, before any port is bound.
struct MeetingRow {
  const char* what;
  std::vector<std::string> argv;
  FakeHost host;
  Meeting::Kind kind;
  std::string endpoint;
  int node_rank;
  bool claim;
};

}  // namespace

TEST_CASE("meeting_for: how the nodes meet, from the command line and the host's answers", "[run_spec]") {
  using Kind = Meeting::Kind;
  const std::vector<std::string> two = {"run", "--nnodes", "2", "--nproc-per-node", "1"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> argv = two;
    argv.insert(argv.end(), more.begin(), more.end());
    argv.emplace_back("train.py");
    return argv;
  };
  const MeetingRow row = GENERATE_COPY(values<MeetingRow>({
      {"one node", {"run", "--rdzv-endpoint", "node0:1", "train.py"}, {}, Kind::one_node, "", 0, false},
      {"a Slurm allocation", with({}), {.env = {{"SLURM_JOB_ID", "7"}}}, Kind::slurm, "", 0, false},
      {"the endpoint over Slurm",
       with({"--rdzv-endpoint", "node0:1", "--node-rank", "0"}),
       {.env = {{"SLURM_JOB_ID", "7"}}},
       Kind::head,
       "node0:1",
       0,
       false},
      {"node rank 0 is the head",
       with({"--rdzv-endpoint", "node0:29400", "--node-rank", "0"}),
       {},
       Kind::head,
       "node0:29400",
       0,
       false},
      {"node rank 1 joins it",
       with({"--rdzv-endpoint", "node0:29400", "--node-rank", "1"}),
       {},
       Kind::agent,
       "node0:29400",
       1,
       false},
      {"SLURM_NODEID as the node rank",
       with({"--rdzv-endpoint", "node0:29400"}),
       {.env = {{"SLURM_NODEID", "1"}}},
       Kind::agent,
       "node0:29400",
       1,
       false},
      {"no rank, another host's endpoint: the next free rank",
       with({"--rdzv-endpoint", "node0:29400"}),
       {},
       Kind::agent,
       "node0:29400",
       -1,
       false},
      {"no rank, this host's endpoint: whoever binds the port first",
       with({"--rdzv-endpoint", "node0:29400"}),
       {.here = {"node0"}},
       Kind::head,
       "node0:29400",
       0,
       true},
      {"--dry-run binds no port",
       with({"--dry-run", "--rdzv-endpoint", "node0:29400"}),
       {.here = {"node0"}},
       Kind::head,
       "node0:29400",
       0,
       false},
      {"an IPv6 --local-addr binds no port",
       with({"--rdzv-endpoint", "node0:29400", "--local-addr", "::1"}),
       {.here = {"node0"}},
       Kind::head,
       "node0:29400",
       0,
       false},
      {"an IPv4 --local-addr does",
       with({"--rdzv-endpoint", "node0:29400", "--local-addr", "127.0.0.1"}),
       {.here = {"node0"}},
       Kind::head,
       "node0:29400",
       0,
       true},
      {"--master-addr and --master-port",
       with({"--master-addr", "node0", "--master-port", "1234"}),
       {},
       Kind::agent,
       "node0:1234",
       -1,
       false},
      {"an endpoint without a port: torchrun's",
       with({"--rdzv-endpoint", "node0", "--node-rank", "0"}),
       {},
       Kind::head,
       "node0:29500",
       0,
       false},
      {"an IPv6 endpoint",
       with({"--rdzv-endpoint", "[::1]:29400"}),
       {.here = {"[::1]"}},
       Kind::head,
       "[::1]:29400",
       0,
       true},
  }));
  INFO(row.what << "\n" << words(row.argv));
  const Built built = build(row.argv, row.host);
  CHECK(built.meeting.kind == row.kind);
  CHECK(built.meeting.endpoint == row.endpoint);
  CHECK(built.meeting.node_rank == row.node_rank);
  CHECK(built.meeting.claim == row.claim);
  CHECK(built.meeting.listen_fd == -1);
}

TEST_CASE("meeting_for asks whether the endpoint is this host only without a node rank", "[run_spec]") {
  const FakeHost fake;
  RunHost host = run_host(fake);
  std::vector<std::string> asked;
  host.is_this_host = [&](const std::string& name) {
    asked.push_back(name);
    return false;
  };
  auto meet = [&](std::vector<std::string> argv) {
    return build_spec(parse(std::move(argv), fake), host, "run", false).meeting;
  };
  CHECK(meet({"run", "--nnodes", "2", "--rdzv-endpoint", "node0:1", "--node-rank", "1", "train.py"}).kind ==
        Meeting::Kind::agent);
  CHECK(asked.empty());
  CHECK(meet({"run", "--nnodes", "2", "--rdzv-endpoint", "node0:1", "train.py"}).kind ==
        Meeting::Kind::agent);
  CHECK(asked == std::vector<std::string>{"node0"});
}

namespace {

// A command line build_spec refuses, and what it says (without the
// "flowrun: error: " that main adds).
struct RunRefusal {
  const char* what;
  std::vector<std::string> argv;
  FakeHost host;
  std::string message;
};

const std::string kRunHelp = "\nRun 'flowrun run --help' for usage.";

}  // namespace

TEST_CASE("build_spec: the command lines it refuses, and what each says", "[run_spec]") {
  const RunRefusal row = GENERATE_COPY(values<RunRefusal>({
      {"gpu without GPUs",
       {"run", "--nproc-per-node", "gpu", "train.py"},
       {},
       "--nproc-per-node gpu: this host has no GPUs (" + std::string(kNoDriver) +
           "); use --nproc-per-node cpu or a number for CPU workers" + kRunHelp},
      {"more workers than GPUs",
       {"run", "--nproc-per-node", "16", "--nnodes", "2", "train.py"},
       {.gpus = 8},
       "--nproc-per-node 16: this host has 8 GPUs; ask for at most 8, or use --cpus 32 for CPU workers" +
           kRunHelp},
      {"a count that is not one",
       {"run", "--nproc-per-node", "four", "train.py"},
       {},
       "--nproc-per-node four: expected a whole number from 1 to 4096" + kRunHelp},
      {"nodes that are not a count",
       {"run", "--nnodes", "0", "train.py"},
       {},
       "--nnodes 0: expected a whole number from 1 to 65535" + kRunHelp},
      {"an elastic range upside down",
       {"run", "--nnodes", "4:2", "train.py"},
       {},
       "--nnodes 4:2: the minimum is above the maximum; write --nnodes 2:4" + kRunHelp},
      {"--standalone with nodes",
       {"run", "--standalone", "--nnodes", "2", "train.py"},
       {},
       "--standalone runs on one node; leave it out for --nnodes 2" + kRunHelp},
      {"nodes with no way to reach them",
       {"run", "--nnodes", "2", "train.py"},
       {},
       "--nnodes 2 needs a way to reach the other nodes: run inside a Slurm allocation (salloc -N2, sbatch), "
       "where flowrun starts them with srun; or run this command on every node with --rdzv-endpoint "
       "NODE0:PORT and --node-rank N; or write a spec with cluster: (docs/multinode.md)" +
           kRunHelp},
      {"a node rank past the nodes",
       {"run", "--nnodes", "2", "--rdzv-endpoint", "node0:1", "--node-rank", "2", "train.py"},
       {},
       "--node-rank 2: --nnodes 2 has node ranks 0 to 1" + kRunHelp},
      {"an endpoint's port that is not one",
       {"run", "--nnodes", "2", "--rdzv-endpoint", "node0:http", "train.py"},
       {},
       "--rdzv-endpoint port http: expected a whole number from 1 to 65535" + kRunHelp},
      {"no Python on PATH",
       {"run", "train.py"},
       {.path = {}},
       "no python3 or python on PATH: activate the environment that has torch, or give --python PATH"},
      {"init says its own command",
       {"init", "--nproc-per-node", "9", "train.py"},
       {.gpus = 8},
       "--nproc-per-node 9: this host has 8 GPUs; ask for at most 8, or use --cpus 9 for CPU workers\n"
       "Run 'flowrun init --help' for usage."},
  }));
  INFO(row.what << "\n" << words(row.argv));
  const Request request = parse(row.argv, row.host);
  try {
    build_spec(request, run_host(row.host), row.argv.front(), row.argv.front() == "init");
    FAIL("not refused");
  } catch (const Error& e) {
    CHECK(std::string(e.what()) == row.message);
    CHECK(e.exit_code() == kExitUsage);
  }
}
