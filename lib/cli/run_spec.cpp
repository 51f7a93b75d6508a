// From a Request to the one-step spec flowrun run runs and flowrun init
// writes: the step's name, what every worker runs (which Python, -m, a
// program), its parallel: shape from --nproc-per-node and --nnodes, and the
// cluster: part of several nodes. one_step.cpp writes the step's text.
//
// Pure: what it needs to know of the host (GPUs, CPU cores, programs on
// PATH, whether node 0's endpoint is here) comes in a RunHost, so that
// run_spec_test.cpp checks the text of every command line on made-up hosts.
#include <algorithm>
#include <cctype>
#include <fmt/format.h>

#include "flowrun/error.h"
#include "flowrun/path.h"
#include "flowrun/spec.h"

#include "one_step.h"
#include "run_detail.h"

namespace flowrun::run_detail {

std::string slug(std::string text) {
  for (char& c : text) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    if (!ok) c = '-';
  }
  while (!text.empty() && !std::isalnum(static_cast<unsigned char>(text.front()))) text.erase(0, 1);
  if (text.empty()) text = "train";
  if (text.size() > 40) text.resize(40);
  return text;
}

std::string step_name(const Request& r) {
  std::string word = r.command.front();
  if (r.module) {
    if (auto dot = word.rfind('.'); dot != std::string::npos) word = word.substr(dot + 1);
  } else {
    word = std::string(base_name(word));
    if (auto dot = word.rfind('.'); dot != std::string::npos && dot > 0) word.resize(dot);
  }
  // A run id may hold a dot; a step's name may not (docs/spec.md: letters,
  // digits, '_' and '-'): "model.v2.py" is step "model-v2".
  std::string name = slug(word);
  std::replace(name.begin(), name.end(), '.', '-');
  return name;
}

namespace {

// --python, else torchrun's PYTHON_EXEC (not with --run-path: torchrun then
// runs the script in its own interpreter), else what PATH has.
std::string python_for(const Request& r, const RunHost& host) {
  if (!r.python.empty()) return r.python;
  if (auto exec = env_get(host.env, "PYTHON_EXEC"); exec && !exec->empty() && !r.run_path) return *exec;
  if (host.on_path("python3")) return "python3";
  if (host.on_path("python")) return "python";
  throw Error("no python3 or python on PATH: activate the environment that has torch, or give --python PATH",
              kExitUsage);
}

std::vector<std::string> worker_argv(const Request& r, const RunHost& host, std::vector<std::string>& notes) {
  std::vector<std::string> argv;
  if (!r.no_python) {
    argv.push_back(python_for(r, host));
    if (r.module) argv.emplace_back("-m");
  }
  argv.insert(argv.end(), r.command.begin(), r.command.end());
  // A program named without a directory is looked up on PATH, where torchrun
  // would not find one in the working directory either; flowrun runs that one.
  std::string& program = argv.front();
  if (r.no_python && program.find('/') == std::string::npos && !host.on_path(program) &&
      host.in_workdir(program)) {
    notes.push_back(program + " is not on PATH: running ./" + program + " from the working directory");
    program = "./" + program;
  }
  return argv;
}

Shape shape_for(const Request& r, const RunHost& host, const std::string& command) {
  Shape s;
  if (!r.nnodes.empty()) {
    std::string text = r.nnodes;
    if (auto colon = text.find(':'); colon != std::string::npos) {
      // torchrun's elastic MIN:MAX: the step's nodes: "MIN:MAX" (docs/recovery.md).
      const int lo = parse_int(command, "nnodes", text.substr(0, colon), 1, 65535);
      text = text.substr(colon + 1);
      s.nodes = parse_int(command, "nnodes", text, 1, 65535);
      if (lo > s.nodes)
        usage_error(command,
                    fmt::format("--nnodes {}: the minimum is above the maximum; write --nnodes {}:{}",
                                r.nnodes, s.nodes, lo));
      if (lo < s.nodes) s.min_nodes = lo;
    } else {
      s.nodes = parse_int(command, "nnodes", text, 1, 65535);
    }
  }
  if (r.standalone && s.nodes > 1)
    usage_error(command,
                "--standalone runs on one node; leave it out for --nnodes " + std::to_string(s.nodes));
  const Inventory& inventory = host.facts.inventory;
  const int gpus = static_cast<int>(inventory.gpus.size());
  const std::string nodes_text = std::to_string(s.nodes);
  auto cpus = [&](int per_node, const std::string& why) {
    s.parallel.emplace_back("cpus", std::to_string(per_node * s.nodes));
    s.why = why;
  };
  const std::string nproc = r.nproc;
  if (r.cpus > 0) {
    s.parallel.emplace_back("cpus", std::to_string(r.cpus));
    s.why = "--cpus " + std::to_string(r.cpus);
  } else if (nproc.empty()) {
    if (gpus > 0) {
      s.why = "one worker per GPU (the default)";
    } else {
      cpus(1, "this host has no GPUs, so 1 CPU worker per node (torchrun's default)");
    }
  } else if (nproc == "gpu" || nproc == "auto") {
    if (gpus > 0) {
      s.why = "--nproc-per-node " + nproc + ": one worker per GPU";
    } else if (nproc == "auto") {
      cpus(host.cpus, "--nproc-per-node auto on a host without GPUs: one worker per CPU core");
    } else {
      usage_error(command, "--nproc-per-node gpu: this host has no GPUs (" +
                               (inventory.unavailable_reason.empty() ? std::string("none found")
                                                                     : inventory.unavailable_reason) +
                               "); use --nproc-per-node cpu or a number for CPU workers");
    }
  } else if (nproc == "cpu") {
    cpus(host.cpus, "--nproc-per-node cpu: one worker per CPU core");
  } else {
    const int n = parse_int(command, "nproc-per-node", nproc, 1, 4096);
    if (gpus == 0) {
      cpus(n, "--nproc-per-node " + nproc + " on a host without GPUs: CPU workers");
    } else if (n == gpus) {
      s.why = "--nproc-per-node " + nproc + ": one worker per GPU";
    } else if (n < gpus && gpus % n == 0) {
      s.parallel.emplace_back("procs_per_node", std::to_string(n));
      s.why = fmt::format(
          "--nproc-per-node {}: {} GPUs per worker, every worker sees the node's {} (as torchrun)", n,
          gpus / n, gpus);
    } else if (n < gpus) {
      s.parallel.emplace_back("gpus", std::to_string(n * s.nodes));
      s.why =
          fmt::format("--nproc-per-node {}: the first {} of the node's {} GPUs, one per worker", n, n, gpus);
    } else {
      usage_error(command,
                  fmt::format("--nproc-per-node {}: this host has {} GPUs; ask for at most {}, or use "
                              "--cpus {} for CPU workers",
                              n, gpus, gpus, n * s.nodes));
    }
  }
  if (s.nodes > 1)
    s.parallel.emplace_back("nodes",
                            s.min_nodes > 0 ? fmt::format("\"{}:{}\"", s.min_nodes, s.nodes) : nodes_text);
  if (r.max_restarts) s.parallel.emplace_back("max_restarts", std::to_string(*r.max_restarts));
  if (r.no_node_checks) s.parallel.emplace_back("node_checks", "false");
  return s;
}

std::string yaml_string(const std::string& text) { return yaml_quoted(text); }

}  // namespace

