#include "engine_watch.h"

#include <fmt/format.h>

namespace flowrun::cluster {

namespace {

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(pos, end - pos));
    pos = end + 1;
  }
  return lines;
}

}  // namespace

void EngineWatch::add(const EngineLaunch& e) {
  nodes_.push_back(e.node);
  what_.push_back(e.what);
  tail_.emplace_back(20, 4096);
}

EngineWatch::Grant EngineWatch::feed(std::size_t index, std::string_view data) {
  tail_[index].feed(data);
  if (data.find("queued and waiting for resources") != std::string_view::npos) {
    waiting_for_grant_ = true;
    return Grant::queued;
  }
  if (waiting_for_grant_ && data.find("has been allocated resources") != std::string_view::npos) {
    waiting_for_grant_ = false;
    return Grant::granted;
  }
  return Grant::none;
}

std::string EngineWatch::tail(std::size_t index) const {
  std::string tail = tail_[index].text();
  while (!tail.empty() && tail.back() == '\n') tail.pop_back();
  return tail;
}

std::string EngineWatch::ended_before_join(std::size_t index, const WorkerRecord& record) const {
  const std::string tail = this->tail(index);
  std::string message = fmt::format("{} {}", what_[index], record.status.describe()) + " before " +
                        (nodes_[index] < 0 ? std::string("every agent") : std::string("its agent")) +
                        " joined";
  if (!tail.empty()) {
    message += "; its last output:";
    for (const auto& line : split_lines(tail)) message += "\n    " + line;
  }
  return message;
}

std::string EngineWatch::ended_note(std::size_t index, const WorkerRecord& record) const {
  const std::string tail = this->tail(index);
  return fmt::format("{} {}", what_[index], record.status.describe()) +
         (tail.empty() ? "" : ": " + split_lines(tail).back());
}

}  // namespace flowrun::cluster
