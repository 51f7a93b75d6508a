// Selection: which of the system's GPUs this process may use.
//
// The rules mirror CUDA's runtime, because the point is to predict what a
// worker will see: CUDA parses CUDA_VISIBLE_DEVICES left to right and stops at
// the first entry that names no GPU, silently. We stop at the same place and
// say so in a note, since a typo there otherwise shows up as "fewer GPUs than
// expected" much later.
#include <algorithm>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "flowrun/error.h"
#include "flowrun/gpu.h"
#include "flowrun/json.h"

namespace flowrun {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Comma-separated entries, trimmed; empty entries are kept (CUDA stops at them).
std::vector<std::string> split_entries(std::string_view value) {
  std::vector<std::string> entries;
  for (;;) {
    std::size_t comma = value.find(',');
    entries.emplace_back(trim(value.substr(0, comma)));
    if (comma == std::string_view::npos) return entries;
    value.remove_prefix(comma + 1);
  }
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Decimal digits to a number, saturating at `limit`: anything that large is
// out of range anyway, and saturating keeps "99999999999999999999" harmless.
std::size_t parse_count(std::string_view digits, std::size_t limit) {
  std::size_t n = 0;
  for (char c : digits) {
    n = n * 10 + static_cast<std::size_t>(c - '0');
    if (n >= limit) return limit;
  }
  return n;
}

// "this host has 8: 0-7"
std::string host_ordinals(std::size_t n) {
  if (n == 0) return "this host has no GPUs";
  if (n == 1) return "this host has 1: 0";
  return "this host has " + std::to_string(n) + ": 0-" + std::to_string(n - 1);
}

// "so only 0,1 are visible" / "so no GPU is visible"
std::string what_remains(const std::vector<std::string>& kept, std::string_view verb) {
  if (kept.empty()) return "so no GPU is " + std::string(verb);
  return "so only " + join(kept, ",") + (kept.size() == 1 ? " is " : " are ") + std::string(verb);
}

// "VAR=VALUE: WHAT WHY; WHO ignores it[ and every AFTER after it], so ..."
std::string stop_note(const std::string& variable, const std::string& value, const std::string& what,
                      const std::string& why, std::string_view who, std::string_view after, bool more,
                      const std::vector<std::string>& kept, std::string_view verb) {
  std::string note =
      variable + "=" + value + ": " + what + " " + why + "; " + std::string(who) + " ignores it";
  if (more) note += " and every " + std::string(after) + " after it";
  return note + ", " + what_remains(kept, verb);
}

// The system's devices in CUDA's order: cuda_order when it is a usable
// reordering of the devices, NVML's order otherwise.
std::vector<const GpuDevice*> cuda_ordered(const SystemGpus& system) {
  std::vector<const GpuDevice*> nvml;
  for (const GpuDevice& d : system.devices) nvml.push_back(&d);
  if (system.cuda_order.size() != system.devices.size()) return nvml;
  std::vector<const GpuDevice*> order;
  for (const std::string& uuid : system.cuda_order) {
    auto it = std::find_if(system.devices.begin(), system.devices.end(),
                           [&](const GpuDevice& d) { return d.uuid == uuid; });
    if (it == system.devices.end() || std::find(order.begin(), order.end(), &*it) != order.end()) return nvml;
    order.push_back(&*it);
  }
  return order;
}

std::size_t position_of(const std::vector<const GpuDevice*>& order, const GpuDevice* device) {
  return static_cast<std::size_t>(std::find(order.begin(), order.end(), device) - order.begin());
}

void add_gpu(Inventory& inventory, const GpuDevice& device, std::string token) {
  Gpu gpu;
  gpu.index = static_cast<int>(inventory.gpus.size());
  gpu.uuid = device.uuid;
  gpu.name = device.name;
  gpu.memory_bytes = device.memory_bytes;
  gpu.pci_bus_id = device.pci_bus_id;
  gpu.select_token = std::move(token);
  gpu.details = device.details;
  inventory.gpus.push_back(std::move(gpu));
}

// The system's link matrix narrowed to the selected GPUs, in their order.
void select_links(const SystemGpus& system, Inventory& inventory) {
  inventory.nvswitch = system.nvswitch;
  if (system.links.size() != system.devices.size()) return;
  std::vector<std::size_t> rows;
  for (const Gpu& gpu : inventory.gpus) {
    auto it = std::find_if(system.devices.begin(), system.devices.end(),
                           [&](const GpuDevice& d) { return d.uuid == gpu.uuid; });
    if (it == system.devices.end()) return;
    rows.push_back(static_cast<std::size_t>(it - system.devices.begin()));
  }
  for (std::size_t row : rows) {
    if (system.links[row].size() != system.devices.size()) return;
  }
  inventory.links.assign(rows.size(), std::vector<GpuLink>(rows.size()));
  for (std::size_t i = 0; i < rows.size(); ++i) {
    for (std::size_t j = 0; j < rows.size(); ++j) inventory.links[i][j] = system.links[rows[i]][rows[j]];
  }
}

// On a node with mixed GPUs CUDA's default order (FASTEST_FIRST) differs from
// nvidia-smi's, which surprises everyone who picks GPUs by nvidia-smi's numbers.
void note_cuda_order(const SystemGpus& system, const std::vector<const GpuDevice*>& order,
                     Inventory& inventory) {
  std::vector<std::string> cuda, smi;
  bool differs = false;
  for (std::size_t i = 0; i < order.size(); ++i) {
    std::size_t smi_index = static_cast<std::size_t>(order[i] - system.devices.data());
    differs = differs || smi_index != i;
    cuda.push_back(std::to_string(i));
    smi.push_back(std::to_string(smi_index));
  }
  if (!differs) return;
  inventory.notes.push_back(
      "CUDA numbers this host's GPUs fastest first, not in PCI bus order like nvidia-smi: "
      "CUDA ordinals " +
      join(cuda, ",") + " are nvidia-smi GPUs " + join(smi, ",") +
      " (set CUDA_DEVICE_ORDER=PCI_BUS_ID to number them alike)");
}

void select_cuda_visible_devices(const std::vector<const GpuDevice*>& order, const std::string& value,
                                 Inventory& inventory) {
  const std::string variable = "CUDA_VISIBLE_DEVICES";
  inventory.selected_by = variable;
  inventory.cuda_visible_devices_set = true;
  if (trim(value).empty()) {
    inventory.notes.push_back(
        "CUDA_VISIBLE_DEVICES is set but empty, which hides every GPU from CUDA, so no GPU is visible");
    return;
  }
  if (trim(value) == "-1") {
    inventory.notes.push_back("CUDA_VISIBLE_DEVICES=-1 hides every GPU from CUDA, so no GPU is visible");
    return;
  }
  const std::vector<std::string> entries = split_entries(value);
  std::vector<const GpuDevice*> taken;
  std::vector<std::string> kept;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const std::string& entry = entries[i];
    const GpuDevice* device = nullptr;
    std::string why;
    std::string_view who = "CUDA";
    if (all_digits(entry)) {
      std::size_t ordinal = parse_count(entry, order.size());
      if (ordinal < order.size()) {
        device = order[ordinal];
      } else {
        why = "names no GPU (" + host_ordinals(order.size()) + ")";
      }
    } else if (entry.starts_with("MIG-")) {
      why = "is a MIG instance, which flowrun does not support";
      who = "flowrun";
    } else if (entry.starts_with("GPU-")) {
      // CUDA accepts any unique prefix of a UUID; an ambiguous one names nothing.
      std::size_t matches = 0;
      for (const GpuDevice* d : order) {
        if (d->uuid.starts_with(entry)) {
          device = d;
          ++matches;
        }
      }
      if (matches == 0) why = "names no GPU (no GPU's UUID starts with it)";
      if (matches > 1) {
        device = nullptr;
        why = "names no GPU (it is the start of " + std::to_string(matches) + " GPUs' UUIDs)";
      }
    } else {
      why = "names no GPU (expected a GPU ordinal or a UUID such as GPU-8f3a...)";
    }
    if (device != nullptr) {
      auto it = std::find(taken.begin(), taken.end(), device);
      if (it != taken.end()) {
        why = "names the same GPU as entry '" + kept[static_cast<std::size_t>(it - taken.begin())] + "'";
        device = nullptr;
      }
    }
    if (device == nullptr) {
      inventory.notes.push_back(stop_note(variable, value, "entry '" + entry + "'", why, who, "entry",
                                          i + 1 < entries.size(), kept, "visible"));
      return;
    }
    taken.push_back(device);
    kept.push_back(entry);
    add_gpu(inventory, *device, entry);
  }
}

// SLURM_STEP_GPUS / SLURM_JOB_GPUS: system (NVML) ordinals, "0,1,2" or "0-3".
// The token is the GPU's CUDA ordinal, which is the same number unless CUDA
// orders this node's GPUs differently.
void select_slurm_list(const SystemGpus& system, const std::vector<const GpuDevice*>& order,
                       const std::string& variable, const std::string& value, Inventory& inventory) {
  inventory.selected_by = variable;
  if (trim(value).empty()) {
    inventory.notes.push_back(variable + " is set but empty, so no GPU is used");
    return;
  }
  const std::size_t n = system.devices.size();
  const std::vector<std::string> entries = split_entries(value);
  std::vector<std::size_t> taken;
  std::vector<std::string> kept;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const std::string& entry = entries[i];
    const bool more_entries = i + 1 < entries.size();
    std::size_t first = 0, last = 0;
    std::size_t dash = entry.find('-');
    std::string_view low = std::string_view(entry).substr(0, dash);
    std::string_view high = dash == std::string::npos ? low : std::string_view(entry).substr(dash + 1);
    if (all_digits(low) && all_digits(high)) {
      // Saturating far above any real GPU count; the loop below stops at the
      // first ordinal out of range, so a huge range costs nothing.
      constexpr std::size_t kHuge = std::size_t{1} << 30;
      first = parse_count(low, kHuge);
      last = parse_count(high, kHuge);
    }
    if (!all_digits(low) || !all_digits(high) || first > last) {
      inventory.notes.push_back(stop_note(variable, value, "entry '" + entry + "'",
                                          "is not a GPU ordinal or a range such as 0-3", "flowrun", "entry",
                                          more_entries, kept, "used"));
      return;
    }
    for (std::size_t k = first; k <= last; ++k) {
      std::string why;
      if (k >= n) {
        why = "does not exist (" + host_ordinals(n) + ")";
      } else if (std::find(taken.begin(), taken.end(), k) != taken.end()) {
        why = "is listed twice";
      }
      if (!why.empty()) {
        const std::string gpu = "GPU " + (k == first ? std::string(low) : std::to_string(k));
        inventory.notes.push_back(stop_note(variable, value, gpu, why, "flowrun", "GPU listed",
                                            more_entries || k < last, kept, "used"));
        return;
      }
      taken.push_back(k);
      kept.push_back(std::to_string(k));
      const GpuDevice& device = system.devices[k];
      add_gpu(inventory, device, std::to_string(position_of(order, &device)));
    }
  }
}

