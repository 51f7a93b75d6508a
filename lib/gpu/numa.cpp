// The NUMA node near a GPU, from sysfs, as torchrun's --numa-binding learns
// it (torch/numa/binding.py): the GPU's PCI device's numa_node, then that
// node's cpulist.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <iterator>
#include <map>
#include <sched.h>

#include "flowrun/error.h"
#include "flowrun/files.h"
#include "flowrun/gpu.h"

namespace flowrun {

namespace {

std::string trimmed(std::string text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  return text;
}

std::string read_sysfs(const std::string& path, const std::string& what) {
  int err = 0;
  auto text = try_read_file(path, 1 << 16, &err);
  if (!text) throw Error("cannot read " + path + " (" + what + "): " + file_error_text(err));
  return trimmed(*text);
}

}  // namespace

std::optional<std::vector<int>> parse_cpu_list(std::string_view text) {
  std::vector<int> cpus;
  auto number = [](std::string_view s) -> std::optional<int> {
    int value = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size() || value < 0 || value > 1 << 20)
      return std::nullopt;
    return value;
  };
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find(',', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view part = text.substr(pos, end - pos);
    const std::size_t dash = part.find('-');
    const auto first = number(part.substr(0, dash));
    const auto last = dash == std::string_view::npos ? first : number(part.substr(dash + 1));
    if (!first || !last || *last < *first) return std::nullopt;
    for (int cpu = *first; cpu <= *last; ++cpu) cpus.push_back(cpu);
    pos = end + 1;
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::string cpu_list_text(const std::vector<int>& cpus) {
  std::string text;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    text += (text.empty() ? "" : ",") + std::to_string(cpus[i]);
    if (j > i) text += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return text;
}

std::string sysfs_root(const EnvMap& env) {
  auto fake = env_get(env, "FLOWRUN_FAKE_SYSFS");
  return fake && !fake->empty() ? *fake : std::string("/sys");
}

std::string sysfs_pci_address(std::string_view bus_id) {
  // NVML's "00000000:18:00.0" is sysfs's "0000:18:00.0": a 16-bit domain, lowercase.
  std::string id(bus_id);
  const std::size_t colon = id.find(':');
  if (colon != std::string::npos && colon > 4) id.erase(0, colon - 4);
  std::transform(id.begin(), id.end(), id.begin(), [](unsigned char c) { return std::tolower(c); });
  return id;
}

NumaNode gpu_numa_node(const std::string& pci_bus_id, const std::string& sysfs) {
  NumaNode numa;
  const std::string device_file = sysfs + "/bus/pci/devices/" + sysfs_pci_address(pci_bus_id) + "/numa_node";
  const std::string node_text = read_sysfs(device_file, "the GPU's NUMA node");
  int node = 0;
  const auto [end, ec] = std::from_chars(node_text.data(), node_text.data() + node_text.size(), node);
  if (ec != std::errc() || end != node_text.data() + node_text.size() || node < -1)
    throw Error(device_file + ": expected a NUMA node number, not '" + node_text + "'");
  // -1: the kernel knows of no node for the device (a host of one node): node 0, as torchrun takes it.
  numa.node = std::max(node, 0);
  const std::string name = std::to_string(numa.node);
  const std::string cpulist = sysfs + "/devices/system/node/node" + name + "/cpulist";
  const std::string cpus_text = read_sysfs(cpulist, "the CPUs of NUMA node " + name);
  auto cpus = parse_cpu_list(cpus_text);
  if (!cpus) throw Error(cpulist + ": expected a CPU list such as 0-15,32-47, not '" + cpus_text + "'");
  numa.cpus = std::move(*cpus);
  return numa;
}

namespace {

std::vector<int> cpu_list_file(const std::string& path, const std::string& what) {
  const std::string text = read_sysfs(path, what);
  auto cpus = parse_cpu_list(text);
  if (!cpus) throw Error(path + ": expected a CPU list such as 0-15,32-47, not '" + text + "'");
  return *cpus;
}

std::vector<int> intersect(const std::vector<int>& a, const std::vector<int>& b) {
  std::vector<int> both;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(both));
  return both;
}

std::string cpu_dir(const std::string& sysfs, int cpu) {
  return sysfs + "/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
}

int package_of(const std::string& sysfs, int cpu) {
  const std::string path = cpu_dir(sysfs, cpu) + "physical_package_id";
  const std::string text = read_sysfs(path, "the socket of CPU " + std::to_string(cpu));
  int id = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), id);
  if (ec != std::errc() || end != text.data() + text.size())
    throw Error(path + ": expected a number, not '" + text + "'");
  return id;
}

