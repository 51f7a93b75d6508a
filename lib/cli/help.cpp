// Every --help's layout: CLI11's, with its lines wrapped at kHelpWidth
// (CLI11 2.1 does not wrap) and less noise in the option column.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <regex>
#include <sstream>

#include "commands.h"

namespace flowrun {

namespace {

constexpr std::size_t kHelpColumn = 30;  // where descriptions start, CLI11's default

// `head` (kept as it is: an indent, or a name padded to its column) followed
// by the words of `text`, cut at spaces into lines of at most `width`
// columns; each line after the first starts with `indent` spaces. A word
// longer than a line stays whole.
std::string wrap(std::string head, std::string_view text, std::size_t width, std::size_t indent) {
  std::string out, line = std::move(head);
  bool fresh = true;  // no word on `line` yet
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t end = text.find(' ', at);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view word = text.substr(at, end - at);
    at = end + 1;
    if (word.empty()) continue;
    if (!fresh && line.size() + 1 + word.size() > width) {
      out += line + "\n";
      line.assign(indent, ' ');
      fresh = true;
    }
    if (!fresh) line += ' ';
    line += word;
    fresh = false;
  }
  return out + line;
}

// Each line of `text` that is too long, wrapped: its continuation lines line
// up with what follows the line's first gap of 3 or more spaces (the second
// column of a list of examples), else with the line's own indent.
std::string wrap_lines(const std::string& text, std::size_t width) {
  std::string out;
  std::istringstream in(text);
  std::string line;
  bool first = true;
  while (std::getline(in, line)) {
    if (!first) out += '\n';
    first = false;
    if (line.size() <= width) {
      out += line;
      continue;
    }
    std::size_t column = std::min(line.find_first_not_of(' '), line.size());
    if (const std::size_t gap = line.find("   ", column); gap != std::string::npos) {
      const std::size_t next = line.find_first_not_of(' ', gap);
      if (next != std::string::npos && next < width / 2) column = next;
    }
    out += wrap(line.substr(0, column), std::string_view(line).substr(column), width, column);
  }
  if (!text.empty() && text.back() == '\n') out += '\n';
  return out;
}

// An option's line or a subcommand's: NAME padded to the column, then the
// description wrapped beside it.
std::string entry(const std::string& name, const std::string& description) {
  std::string left = "  " + name;
  if (description.empty()) return left + "\n";
  std::string out;
  if (left.size() >= kHelpColumn) {
    out = left + "\n";
    left.clear();
  }
  left.resize(kHelpColumn, ' ');
  std::string text = description;
  std::replace(text.begin(), text.end(), '\n', ' ');
  return out + wrap(left, text, kHelpWidth, kHelpColumn) + "\n";
}

class HelpFormatter : public CLI::Formatter {
 public:
  explicit HelpFormatter(std::string usage) : usage_(std::move(usage)) { column_width(kHelpColumn); }

  std::string make_option(const CLI::Option* opt, bool is_positional) const override {
    return entry(make_option_name(opt, is_positional) + make_option_opts(opt), make_option_desc(opt));
  }

  // torchrun's underscore spellings (--nproc_per_node) are said once in the
  // description, not beside every option.
  std::string make_option_name(const CLI::Option* opt, bool is_positional) const override {
    if (is_positional) return opt->get_name(true, false);
    std::string names;
    for (const auto& s : opt->get_snames()) names += (names.empty() ? "-" : ",-") + s;
    const auto& longs = opt->get_lnames();
    for (const auto& l : longs) {
      std::string dashed = l;
      std::replace(dashed.begin(), dashed.end(), '_', '-');
      if (dashed != l && std::find(longs.begin(), longs.end(), dashed) != longs.end()) continue;
      names += (names.empty() ? "--" : ",--") + l;
    }
    return names;
  }

  // The metavariable without the validators' descriptions CLI11 appends
  // (N:INT in [0 - 1024], WHEN:{auto,always,never}): descriptions say them.
  std::string make_option_opts(const CLI::Option* opt) const override {
    static const std::regex checks(R"(:(\{[^}]*\}|[A-Z]+ in \[[^\]]*\]))");
    return std::regex_replace(Formatter::make_option_opts(opt), checks, "");
  }

  std::string make_subcommand(const CLI::App* sub) const override {
    return entry(sub->get_display_name(true), sub->get_description());
  }

  std::string make_description(const CLI::App* app) const override {
    return wrap_lines(Formatter::make_description(app), kHelpWidth);
  }

  std::string make_usage(const CLI::App* app, std::string name) const override {
    if (!usage_.empty()) return wrap_lines(usage_, kHelpWidth) + "\n";
    return wrap_lines(Formatter::make_usage(app, std::move(name)), kHelpWidth);
  }

  std::string make_footer(const CLI::App* app) const override {
    return wrap_lines(Formatter::make_footer(app), kHelpWidth);
  }

 private:
  std::string usage_;
};

}  // namespace

void use_help_format(CLI::App& app, std::string usage) {
  app.formatter(std::make_shared<HelpFormatter>(std::move(usage)));
}

}  // namespace flowrun