Built build_spec(const Request& r, const RunHost& host, const std::string& command, bool for_init) {
  Built b;
  b.shape = shape_for(r, host, command);
  if (!for_init) b.meeting = meeting_for(r, b.shape, host, command, b.notes);
  // torchrun's --role and --rdzv-id reach the workers as ROLE_NAME and
  // TORCHELASTIC_RUN_ID; with --standalone torchrun makes up a run id
  // whatever --rdzv-id says, and flowrun's is that.
  if (!r.role.empty()) b.shape.parallel.emplace_back("role", yaml_string(r.role));
  if (!r.rdzv_id.empty() && r.standalone &&
      std::find(r.from_env.begin(), r.from_env.end(), "rdzv-id") == r.from_env.end())
    b.notes.push_back(
        "--rdzv-id is passed over with --standalone, as torchrun does: TORCHELASTIC_RUN_ID is the run id");
  if (!r.rdzv_id.empty() && !r.standalone) b.shape.parallel.emplace_back("job_id", yaml_string(r.rdzv_id));
  OneStepSpec one;
  one.name = step_name(r);
  one.argv = worker_argv(r, host, b.notes);
  one.timeout = r.timeout;
  one.stall_timeout = r.stall_timeout;
  one.why = b.shape.why;
  one.parallel = b.shape.parallel;
  one.collect_all = !for_init;
  std::string& t = b.text;
  t = one_step_spec_text(one);
  if (b.shape.nodes > 1) {
    t += "cluster:\n";
    if (for_init) {
      t += "  engine: slurm   # or ssh (with hosts:), or manual\n";
    } else {
      t += std::string("  engine: ") + (b.meeting.kind == Meeting::Kind::slurm ? "slurm" : "manual") + "\n";
      if (!r.local_addr.empty()) t += "  address: " + yaml_string(r.local_addr) + "\n";
    }
    std::size_t start = 0;
    while (start < r.rdzv_conf.size()) {
      std::size_t end = r.rdzv_conf.find(',', start);
      if (end == std::string::npos) end = r.rdzv_conf.size();
      const std::string item = r.rdzv_conf.substr(start, end - start);
      if (item.rfind("join_timeout=", 0) == 0)
        t += "  join_timeout: " + yaml_string(item.substr(13)) + "\n";
      else if (item.rfind("last_call_timeout=", 0) == 0)
        t += "  last_call_timeout: " + yaml_string(item.substr(18)) + "\n";
      else if (!item.empty())
        b.notes.push_back(
            "--rdzv-conf " + item +
            " has no effect (only join_timeout=SECONDS and last_call_timeout=SECONDS are used)");
      start = end + 1;
    }
  }
  return b;
}

}  // namespace flowrun::run_detail