// socket: the CPUs of every NUMA node on the GPU's node's socket (a node's
// socket is that of its lowest allowed CPU; a node without one, memory only,
// is on none).
std::vector<int> socket_cpus(const NumaNode& numa, const std::vector<int>& allowed,
                             const std::string& sysfs) {
  const std::vector<int> mine = intersect(numa.cpus, allowed);
  if (mine.empty()) return mine;
  const int socket = package_of(sysfs, mine.front());
  std::vector<int> cpus;
  for (int node : cpu_list_file(sysfs + "/devices/system/node/possible", "the NUMA nodes")) {
    const std::string name = std::to_string(node);
    const std::vector<int> theirs =
        intersect(cpu_list_file(sysfs + "/devices/system/node/node" + name + "/cpulist",
                                "the CPUs of NUMA node " + name),
                  allowed);
    if (!theirs.empty() && package_of(sysfs, theirs.front()) == socket)
      cpus.insert(cpus.end(), theirs.begin(), theirs.end());
  }
  std::sort(cpus.begin(), cpus.end());
  return cpus;
}

// exclusive: the node's physical cores (a core named by its lowest
// hyperthread) split in order among the node's GPUs, the lowest GPUs one
// core more when they do not divide evenly.
std::vector<int> exclusive_cpus(const NumaNode& numa, const std::vector<std::string>& gpus, std::size_t gpu,
                                const std::vector<int>& allowed, const std::string& sysfs) {
  std::size_t position = 0, sharing = 0;
  for (std::size_t g = 0; g < gpus.size(); ++g) {
    if (g != gpu && gpu_numa_node(gpus[g], sysfs).node != numa.node) continue;
    if (g < gpu) ++position;
    ++sharing;
  }
  std::map<int, std::vector<int>> cores;  // lowest sibling -> the core's allowed CPUs
  for (int cpu : intersect(numa.cpus, allowed)) {
    const std::vector<int> siblings = cpu_list_file(cpu_dir(sysfs, cpu) + "thread_siblings_list",
                                                    "the hyperthreads of CPU " + std::to_string(cpu));
    cores[siblings.empty() ? cpu : siblings.front()].push_back(cpu);
  }
  const std::size_t each = cores.size() / sharing, extra = cores.size() % sharing;
  if (each == 0)
    throw Error("NUMA node " + std::to_string(numa.node) + " has " + std::to_string(cores.size()) +
                " physical cores for its " + std::to_string(sharing) + " GPUs: fewer than one each");
  const std::size_t start = position * each + std::min(position, extra);
  const std::size_t count = each + (position < extra ? 1 : 0);
  std::vector<int> cpus;
  auto it = std::next(cores.begin(), static_cast<std::ptrdiff_t>(start));
  for (std::size_t i = 0; i < count; ++i, ++it) cpus.insert(cpus.end(), it->second.begin(), it->second.end());
  std::sort(cpus.begin(), cpus.end());
  return cpus;
}

}  // namespace

std::vector<int> numa_binding_cpus(NumaPolicy policy, const std::vector<std::string>& gpus, std::size_t gpu,
                                   const std::vector<int>& allowed, const std::string& sysfs, int* node) {
  const NumaNode numa = gpu_numa_node(gpus.at(gpu), sysfs);
  if (node) *node = numa.node;
  switch (policy) {
    case NumaPolicy::socket: return socket_cpus(numa, allowed, sysfs);
    case NumaPolicy::exclusive: return exclusive_cpus(numa, gpus, gpu, allowed, sysfs);
    case NumaPolicy::node: break;
  }
  return intersect(numa.cpus, allowed);
}

std::vector<int> allowed_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

}  // namespace flowrun
