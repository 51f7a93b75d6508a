// Templates in shell text (shell_text.h): each context a template can stand
// in, filled with hostile values by expand_command and run by a real bash and
// a real sh, compared with what the script meant; and every context that is
// refused, refused.
#include "flowrun/shell_text.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "flowrun/child.h"
#include "flowrun/plan.h"
#include "flowrun/util.h"

using namespace flowrun;
using namespace std::string_literals;

namespace {

using Words = std::vector<std::string>;

const RunLayout kLayout{"/w/run dir $(printf INJ) 'q' \"d\" `b`/r1"};
const std::string kOutputs = kLayout.inputs_dir("train");

// What a program receives: the shell runs `argv`, whose script ends each
// word it prints with a NUL byte (printf '%s\0').
Words run(const Words& argv) {
  HelperRequest request;
  request.argv = argv;
  request.stderr_to = HelperStderr::capture;
  request.deadline = std::chrono::seconds(30);
  const HelperOutcome out = run_helper(request);
  INFO("stderr: " << out.error_output);
  CHECK(out.ok());
  CHECK(out.error_output.empty());
  Words words;
  for (std::size_t at = 0; at < out.output.size();) {
    const std::size_t end = out.output.find('\0', at);
    words.push_back(out.output.substr(at, end - at));
    at = end == std::string::npos ? out.output.size() : end + 1;
  }
  return words;
}

// A script with templates and what it means for the arguments `a`.
struct Case {
  std::string script;
  Words (*meant)(const Words& a);
};

std::string joined(const Words& a) { return join(a, " "); }

// printf '%s\0' with no argument still prints its format once.
Words printed(const Words& a) { return a.empty() ? Words{""} : a; }

std::string bars(const Words& a) {
  std::string s;
  for (const auto& v : printed(a)) s += v + "|";
  return s;
}

const Case kCases[] = {
    {"printf '%s\\0' ${args}", [](const Words& a) { return printed(a); }},
    {"printf '%s\\0' 'got ${args}.'", [](const Words& a) { return Words{"got " + joined(a) + "."}; }},
    {"printf '%s\\0' \"got ${args}.\"", [](const Words& a) { return Words{"got " + joined(a) + "."}; }},
    {"printf '%s\\0' x${args}y",
     [](const Words& a) {
       Words w = a.empty() ? Words{""} : a;
       w.front() = "x" + w.front();
       w.back() += "y";
       return w;
     }},
    {"v=${args}; printf '%s\\0' \"$v\"", [](const Words& a) { return Words{joined(a)}; }},
    {"export V=x${args}; printf '%s\\0' \"$V\"", [](const Words& a) { return Words{"x" + joined(a)}; }},
    {"for w in ${args}; do printf '<%s>\\0' \"$w\"; done",
     [](const Words& a) {
       Words w;
       for (const auto& s : a) w.push_back("<" + s + ">");
       return w;
     }},
    {"printf '%s\\0' \"$(printf '%s|' ${args}; printf x)\"",
     [](const Words& a) { return Words{bars(a) + "x"}; }},
    {"printf '%s\\0' \"$(printf '%s' \"in ${args}\"; printf x)\"",
     [](const Words& a) { return Words{"in " + joined(a) + "x"}; }},
    {"printf '%s\\0' \"$(printf '%s' 'in ${args}'; printf x)\"",
     [](const Words& a) { return Words{"in " + joined(a) + "x"}; }},
    {"printf '%s\\0' \"$(printf '%s' \"$(printf '%s' \"${args}\")\"; printf x)\"",
     [](const Words& a) { return Words{joined(a) + "x"}; }},
    {"v=`printf '%s|' ${args}; printf x`; printf '%s\\0' \"$v\"",
     [](const Words& a) { return Words{bars(a) + "x"}; }},
    {"v=`printf '%s' \"in ${args}\"; printf x`; printf '%s\\0' \"$v\"",
     [](const Words& a) { return Words{"in " + joined(a) + "x"}; }},
    {"v=`printf '%s' 'in ${args}'; printf x`; printf '%s\\0' \"$v\"",
     [](const Words& a) { return Words{"in " + joined(a) + "x"}; }},
    {"v=$(w=`printf '%s' 'q ${args}'; printf x`; printf '%s' \"$w\"); printf '%s\\0' \"$v\"",
     [](const Words& a) { return Words{"q " + joined(a) + "x"}; }},
    {"bash -c 'printf \"%s\\0\" \"$@\"' bash ${args}", [](const Words& a) { return printed(a); }},
    {"f() { local v=${args}; export W=\"${args}\"; printf '%s\\0' \"$v\" \"$W\"; }; f",
     [](const Words& a) {
       return Words{joined(a), joined(a)};
     }},
    {"cat <<<${args}; printf '%s\\0' x", [](const Words& a) { return Words{joined(a) + "\nx"}; }},
    {"IFS= read -r w <<< ${args}; printf '%s\\0' \"$w\" 2>&1",
     [](const Words& a) {
       const std::string j = joined(a);
       return Words{j.substr(0, j.find('\n'))};  // read stops at the first line
     }},
    {"printf '%s\\0' ${args} \\\n  ${args}",
     [](const Words& a) {
       Words w = printed(a);
       for (const auto& v : printed(a)) w.push_back(v);
       return a.empty() ? Words{""} : w;
     }},
    {"printf '%s\\0' ${steps.train.outputs}/m.pt \"${steps.train.outputs}/m.pt\" '${steps.train.outputs}'",
     [](const Words&) {
       return Words{kOutputs + "/m.pt", kOutputs + "/m.pt", kOutputs};
     }},
    {"cat <<'EOF'\nliteral $HOME ${HOME}\nEOF\nprintf '%s\\0' ${args} # a comment's ${HOME}",
     [](const Words& a) {
       Words w = printed(a);
       w.front() = "literal $HOME ${HOME}\n" + w.front();
       return w;
     }},
};

const Words kHostile[] = {
    {"$(printf INJ)", "`printf INJ`", "'", "\"", "\\", "a\nb", "$HOME", "*", " two  spaces ", "\xff\xfe", ""},
    {"'\\''", "\\'", "\"'\"'\"", "x\n", "${HOME}", "$((1+1))", "}", ")", "$'\\x27'", "!", "~", "=ls", "-n"},
    {"it's \"$(printf INJ)\" `printf INJ` \\$x"},
    {},
};

}  // namespace

