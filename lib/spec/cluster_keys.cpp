// The top-level cluster: (spec_detail.h): the engine, the nodes (hosts, or a
// hostfile, read by load_spec once the spec is clean) and each engine's
// settings, each refused with an engine it does not belong to.

#include <filesystem>
#include <map>

#include "spec_detail.h"

namespace flowrun::spec_detail {

void Checker::cluster(const Entry& e) {
  ClusterSpec& c = spec_.cluster.emplace();
  c.loc = c.hosts_loc = e.key_loc;
  if (!e.value.IsMap() && !e.value.IsNull()) {
    expected(e, "a mapping with the cluster's 'engine'");
    return;
  }
  auto keys = e.value.IsMap() ? entries(e.value, e.loc, e.path, kClusterKeys, kClusterElsewhere)
                              : std::vector<Entry>{};
  std::optional<Engine> engine;
  if (const Entry* g = find(keys, "engine")) {
    static constexpr std::string_view kNames[] = {"slurm", "ssh", "manual", "gang"};
    static constexpr Engine kValues[] = {Engine::slurm, Engine::ssh, Engine::manual, Engine::gang};
    engine = choice<Engine>(*g, kNames, kValues);
    c.engine = engine.value_or(Engine::slurm);
  } else {
    error(e.key_loc, e.path, "missing required key 'engine' ('slurm', 'ssh', 'manual' or 'gang')");
  }
  const Entry* hosts = find(keys, "hosts");
  if (hosts) {
    c.hosts_loc = hosts->loc;
    if (!hosts->value.IsSequence()) {
      expected(*hosts, "a list of host names");
    } else if (hosts->value.size() == 0 && engine == Engine::ssh) {
      expected(*hosts, "a non-empty list of host names for engine 'ssh'");
    } else {
      std::map<std::string, Location> seen;
      for (const YAML::Node& item : items(hosts->value)) {
        Location loc = to_location(item.Mark());
        if (loc.line == 0) loc = hosts->loc;
        if (!item.IsScalar() || !is_host_name(item.Scalar())) {
          error(loc, hosts->path, expected_text("a host name (no spaces, not starting with '-')", item));
        } else if (!seen.emplace(item.Scalar(), loc).second) {
          error(loc, hosts->path,
                "host " + quote(item.Scalar()) + " is listed twice; expected each node once");
        } else {
          c.hosts.push_back(item.Scalar());
        }
      }
    }
  }
  if (const Entry* f = find(keys, "hostfile")) {
    if (engine && engine != Engine::ssh) {
      error(f->key_loc, f->path, "hostfile is only used with engine 'ssh'; remove it or set engine: ssh");
    } else if (hosts) {
      error(f->key_loc, f->path, "hosts and hostfile cannot both be set; list the nodes in one of them");
    } else if (auto path = string(*f, "a file path (a string)")) {
      if (path->empty() || path->find('\0') != std::string::npos || path->find('\n') != std::string::npos) {
        expected(*f, "a file path");
      } else {
        c.hostfile = (std::filesystem::path(dir_) / *path).lexically_normal().string();
        c.hosts_loc = f->loc;
      }
    }
  } else if (!hosts && engine == Engine::ssh) {
    error(e.key_loc, e.path,
          "missing required key 'hosts' or 'hostfile' for engine 'ssh' (the nodes, in node-rank order)");
  }
  if (const Entry* g = find(keys, "gpus_per_node")) {
    if (auto value = count(*g, "a positive whole number", "", false)) c.gpus_per_node = *value;
  }
  if (const Entry* s = find(keys, "ssh_command")) {
    if (engine && engine != Engine::ssh) {
      error(s->key_loc, s->path, "ssh_command is only used with engine 'ssh'; remove it or set engine: ssh");
    } else if (auto argv = words(*s, "a command (a string or a list of words)", false)) {
      c.ssh_command = std::move(*argv);
    }
  }
  if (const Entry* s = find(keys, "srun_args")) {
    if (engine && engine != Engine::slurm) {
      error(s->key_loc, s->path,
            "srun_args is only used with engine 'slurm'; remove it or set engine: slurm");
    } else if (auto args = words(*s, "srun arguments (a string or a list of words)", true)) {
      c.srun_args = std::move(*args);
    }
  }
  if (const Entry* a = find(keys, "address")) {
    // Handed to bind() and to every agent's command line: one word, not an option.
    if (a->value.IsScalar() && is_host_name(a->value.Scalar()))
      c.address = a->value.Scalar();
    else
      expected(*a, "an address (an IP address or a host name, no spaces)");
  }
  if (const Entry* t = find(keys, "heartbeat_timeout"))
    c.heartbeat_timeout_s = duration(*t).value_or(c.heartbeat_timeout_s);
  if (const Entry* t = find(keys, "join_timeout")) c.join_timeout_s = duration(*t).value_or(c.join_timeout_s);
  if (const Entry* t = find(keys, "last_call_timeout"))
    c.last_call_timeout_s = duration(*t).value_or(c.last_call_timeout_s);
  if (const Entry* w = find(keys, "shared_workdir")) {
    static constexpr std::string_view kNames[] = {"auto", "true", "false"};
    static constexpr SharedWorkdir kValues[] = {SharedWorkdir::detect, SharedWorkdir::yes, SharedWorkdir::no};
    c.shared_workdir = choice<SharedWorkdir>(*w, kNames, kValues).value_or(SharedWorkdir::detect);
  }
}

}  // namespace flowrun::spec_detail
