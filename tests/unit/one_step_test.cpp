// The one-step spec of flowrun run and flowrun init (lib/cli/one_step.h):
// its text, and every hostile script name and argument read back as given.
#include "one_step.h"

#include <catch2/catch.hpp>

#include "flowrun/plan.h"
#include "flowrun/spec.h"

using namespace flowrun;

namespace {

OneStepSpec one_step(std::vector<std::string> argv, std::string name = "train") {
  OneStepSpec spec;
  spec.name = std::move(name);
  spec.argv = std::move(argv);
  spec.why = "--cpus 2";
  spec.parallel = {{"cpus", "2"}};
  spec.collect_all = true;
  return spec;
}

}  // namespace

TEST_CASE("one_step_spec_text writes the step", "[one_step]") {
  OneStepSpec spec = one_step({"python3", "null.py", "y=${args}", "a\nb: c", "\xff"}, "null");
  spec.timeout = "1h";
  CHECK(one_step_spec_text(spec) ==
        "# flowrun run: python3 null.py 'y=${args}' 'a\\nb: c' '\\xff'\n"
        "name: \"null\"\n"
        "steps:\n"
        "  - name: \"null\"\n"
        "    run: [\"python3\", \"null.py\", \"y=$${args}\", \"a\\nb: c\", !!binary \"/w==\"]\n"
        "    timeout: \"1h\"\n"
        "    # --cpus 2\n"
        "    parallel:\n"
        "      cpus: 2\n"
        "    collect: all\n");
}

TEST_CASE("one_step_spec_text: the workers run the command line as given, byte for byte", "[one_step]") {
  const std::vector<std::string> hostile = {"",
                                            " ",
                                            "null",
                                            "~",
                                            "true",
                                            "1e3",
                                            "- x",
                                            ":",
                                            "a: b",
                                            "#",
                                            "x #y",
                                            "'",
                                            "\"",
                                            "\\",
                                            "a\nb",
                                            "\r\n",
                                            "\t",
                                            "[a]",
                                            "{a: b}",
                                            "&a",
                                            "*a",
                                            "!!binary",
                                            "---",
                                            "|",
                                            "${args}",
                                            "y=${args}",
                                            "lr=${args.lr}",
                                            "sched.total=${steps.max}",
                                            "$${args}",
                                            "${",
                                            "$",
                                            "${HOME}",
                                            "\x01\x1b[31m\x7f",
                                            "\xc2\x85",
                                            "\xe2\x80\xa8",
                                            "\xef\xbb\xbf",
                                            "\xff",
                                            "a\xff${args}",
                                            "\xed\xa0\x80"};
  // Each as an argument, and as the script's path (the step's name is the script's, made safe).
  for (const std::string& word : hostile) {
    for (const auto& argv : {std::vector<std::string>{"python3", "train.py", word, "${args}"},
                             std::vector<std::string>{"python3", word + "/x.py", word}}) {
      const std::string text = one_step_spec_text(one_step(argv, "null"));
      INFO(text);
      SpecParse parsed = parse_spec(text, "flowrun run", "/w");
      REQUIRE(parsed.diagnostics.empty());
      CHECK(parsed.spec->name == "null");
      CHECK(parsed.spec->steps.size() == 1);
      CHECK(expand_command(parsed.spec->steps[0], RunLayout{"/w/r"}, {"extra"}) == argv);
    }
  }
}
