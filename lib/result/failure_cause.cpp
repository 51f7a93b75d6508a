// A failed attempt's root cause, and the Python exception a traceback ends
// with (the contracts are in result.h).
//
// A traceback is read from its innermost frame down, not from its
// "Traceback (most recent call last):" head: the stderr tail holds the last
// 20 lines, which often starts inside a deep traceback. Python prints the
// exception at the start of a line after the frames' indented lines (the
// source line, 3.11's carets), which is how it is told from them.

#include <algorithm>
#include <cctype>
#include <charconv>
#include <fmt/format.h>

#include "flowrun/path.h"
#include "flowrun/result.h"

namespace flowrun {

namespace {

constexpr std::string_view kFrame = "  File \"";

// The lines of `text`, without their '\n'.
std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> out;
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    out.push_back(line);
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return out;
}

// `  File "F", line N` (then ", in NAME", or nothing for a SyntaxError's).
bool read_frame(std::string_view line, std::string& file, int& number) {
  if (line.substr(0, kFrame.size()) != kFrame) return false;
  line.remove_prefix(kFrame.size());
  const std::size_t quote = line.rfind("\", line ");
  if (quote == std::string_view::npos) return false;
  std::string_view digits = line.substr(quote + 8);
  int n = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (ec != std::errc() || end == digits.data()) return false;
  file = std::string(line.substr(0, quote));
  number = n;
  return true;
}

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.';
}

// "Type: message" or "Type", Type a dotted name that starts with a letter or '_'.
std::optional<PythonException> read_exception_line(std::string_view line) {
  const std::size_t colon = line.find(": ");
  std::string_view type = line.substr(0, colon);
  if (type.empty() || !(std::isalpha(static_cast<unsigned char>(type.front())) != 0 || type.front() == '_'))
    return std::nullopt;
  for (char c : type) {
    if (!is_name_char(c)) return std::nullopt;
  }
  PythonException e;
  e.type = std::string(type);
  if (colon != std::string_view::npos) e.message = std::string(line.substr(colon + 2));
  return e;
}

}  // namespace

const char* failure_cause_name(FailureCause cause) {
  switch (cause) {
    case FailureCause::exception: return "exception";
    case FailureCause::exit_code: return "exit_code";
    case FailureCause::signal: return "signal";
    case FailureCause::node_lost: return "node_lost";
  }
  return "exit_code";
}

std::string PythonException::describe() const {
  std::string text = type;
  if (!message.empty()) {
    // At most 200 bytes, cut before a UTF-8 character, not inside one.
    std::size_t cut = std::min<std::size_t>(message.size(), 200);
    while (cut < message.size() && cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xC0) == 0x80)
      --cut;
    text += ": " + message.substr(0, cut) + (cut < message.size() ? "..." : "");
  }
  if (!file.empty()) {
    text += fmt::format(" ({}:{})", base_name(file), line);
  }
  return text;
}

std::optional<PythonException> parse_python_exception(std::string_view text) {
  const std::vector<std::string_view> lines = lines_of(text);
  for (std::size_t i = lines.size(); i-- > 0;) {
    std::string file;
    int number = 0;
    if (!read_frame(lines[i], file, number)) continue;
    for (std::size_t j = i + 1; j < lines.size(); ++j) {
      if (lines[j].empty() || lines[j].front() == ' ' || lines[j].front() == '\t') continue;
      auto e = read_exception_line(lines[j]);
      if (!e) return std::nullopt;
      e->file = std::move(file);
      e->line = number;
      return e;
    }
    return std::nullopt;  // the innermost frame has no exception after it (yet)
  }
  return std::nullopt;
}

FailureFacts classify_failure(const AttemptRecord& attempt, bool node_gone,
                              const std::string& error_file_text) {
  FailureFacts facts;
  if (attempt.outcome != Outcome::failed) return facts;
  if (!attempt.culprit) {
    if (node_gone) facts.cause = FailureCause::node_lost;
    return facts;
  }
  const WorkerRecord& w = attempt.workers.at(static_cast<std::size_t>(*attempt.culprit));
  switch (w.status.kind) {
    case ExitStatus::Kind::lost: facts.cause = FailureCause::node_lost; return facts;
    case ExitStatus::Kind::signaled:
      // One killed by flowrun's stop after it had recorded its own failure:
      // that failure is the cause.
      if (w.error_file_unix_ns > 0 && parse_error_file(error_file_text)) break;
      facts.cause = FailureCause::signal;
      return facts;
    case ExitStatus::Kind::exited: break;
    default: facts.cause = FailureCause::exit_code; return facts;  // could not start
  }
  // torch's @record writes the error file: the traceback is its py_callstack,
  // or only "Type: message" in an older or hand-written one.
  if (auto recorded = parse_error_file(error_file_text)) {
    facts.cause = FailureCause::exception;
    facts.exception = parse_python_exception(*recorded);
    if (!facts.exception) facts.exception = read_exception_line(lines_of(*recorded).front());
    return facts;
  }
  if (w.status.code == 1) facts.exception = parse_python_exception(w.stderr_tail);
  facts.cause = facts.exception ? FailureCause::exception : FailureCause::exit_code;
  return facts;
}

}  // namespace flowrun