void select_first(const std::vector<const GpuDevice*>& order, std::size_t count, Inventory& inventory) {
  for (std::size_t i = 0; i < count && i < order.size(); ++i)
    add_gpu(inventory, *order[i], std::to_string(i));
}

// The selection rules above, applied in order; select_gpus() adds the links.
Inventory select_devices(const SystemGpus& system, const EnvMap& env) {
  Inventory inventory;
  inventory.source = system.source;
  inventory.system_count = system.devices.size();
  inventory.driver_version = system.driver_version;
  inventory.cuda_driver_version = system.cuda_driver_version;
  inventory.unavailable_reason = system.unavailable_reason;

  const std::vector<const GpuDevice*> order = cuda_ordered(system);
  note_cuda_order(system, order, inventory);

  if (auto cvd = env_get(env, "CUDA_VISIBLE_DEVICES")) {
    select_cuda_visible_devices(order, *cvd, inventory);
    return inventory;
  }
  for (const char* variable : {"SLURM_STEP_GPUS", "SLURM_JOB_GPUS"}) {
    if (auto list = env_get(env, variable)) {
      select_slurm_list(system, order, variable, *list, inventory);
      return inventory;
    }
  }
  if (auto on_node = env_get(env, "SLURM_GPUS_ON_NODE")) {
    std::string_view text = trim(*on_node);
    if (!all_digits(text)) {
      inventory.notes.push_back("SLURM_GPUS_ON_NODE='" + *on_node + "' is not a count of GPUs; ignoring it");
    } else {
      const std::size_t n = order.size();
      const std::size_t allocated = parse_count(text, n + 1);
      const std::string said = "Slurm allocated " + std::string(text) +
                               " GPUs on this node (SLURM_GPUS_ON_NODE=" + std::string(text) + ")";
      inventory.selected_by = "SLURM_GPUS_ON_NODE";
      select_first(order, allocated, inventory);
      if (allocated > n) {
        inventory.notes.push_back(said + " but this host has " + std::to_string(n) + "; using all " +
                                  std::to_string(n));
      } else if (allocated < n) {
        std::vector<std::string> used;
        for (const Gpu& gpu : inventory.gpus) used.push_back(gpu.select_token);
        inventory.notes.push_back(said + " without naming them; " +
                                  (used.empty()
                                       ? std::string("using none")
                                       : "using the first " + std::string(text) + ": " + join(used, ",")));
      }
      return inventory;
    }
  }
  select_first(order, order.size(), inventory);
  return inventory;
}

}  // namespace

