// Finding flowrun's `${...}` templates in a step's command (spec.h).
//
// Only `${steps.` / `${step.` / `${args` / `${arg}` / `${argv}` are looked at
// closely: everything else after `${` belongs to the shell (`${HOME}`,
// `${N:-4}`) and is skipped, but scanning resumes right after its `${`, so a
// template nested in a shell default (`${X:-${args}}`) is still found.
//
// `$${` is the escape: a literal `${` that starts no template, so that any
// text can be written as a run word (`flowrun run train.py 'lr=${args.lr}'`
// writes `lr=$${args.lr}`). escape_templates() is its inverse: every `${`
// becomes `$${`, and a `$` before one stays a `$` (`$${` -> `$$${`), since
// the escape is found as a `$` just before a `${` that nothing before it
// took; lib/plan/command.cpp's substitute() reads it the same way.

#include <cstdio>

#include "flowrun/spec.h"

namespace flowrun {

namespace spec_detail {

// Quotes `text` for a one-line message: 'text', with control characters
// escaped and anything past 40 bytes cut (at a UTF-8 boundary) as '...'.
// Shared with the spec's checks (spec_detail.h).
std::string quote(std::string_view text) {
  constexpr std::size_t kMax = 40;
  std::string out = "'";
  std::size_t i = 0;
  for (; i < text.size(); ++i) {
    auto c = static_cast<unsigned char>(text[i]);
    if (i >= kMax && (c & 0xC0) != 0x80) break;
    switch (c) {
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7F) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  if (i < text.size()) out += "...";
  out += '\'';
  return out;
}

bool is_step_name(std::string_view name) {
  auto alnum = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  };
  if (name.empty() || !alnum(name[0])) return false;
  for (char c : name) {
    if (!alnum(c) && c != '_' && c != '-') return false;
  }
  return true;
}

}  // namespace spec_detail

namespace {

using spec_detail::quote;

// `inner` is the text after `${` up to (not including) `}`.
std::optional<std::string> steps_template_name(std::string_view inner, std::string_view head) {
  if (!inner.starts_with(head)) return std::nullopt;
  std::string_view rest = inner.substr(head.size());
  constexpr std::string_view kTail = ".outputs";
  if (!rest.ends_with(kTail)) return std::nullopt;
  std::string_view name = rest.substr(0, rest.size() - kTail.size());
  if (!spec_detail::is_step_name(name)) return std::nullopt;
  return std::string(name);
}

}  // namespace

std::optional<std::vector<Placeholder>> find_placeholders(std::string_view text, std::string* error) {
  std::vector<Placeholder> found;
  auto fail = [&](std::string message) -> std::optional<std::vector<Placeholder>> {
    if (error) *error = std::move(message);
    return std::nullopt;
  };
  auto word_char = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
  };
  std::size_t at = 0;
  for (std::size_t from = 0; (at = text.find("${", from)) != std::string_view::npos; from = at + 2) {
    if (at > from && text[at - 1] == '$') continue;  // `$${`: a literal `${`
    // A template ends at its '}'; any other character ends it too early, so
    // `${steps.a b}` and `${steps.a` are both cut to "${steps.a".
    std::size_t end = at + 2;
    while (end < text.size() && word_char(text[end])) ++end;
    const bool closed = end < text.size() && text[end] == '}';
    const std::string_view inner = text.substr(at + 2, end - at - 2);
    const std::string_view whole = text.substr(at, end - at + (closed ? 1 : 0));
    const std::string_view head = inner.substr(0, inner.find('.'));

    if (head == "steps") {
      auto name = steps_template_name(inner, "steps.");
      if (!closed || !name) {
        return fail((closed ? "malformed template " : "unterminated template ") + quote(whole) +
                    "; expected '${steps.NAME.outputs}'");
      }
      found.push_back({Placeholder::Kind::step_outputs, *name});
    } else if (head == "step") {
      auto name = steps_template_name(inner, "step.");
      return fail("unknown template " + quote(whole) + "; did you mean '${steps." + (name ? *name : "NAME") +
                  ".outputs}'?");
    } else if (head == "args") {
      if (!closed || inner != "args") {
        return fail((closed ? "malformed template " : "unterminated template ") + quote(whole) +
                    "; expected '${args}'");
      }
      found.push_back({Placeholder::Kind::args, {}});
    } else if (closed && (inner == "arg" || inner == "argv")) {
      return fail("unknown template " + quote(whole) + "; did you mean '${args}'?");
    }
  }
  return found;
}

std::string escape_templates(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '$' && i + 1 < text.size() && text[i + 1] == '{') out += '$';
    out += text[i];
  }
  return out;
}

}  // namespace flowrun