TEST_CASE("a template in every context of a shell script reaches the program as the value, in bash and sh",
          "[shell_text]") {
  for (const Case& c : kCases) {
    for (const Words& args : kHostile) {
      Step step;
      step.shell = true;
      step.script = c.script;
      const Words argv = expand_command(step, kLayout, args);
      INFO("script: " << c.script << "\nexpanded: " << argv.back());
      const Words meant = c.meant(args);
      CHECK(run({"bash", "-c", argv.back()}) == meant);
      if (c.script.find("<<<") == std::string::npos)
        CHECK(run({"sh", "-c", argv.back()}) == meant);  // bash's
      // The same script as a list run's -c word of bash.
      step.shell = false;
      step.argv = {"bash", "-euo", "pipefail", "-c", c.script, "name"};
      const Words listed = expand_command(step, kLayout, args);
      CHECK(listed[4] == argv.back());
      CHECK(run(listed) == meant);
    }
  }
}

TEST_CASE("templates where no quoting is safe are refused, with the reason", "[shell_text]") {
  const std::pair<std::string, std::string> refused[] = {
      {"echo $((${args} + 1))", "in arithmetic"},
      {"(( n = ${args} ))", "in arithmetic"},
      {"echo $[${args}]", "in arithmetic"},
      {"a[${args}]=1", "in an array subscript"},
      {"echo ${X:-${args}}", "inside the shell's ${...}"},
      {"echo \"${X:-${steps.train.outputs}}\"", "inside the shell's ${...}"},
      {"echo \"`echo ${args}`\"", "inside backquotes within double quotes"},
      {"echo `echo \\$x ${args}`", "inside backquotes that hold a backslash"},
      {"echo $'${args}'", "inside $'...'"},
      {"echo $\"${args}\"", "inside $\"...\""},
      {"echo hi # ${args}", "in a comment"},
      {"cat <<EOF\n${args}\nEOF", "in a here-document"},
      {"cat <<-'EOF'\n\t${args}\n\tEOF", "in a here-document"},
      {"cat <<${args}\nx\n", "in a here-document's delimiter"},
      {"echo \\${args}", "right after a backslash"},
      {"echo \"\\${args}\"", "right after a backslash"},
      {"v=$(case x in x) echo;; esac); echo ${args}", "after a 'case' inside $(...)"},
      {"echo ${X:-\"}\"} ${args}", "after a quote inside the shell's ${...}"},
      {"echo `echo 'x` ${args}", "after an unterminated single quote"},
      {"echo `echo \"x` ${args}", "after backquotes that close inside"},
      {"bash -c \"echo ${args}\"", "in the script of a shell that this script starts"},
      {"srun -N2 sh -euo pipefail -c 'python x.py ${args}' 2>&1",
       "in the script of a shell that this script starts"},
      {"x=$(timeout 9 /bin/bash -lc \"ls '${steps.train.outputs}'\")", "in the script of a shell"},
      {"eval \"echo ${args}\"", "in a word of eval"},
      {"eval echo ${args}", "in a word of eval"},
      {"ssh node1 ls ${steps.train.outputs}", "in a word of ssh"},
      {"alias x='echo ${args}'", "in a word of alias"},
      {"trap \"echo ${args}\" EXIT", "in a word of trap"},
      {"unset ${args}", "in a word of unset"},
      {"read -r ${args} < f", "in a word of read"},
      {"let n=${args}", "in a word of let"},
      {"[[ -v ${args} ]]", "in a word of [["},
      {"bash <<< \"echo ${args}\"", "in a here-string that a shell reads as its script"},
      {"ssh node1 <<<${args}", "in a here-string that a shell reads as its script"},
      {"bash -c 2>/dev/null \"echo ${args}\"", "in the script of a shell"},
      {"bash -c < in \"echo ${args}\"", "in the script of a shell"},
      {"test -v \"${args}\"", "in a word of test"},
      {"echo $'it\\'s' ${args}", "after a $'...' holding \\'"},
      {"bash-5.2 -c \"echo ${args}\"", "in the script of a shell"},
      {"declare -i n=${args}", "in a word of declare"},
      {"local -n ref=\"${args}\"", "in a word of local"},
      {"v=$\\\n(( ${args} ))", "in arithmetic"},
      {"v=\"$\\\n(( ${args} ))\"", "after a line continuation that joins two words"},
      {"v=$(ca\\\nse x in x) echo;; esac); echo ${args}", "after a line continuation"},
  };
  for (const auto& [script, why] : refused) {
    INFO(script);
    const ShellScan scan = scan_shell_text(script);
    REQUIRE(scan.refusal.has_value());
    CHECK(scan.refusal->reason.find(why) != std::string::npos);
    CHECK(script.substr(scan.refusal->offset, 2) == "${");
    CHECK(scan.templates.empty());
  }
}