std::string Inventory::summary() const {
  if (gpus.empty()) return "no GPUs";
  std::vector<std::pair<std::string, int>> groups;  // first appearance order
  for (const Gpu& gpu : gpus) {
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == gpu.name; });
    if (it == groups.end()) {
      groups.emplace_back(gpu.name, 1);
    } else {
      ++it->second;
    }
  }
  std::vector<std::string> parts;
  for (const auto& [name, count] : groups) parts.push_back(name + " x" + std::to_string(count));
  return join(parts, ", ");
}

Inventory select_gpus(const SystemGpus& system, const EnvMap& env) {
  Inventory inventory = select_devices(system, env);
  select_links(system, inventory);
  return inventory;
}

std::unique_ptr<GpuProbe> make_probe(const EnvMap& env, int fake_gpus, bool topology) {
  if (fake_gpus >= 0) return make_fake_probe(fake_gpus);
  if (auto text = env_get(env, "FLOWRUN_FAKE_GPUS")) {
    constexpr std::size_t kMaxFakeGpus = 1024;
    if (!all_digits(*text) || parse_count(*text, kMaxFakeGpus + 1) > kMaxFakeGpus) {
      throw Error("FLOWRUN_FAKE_GPUS='" + *text +
                      "': expected a whole number of simulated GPUs, e.g. FLOWRUN_FAKE_GPUS=8",
                  kExitUsage);
    }
    return make_fake_probe(static_cast<int>(parse_count(*text, kMaxFakeGpus + 1)));
  }
  return make_nvml_probe(topology);
}

Json gpu_identity(const Gpu& gpu) {
  return {{"index", gpu.index},
          {"name", gpu.name},
          {"uuid", gpu.uuid},
          {"memory_bytes", static_cast<std::uint64_t>(gpu.memory_bytes)},
          {"pci_bus_id", gpu.pci_bus_id}};
}

}  // namespace flowrun
