// libFuzzer target for templates in shell text (shell_text.h). The input is
// both a script for the lexer, which must place or refuse every template in
// it without a crash, and, split at NUL bytes, a context and the arguments:
// the first byte picks one of the quoting contexts below and a shell (bash or
// sh), the rest are the arguments. Their expansion runs through that real
// shell, and what the program receives must be what the script means for
// those arguments, byte for byte. Replayed over tests/fuzz/corpus/shell by
// the fuzz_shell_corpus test.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "flowrun/child.h"
#include "flowrun/shell_text.h"
#include "flowrun/util.h"

namespace {

using Words = std::vector<std::string>;

// printf '%s\0' with no argument still prints its format once.
Words printed(const Words& a) { return a.empty() ? Words{""} : a; }

struct Context {
  std::string_view script;
  Words (*meant)(const Words& a);
};

// Each context a template can stand in; `|x` ends a command substitution's
// output so that trailing newlines of a value survive it.
const Context kContexts[] = {
    {"printf '%s\\0' ${args}", [](const Words& a) { return printed(a); }},
    {"printf '%s\\0' 'q ${args}'", [](const Words& a) { return Words{"q " + flowrun::join(a, " ")}; }},
    {"printf '%s\\0' \"q ${args}\"", [](const Words& a) { return Words{"q " + flowrun::join(a, " ")}; }},
    {"v=${args}; printf '%s\\0' \"$v\"", [](const Words& a) { return Words{flowrun::join(a, " ")}; }},
    {"printf '%s\\0' \"$(printf '%s' \"q ${args}\"; printf '|x')\"",
     [](const Words& a) { return Words{"q " + flowrun::join(a, " ") + "|x"}; }},
    {"printf '%s\\0' \"$(printf '%s' 'q ${args}'; printf '|x')\"",
     [](const Words& a) { return Words{"q " + flowrun::join(a, " ") + "|x"}; }},
    {"v=$(printf '%s\\n' ${args}; printf '|x'); printf '%s\\0' \"$v\"",
     [](const Words& a) {
       std::string s;
       for (const auto& v : printed(a)) s += v + "\n";
       return Words{s + "|x"};
     }},
    {"v=`printf '%s' \"q ${args}\"; printf '|x'`; printf '%s\\0' \"$v\"",
     [](const Words& a) { return Words{"q " + flowrun::join(a, " ") + "|x"}; }},
    {"v=`printf '%s' 'q ${args}'; printf '|x'`; printf '%s\\0' \"$v\"",
     [](const Words& a) { return Words{"q " + flowrun::join(a, " ") + "|x"}; }},
    {"v=`printf '%s|' ${args}; printf x`; printf '%s\\0' \"$v\"",
     [](const Words& a) {
       std::string s;  // no backslash in a backquote body that holds a template
       for (const auto& v : printed(a)) s += v + "|";
       return Words{s + "x"};
     }},
    {"cat <<'EOF'\n${HOME}\nEOF\nprintf '%s\\0' ${args} # ${HOME}",
     [](const Words& a) {
       Words w = printed(a);
       w.front() = "${HOME}\n" + w.front();
       return w;
     }},
};

// The lexer alone: any text, no crash; what it finds is in order and in it.
void lex(std::string_view text) {
  const flowrun::ShellScan scan = flowrun::scan_shell_text(text);
  if (scan.refusal && (scan.refusal->offset >= text.size() || !scan.templates.empty())) __builtin_trap();
  // Templates are placed in the text as the shell reads it (`$${` undone).
  const std::string_view shell = scan.text;
  if (shell.size() > text.size()) __builtin_trap();
  std::size_t after = 0;
  for (const auto& t : scan.templates) {
    if (t.offset < after || t.offset + t.length > shell.size() || shell.substr(t.offset, 2) != "${")
      __builtin_trap();
    after = t.offset + t.length;
  }
}

Words received(const std::string& shell, const std::string& script) {
  flowrun::HelperRequest request;
  request.argv = {shell, "-c", script};
  request.stderr_to = flowrun::HelperStderr::discard;
  request.output_limit = 1 << 20;
  request.deadline = std::chrono::seconds(10);
  const flowrun::HelperOutcome out = flowrun::run_helper(request);
  if (!out.ok()) __builtin_trap();
  Words words;
  for (std::size_t at = 0; at < out.output.size();) {
    const std::size_t end = out.output.find('\0', at);
    words.push_back(out.output.substr(at, end - at));
    at = end == std::string::npos ? out.output.size() : end + 1;
  }
  return words;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  lex(input);
  if (input.empty()) return 0;
  const auto pick = static_cast<unsigned char>(input[0]);
  const Context& context = kContexts[pick % std::size(kContexts)];
  const std::string shell = pick & 0x80 ? "sh" : "bash";
  Words args;
  for (std::size_t at = 1; at <= input.size() && args.size() < 64;) {
    const std::size_t end = std::min(input.find('\0', at), input.size());
    args.emplace_back(input.substr(at, end - at));
    at = end + 1;
  }
  if (input.size() == 1) args.clear();
  const flowrun::ShellScan scan = flowrun::scan_shell_text(context.script);
  if (scan.refusal || scan.templates.size() != 1) __builtin_trap();
  const flowrun::ShellTemplate& t = scan.templates.front();
  std::string script(scan.text);
  script.replace(t.offset, t.length, flowrun::quote_for_shell(t, args));
  if (received(shell, script) != context.meant(args)) __builtin_trap();
  return 0;
}
