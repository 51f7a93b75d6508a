#include "node_seats.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "flowrun/text.h"

#include "head_launch.h"

namespace flowrun::cluster {

NodeSeats::NodeSeats(NodeTable& nodes, const StepPlan& full, const StepPlan& plan, const Console& console,
                     std::vector<std::string>& notes, Links links)
    : nodes_(nodes), full_(full), plan_(plan), console_(console), notes_(notes), links_(std::move(links)) {}

int NodeSeats::spare_gpus() const {
  const int gpus = full_.nodes.front().gpus_available;
  return full_.cpu || gpus <= 0 ? -1 : gpus;
}

bool NodeSeats::goes_on_elastic() const {
  if (!nodes_.elastic()) return false;
  for (const auto& n : nodes_) {
    if (n.signalled) return false;
  }
  return nodes_.usable() >= static_cast<std::size_t>(nodes_.min_nodes());
}

NodeSeats::Outlook NodeSeats::outlook() const {
  Outlook o;
  o.node_gone = nodes_.any_gone();
  o.spare_ready = o.node_gone && spares_cover();
  const int usable = static_cast<int>(nodes_.usable());
  if (o.node_gone && goes_on_elastic()) o.elastic_nodes = usable;
  if (nodes_.elastic()) o.next_world_size = usable * full_.nodes.front().procs;
  return o;
}

std::string NodeSeats::range_text() const {
  return fmt::format("nodes: \"{}:{}\"", full_.min_nodes, full_.nodes.size());
}

bool NodeSeats::before_restart() { return nodes_.elastic() ? reseat_elastic() : take_spares(); }

void NodeSeats::say(const std::string& text) {
  notes_.push_back(text);
  console_.message(fmt::format("flowrun: step '{}': {}", plan_.step, text));
}

bool NodeSeats::take_spares() {
  for (int rank : nodes_.replaceable()) {
    const std::string lost = nodes_[std::size_t(rank)].name;
    const int seat = nodes_.replace(rank, spare_gpus());
    if (seat < 0) {
      links_.fail(fmt::format("node {} (node rank {}) is gone and no spare node waits to take its place",
                              lost, rank));
      return false;
    }
    links_.bind(rank);  // what the spare sends now speaks for node rank `rank`
    links_.bind(seat);  // and what the lost node's connection still says, for the retired one
    const Node& spare = nodes_[std::size_t(rank)];
    replacements_.push_back({rank, lost, spare.name});
    say(fmt::format("spare node {} takes node rank {} of lost node {} ({} left)", spare.name, rank, lost,
                    plural(nodes_.spares_waiting(spare_gpus()), "spare", "spares")));
  }
  return true;
}

bool NodeSeats::take_spare(int rank) {
  const std::string failed = nodes_[std::size_t(rank)].name;
  const int seat = nodes_.replace(rank, spare_gpus(), /*close=*/false);
  if (seat < 0) return false;
  links_.bind(rank);
  links_.bind(seat);
  const Node& spare = nodes_[std::size_t(rank)];
  replacements_.push_back({rank, failed, spare.name});
  say(fmt::format("spare node {} takes node rank {} of node {}, which failed its check ({} left)", spare.name,
                  rank, failed, plural(nodes_.spares_waiting(spare_gpus()), "spare", "spares")));
  return true;
}

// The nodes there take node ranks 0 and up; the plan is theirs.
void NodeSeats::take_usable_nodes() {
  const auto change = nodes_.reseat();
  for (std::size_t seat = 0; seat < nodes_.seats(); ++seat) {
    if (nodes_[seat].conn && nodes_[seat].conn->is_open()) links_.bind(static_cast<int>(seat));
  }
  links_.replan(static_cast<int>(nodes_.size()));
  for (const auto& name : change.dropped) dropped_.push_back(name);
  for (const auto& name : change.added) added_.push_back(name);
}

void NodeSeats::start_fewer(const std::string& why) {
  take_usable_nodes();
  say(fmt::format("{}: the step starts on {} ({}), WORLD_SIZE {} ({})", why,
                  plural(nodes_.size(), "node", "nodes"), fmt::join(nodes_.names(), ", "), plan_.world_size,
                  range_text()));
}

bool NodeSeats::reseat_elastic() {
  const std::size_t before = nodes_.size();
  const std::size_t usable = nodes_.usable();
  if (usable < static_cast<std::size_t>(nodes_.min_nodes())) {
    links_.fail(fmt::format("only {} left of the {} the step had, fewer than {} ({})",
                            plural(usable, "node is", "nodes are"), before, nodes_.min_nodes(),
                            range_text()));
    return false;
  }
  take_usable_nodes();
  if (dropped_.empty() && added_.empty()) return true;
  std::vector<std::string> what;
  if (!dropped_.empty()) what.push_back(fmt::format("without {}", fmt::join(dropped_, ", ")));
  if (!added_.empty()) what.push_back(fmt::format("with {}, which joined since", fmt::join(added_, ", ")));
  say(fmt::format("the step goes on on {} ({}), {}: WORLD_SIZE {} ({})",
                  plural(nodes_.size(), "node", "nodes"), fmt::join(nodes_.names(), ", "),
                  fmt::join(what, " and "), plan_.world_size, range_text()));
  return true;
}

void NodeSeats::record(AttemptRecord& attempt) {
  attempt.replacements = std::move(replacements_);
  replacements_.clear();
  attempt.dropped_nodes = std::move(dropped_);
  dropped_.clear();
  attempt.added_nodes = std::move(added_);
  added_.clear();
}

}  // namespace flowrun::cluster