TEST_CASE("shell text without templates, or with the shell's own ${...}, is never refused", "[shell_text]") {
  for (const char* script : {"echo $((1 + 2)) ${HOME} `date` $'a\\'b' # ${x}", "cat <<EOF\n${HOME}\nEOF\n",
                             "echo \"$(case x in x) echo;; esac)\"", "echo '", ""}) {
    INFO(script);
    const ShellScan scan = scan_shell_text(script);
    CHECK_FALSE(scan.refusal.has_value());
    CHECK(scan.templates.empty());
  }
  // `$${` is flowrun's escape: the shell reads a plain `${`, its own, and no
  // template starts there; the escape is undone in the text the shell gets.
  const ShellScan escaped = scan_shell_text("echo $${args} \"$${HOME:-x}\" $$${args} ${args}");
  REQUIRE_FALSE(escaped.refusal.has_value());
  CHECK(escaped.text == "echo ${args} \"${HOME:-x}\" $${args} ${args}");
  REQUIRE(escaped.templates.size() == 1);
  CHECK(escaped.text.substr(escaped.templates[0].offset) == "${args}");
  CHECK(escaped.templates[0].context == ShellContext::unquoted);
  // After a here-document's body, and after a comment, the text is a script again.
  const ShellScan after = scan_shell_text("cat <<'EOF' # ${HOME}\n$(\n'\nEOF\necho \"${args}\" ${args}");
  REQUIRE_FALSE(after.refusal.has_value());
  REQUIRE(after.templates.size() == 2);
  CHECK(after.templates[0].context == ShellContext::double_quoted);
  CHECK(after.templates[1].context == ShellContext::unquoted);
}

TEST_CASE("the script word of a shell program run with -c", "[shell_text]") {
  std::string other;
  CHECK(shell_script_word({"bash", "-c", "x"}) == 2u);
  CHECK(shell_script_word({"/bin/sh", "-euc", "x", "name", "${args}"}) == 2u);
  CHECK(shell_script_word({"bash", "-euo", "pipefail", "-lc", "x"}) == 4u);
  CHECK(shell_script_word({"env", "A=1", "bash", "--norc", "-o", "errexit", "-c", "x"}) == 7u);
  CHECK(shell_script_word({"timeout", "60", "zsh", "-c", "--", "x"}) == 5u);
  CHECK(shell_script_word({"bash", "script.sh", "-c", "x"}) == std::nullopt);
  CHECK(shell_script_word({"python3", "-c", "x"}) == std::nullopt);
  CHECK(shell_script_word({"/opt/bin/bash5.2", "-c", "x"}) == 2u);
  CHECK(shell_script_word({"zsh-5.9", "-c", "x"}) == 2u);
  CHECK(shell_script_word({"bash", "-c"}) == std::nullopt);
  CHECK(shell_script_word({"fish", "-c", "x"}, &other) == 2u);
  CHECK(other == "fish");
  CHECK(shell_script_word({"bash", "-c", "x"}, &other) == 2u);
  CHECK(other.empty());
  CHECK(rereading_program({"ssh", "-p", "22", "node1", "ls"}) == 0u);
  CHECK(rereading_program({"timeout", "9", "/usr/bin/ssh", "node1", "ls"}) == 2u);
  CHECK(rereading_program({"su", "-c", "ls", "bob"}) == 0u);
  CHECK(rereading_program({"python3", "train.py"}) == std::nullopt);
}
