// Tests of parse_spec() and find_placeholders(): every rule of docs/spec.md,
// with the exact diagnostics a user sees.

#include "flowrun/spec.h"

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "flowrun/plan.h"
#include "flowrun/util.h"

#include "testing.h"

using namespace flowrun;

namespace {

// Lets specs be written indented in the source: drops the first newline and
// the smallest indentation of the non-blank lines.
std::string dedent(std::string_view text) {
  if (!text.empty() && text.front() == '\n') text.remove_prefix(1);
  std::size_t indent = std::string::npos;
  for (std::size_t at = 0; at < text.size();) {
    std::size_t end = std::min(text.find('\n', at), text.size());
    std::string_view line = text.substr(at, end - at);
    std::size_t first = line.find_first_not_of(' ');
    if (first != std::string_view::npos) indent = std::min(indent, first);
    at = end + 1;
  }
  std::string out;
  for (std::size_t at = 0; at < text.size();) {
    std::size_t end = std::min(text.find('\n', at), text.size());
    std::string_view line = text.substr(at, end - at);
    out += line.size() > indent ? line.substr(indent) : std::string_view();
    out += '\n';
    at = end + 1;
  }
  return out;
}

SpecParse parse(std::string_view text) { return parse_spec(dedent(text), "flow.yaml", "/work/proj"); }

// The diagnostics as a user sees them, one string each.
std::vector<std::string> errors(std::string_view text) {
  std::vector<std::string> out;
  for (const auto& d : parse(text).diagnostics) out.push_back(d.to_string());
  return out;
}

using Lines = std::vector<std::string>;

// Parses text that must be valid.
Spec valid(std::string_view text) {
  SpecParse result = parse(text);
  INFO((result.diagnostics.empty() ? std::string() : result.diagnostics.front().to_string()));
  REQUIRE(result.diagnostics.empty());
  REQUIRE(result.spec.has_value());
  return std::move(*result.spec);
}

std::vector<std::string> order_names(const Spec& spec) {
  std::vector<std::string> out;
  for (std::size_t i : spec.order) out.push_back(spec.steps[i].name);
  return out;
}

}  // namespace

TEST_CASE("a diagnostic carries file, position, path and message", "[spec]") {
  SpecParse result = parse(R"(
    steps:
      - name: train
        run: python train.py
        parallel:
          gpus: many
  )");
  REQUIRE_FALSE(result.spec.has_value());
  REQUIRE(result.diagnostics.size() == 1);
  const Diagnostic& d = result.diagnostics[0];
  CHECK(d.file == "flow.yaml");
  CHECK(d.loc == Location{5, 13});
  CHECK(d.path == "steps.train.parallel.gpus");
  CHECK(d.message ==
        "expected 'all', a positive whole number or a list of GPU ids like [0, 1], got a string 'many'");
}

TEST_CASE("a minimal spec gets its defaults", "[spec]") {
  Spec spec = valid(R"(
    steps:
      - name: hello
        run: echo hello
  )");
  CHECK(spec.file == "flow.yaml");
  CHECK(spec.dir == "/work/proj");
  CHECK(spec.name == "flow");
  CHECK(spec.workdir == "/work/proj");
  REQUIRE(spec.steps.size() == 1);
  const Step& step = spec.steps[0];
  CHECK(step.name == "hello");
  CHECK(step.loc == Location{2, 5});
  CHECK(step.run_loc == Location{3, 10});
  CHECK(step.argv == std::vector<std::string>{"echo", "hello"});
  CHECK(step.script.empty());
  CHECK_FALSE(step.shell);
  CHECK(step.workdir == "/work/proj");
  CHECK(step.needs.empty());
  CHECK_FALSE(step.timeout_s.has_value());
  CHECK_FALSE(step.is_parallel());
  CHECK(step.join.empty());
  CHECK_FALSE(spec.cluster.has_value());
  CHECK(spec.order == std::vector<std::size_t>{0});
  CHECK(spec.find_step("hello") == &spec.steps[0]);
  CHECK(spec.find_step("nope") == nullptr);
}

TEST_CASE("the flow name defaults to the file's stem, made safe for a run id", "[spec]") {
  const std::string text = "steps: [{name: a, run: x}]\n";
  CHECK(parse_spec(text, "train.yaml", "/p").spec->name == "train");
  CHECK(parse_spec(text, "dir/my train.v2.yml", "/p").spec->name == "my-train.v2");
  CHECK(parse_spec(text, "_x.yaml", "/p").spec->name == "flow_x");
  CHECK(valid("name: nightly-7\nsteps: [{name: a, run: x}]\n").name == "nightly-7");
  CHECK(errors("name: my flow\nsteps: [{name: a, run: x}]\n") ==
        Lines{"flow.yaml:1:7: name: invalid flow name 'my flow'; expected letters, digits, '.', '_' and '-', "
              "starting with a letter or digit"});
}

TEST_CASE("run: a list is argv as written, a string is split as sh does", "[spec]") {
  Spec spec = valid(R"(
    steps:
      - name: a
        run: [python, "train.py", --name, "two words", "", '${HOME}']
      - name: b
        run: python -c 'print("hi there")' --lr=0.1 "a b"\ c
      - name: c
        run: 42
  )");
  CHECK(spec.steps[0].argv ==
        std::vector<std::string>{"python", "train.py", "--name", "two words", "", "${HOME}"});
  CHECK(spec.steps[1].argv ==
        std::vector<std::string>{"python", "-c", "print(\"hi there\")", "--lr=0.1", "a b c"});
  CHECK(spec.steps[2].argv == std::vector<std::string>{"42"});
}

TEST_CASE("python: replaces a leading python or python3, and nothing else", "[spec]") {
  Spec spec = valid(R"(
    python: venv/bin/python3
    steps:
      - name: a
        run: python3 train.py
      - name: b
        run: [python, -m, pkg]
      - name: c
        run: echo python3
      - name: d
        shell: true
        run: python3 x.py
      - name: e
        run: python3.11 y.py
  )");
  CHECK(spec.python == "/work/proj/venv/bin/python3");
  CHECK(spec.steps[0].argv == std::vector<std::string>{"/work/proj/venv/bin/python3", "train.py"});
  CHECK(spec.steps[1].argv == std::vector<std::string>{"/work/proj/venv/bin/python3", "-m", "pkg"});
  CHECK(spec.steps[2].argv == std::vector<std::string>{"echo", "python3"});
  CHECK(spec.steps[3].script == "python3 x.py");
  CHECK(spec.steps[4].argv == std::vector<std::string>{"python3.11", "y.py"});
  // --python: a bare name stays a name for PATH.
  use_python(spec, python_path("python3.12", "/elsewhere"));
  CHECK(spec.steps[0].argv.front() == "python3.12");
  CHECK(spec.steps[2].argv.front() == "echo");
  CHECK(errors(R"(
    python: ""
    steps: [{name: a, run: x}]
  )") == Lines{"flow.yaml:1:9: python: expected a Python interpreter (a path, or a name looked up on PATH), "
               "got an empty string"});
}

TEST_CASE("run with shell: true is a script", "[spec]") {
  Spec spec = valid(R"(
    steps:
      - name: a
        shell: true
        run: |
          for i in 1 2; do echo $i; done
          cd data && ls | wc -l
  )");
  const Step& step = spec.steps[0];
  CHECK(step.shell);
  CHECK(step.argv.empty());
  CHECK(step.script == "for i in 1 2; do echo $i; done\ncd data && ls | wc -l\n");
  CHECK(valid("steps: [{name: a, run: 'x y', shell: false}]").steps[0].argv ==
        std::vector<std::string>{"x", "y"});
}

TEST_CASE("run problems", "[spec]") {
  CHECK(errors(R"(
    steps:
      - name: a
      - name: b
        run: ""
      - name: c
        run: []
      - name: d
        run:
      - name: e
        run: [python, [x], {a: 1}]
      - name: f
        run: python -c 'oops
      - name: g
        run: ["", x]
      - name: h
        shell: true
        run: [echo, hi]
      - name: i
        shell: true
        run: "  "
      - name: j
        shell: yes
        run: [whatever, "${steps.x}"]
      - name: k
        run: {cmd: x}
  )") == Lines{
             "flow.yaml:2:5: steps.a: missing required key 'run' (the command to run)",
             "flow.yaml:4:10: steps.b.run: expected a command (a string or a list of words), got an empty "
             "string",
             "flow.yaml:6:10: steps.c.run: expected a command (a string or a list of words), got an empty "
             "sequence",
             "flow.yaml:8:5: steps.d.run: expected a command (a string or a list of words), got nothing",
             "flow.yaml:10:19: steps.e.run: expected a word (a string), got a sequence",
             "flow.yaml:10:24: steps.e.run: expected a word (a string), got a mapping",
             "flow.yaml:12:10: steps.f.run: cannot split into words: unterminated single quote; fix the "
             "quoting or "
             "write a list of words",
             "flow.yaml:14:10: steps.g.run: the program (the first word) is empty; expected a program name "
             "or path",
             "flow.yaml:17:10: steps.h.run: expected a script (a string) with 'shell: true', got a sequence",
             "flow.yaml:20:10: steps.i.run: expected a non-empty script, got a string '  '",
             "flow.yaml:22:12: steps.j.shell: expected true or false, got a string 'yes'",
             "flow.yaml:25:10: steps.k.run: expected a command (a string or a list of words), got a mapping",
         });
}

TEST_CASE("run: the word splitter's problems are reported as it states them", "[spec]") {
  CHECK(errors("steps: [{name: a, run: 'echo \\'}, {name: b, run: 'echo \"x'}]\n") ==
        Lines{"flow.yaml:1:24: steps.a.run: cannot split into words: trailing backslash; fix the quoting or "
              "write "
              "a list of words",
              "flow.yaml:1:50: steps.b.run: cannot split into words: unterminated double quote; fix the "
              "quoting or "
              "write a list of words"});
}

TEST_CASE("needs defaults to the previous step; needs: [] means none", "[spec]") {
  Spec spec = valid(R"(
    steps:
      - name: a
        run: x
      - name: b
        run: x
      - name: c
        needs: []
        run: x
      - name: d
        needs: a
        run: x
      - name: e
        needs: [d, b, d]
        run: x
  )");
  CHECK(spec.steps[0].needs.empty());
  CHECK(spec.steps[1].needs == std::vector<std::string>{"a"});
  CHECK(spec.steps[2].needs.empty());
  CHECK(spec.steps[3].needs == std::vector<std::string>{"a"});
  CHECK(spec.steps[4].needs == std::vector<std::string>{"d", "b"});
  CHECK(order_names(spec) == std::vector<std::string>{"a", "b", "c", "d", "e"});
}

TEST_CASE("needs problems", "[spec]") {
  CHECK(errors(R"(
    steps:
      - name: a
        run: x
        needs:
      - name: b
        run: x
        needs: [a, [a], {x: 1}]
      - name: c
        run: x
        needs: {a: 1}
  )") == Lines{
             "flow.yaml:4:5: steps.a.needs: expected a step name or a list of step names, got nothing; write "
             "'needs: []' for none",
             "flow.yaml:7:16: steps.b.needs: expected a step name, got a sequence",
             "flow.yaml:7:21: steps.b.needs: expected a step name, got a mapping",
             "flow.yaml:10:12: steps.c.needs: expected a step name or a list of step names, got a mapping",
         });
}

TEST_CASE("messages stay on one line and short", "[spec]") {
  CHECK(
      errors("name: \"a\\tb\\nc\\x01\"\nsteps: [{name: a, run: x}]\n") ==
      Lines{"flow.yaml:1:7: name: invalid flow name 'a\\tb\\nc\\x01'; expected letters, digits, '.', '_' and "
            "'-', starting with a letter or digit"});
  CHECK(errors("steps: [{name: a, run: x, shell: " + std::string(100, 'y') + "}]\n") ==
        Lines{"flow.yaml:1:34: steps.a.shell: expected true or false, got a string "
              "'yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy...'"});
}

TEST_CASE("the order puts dependencies first and otherwise keeps file order", "[spec]") {
  Spec spec = valid(R"(
    steps:
      - name: report
        needs: [train, eval]
        run: x
      - name: eval
        needs: train
        run: x
      - name: lint
        needs: []
        run: x
      - name: train
        needs: []
        run: x
  )");
  CHECK(order_names(spec) == std::vector<std::string>{"lint", "train", "eval", "report"});
}

TEST_CASE("join: runs after its parallel step, which it implicitly needs", "[spec]") {
  Spec spec = valid(R"(
    steps:
      - name: train
        run: python train.py
        parallel: {gpus: 2}
      - name: other
        needs: []
        run: x
      - name: eval
        join: train
        run: python eval.py ${steps.train.outputs}/model.pt
      - name: again
        needs: [train]
        join: train
        run: x
  )");
  const Step& eval = spec.steps[2];
  CHECK(eval.join == "train");
  CHECK(eval.join_loc == Location{9, 11});
  CHECK(eval.needs == std::vector<std::string>{"other", "train"});
  CHECK(spec.steps[3].needs == std::vector<std::string>{"train"});
  CHECK(eval.argv == std::vector<std::string>{"python", "eval.py", "${steps.train.outputs}/model.pt"});
  CHECK(order_names(spec) == std::vector<std::string>{"train", "other", "eval", "again"});
}

TEST_CASE("graph problems", "[spec]") {
  CHECK(
      errors(R"(
    steps:
      - name: prep
        run: x
      - name: train
        run: x
        parallel:
      - name: eval
        join: trian
        run: x
      - name: eval2
        join: prep
        run: x
      - name: both
        parallel: {}
        join: train
        needs: [prep, trian, nothing_like_it]
        run: x
      - name: prep
        run: x
  )") ==
      Lines{
          "flow.yaml:8:11: steps.eval.join: no step named 'trian'; did you mean 'train'?",
          "flow.yaml:11:11: steps.eval2.join: cannot join 'prep': it is not a parallel step; expected the "
          "name "
          "of a step with 'parallel:'",
          "flow.yaml:15:5: steps.both.join: a step cannot both join and be parallel: a join step runs once, "
          "after the parallel step; remove 'join' or 'parallel'",
          "flow.yaml:16:19: steps.both.needs: no step named 'trian'; did you mean 'train'?",
          "flow.yaml:16:26: steps.both.needs: no step named 'nothing_like_it'",
          "flow.yaml:18:11: steps[5].name: duplicate step name 'prep' (first defined at line 2); step names "
          "must be unique",
      });
}

TEST_CASE("a cycle is reported once, at its first step, with its path", "[spec]") {
  CHECK(errors(R"(
    steps:
      - name: a
        needs: c
        run: x
      - name: b
        run: x
      - name: c
        run: x
      - name: self
        needs: [self]
        run: x
      - name: d
        needs: [e]
        run: x
      - name: e
        needs: [d, a]
        run: x
  )") == Lines{
             "flow.yaml:2:5: steps.a: dependency cycle a -> c -> b -> a (each step needs the next); remove "
             "one of "
             "these needs",
             "flow.yaml:9:5: steps.self: dependency cycle self -> self (each step needs the next); remove "
             "one of "
             "these needs",
             "flow.yaml:12:5: steps.d: dependency cycle d -> e -> d (each step needs the next); remove one "
             "of these "
             "needs",
         });
}

TEST_CASE("step names", "[spec]") {
  CHECK(valid("steps: [{name: A-1_b, run: x}, {name: '9lives', run: x}]").steps[1].name == "9lives");
  CHECK(errors(R"(
    steps:
      - name: -x
        run: x
      - name: "a b"
        run: x
      - name: [a]
        run: x
      - run: x
        shell: nope
      - name: c
        needs: ["a b", -x]
        run: ${steps.-x.outputs}
  )") == Lines{
             "flow.yaml:2:11: steps[0].name: invalid step name '-x'; expected letters, digits, '_' and '-', "
             "starting with a letter or digit",
             "flow.yaml:4:11: steps[1].name: invalid step name 'a b'; expected letters, digits, '_' and '-', "
             "starting with a letter or digit",
             "flow.yaml:6:11: steps[2].name: expected a step name (a string), got a sequence",
             "flow.yaml:8:5: steps[3]: missing required key 'name' (the step's name)",
             "flow.yaml:9:12: steps[3].shell: expected true or false, got a string 'nope'",
             "flow.yaml:12:10: steps.c.run: malformed template '${steps.-x.outputs}'; expected "
             "'${steps.NAME.outputs}'",
         });
}

TEST_CASE("steps must be a non-empty list of mappings", "[spec]") {
  CHECK(errors("name: x\n") ==
        Lines{"flow.yaml:1:1: missing required key 'steps' (the list of steps to run)"});
  CHECK(errors("steps: []\n") ==
        Lines{"flow.yaml:1:8: steps: expected a non-empty list of steps, got an empty "
              "sequence"});
  CHECK(errors("steps:\n") == Lines{"flow.yaml:1:1: steps: expected a non-empty list of steps, got nothing"});
  CHECK(errors("steps: {a: 1}\n") ==
        Lines{"flow.yaml:1:8: steps: expected a non-empty list of steps, got a mapping"});
  CHECK(
      errors("steps: [train, 3, ~]\n") ==
      Lines{
          "flow.yaml:1:9: steps[0]: expected a step (a mapping with 'name' and 'run'), got a string 'train'",
          "flow.yaml:1:16: steps[1]: expected a step (a mapping with 'name' and 'run'), got 3",
          "flow.yaml:1:19: steps[2]: expected a step (a mapping with 'name' and 'run'), got nothing"});
}

TEST_CASE("unknown keys get a suggestion or the list of keys", "[spec]") {
  CHECK(
      errors(R"(
    nmae: x
    stesp: []
    run: x
    workdri: x
    <<: {a: 1}
    steps:
      - name: a
        run: x
        neds: b
        gpus: 2
        command: x
        parallel:
          gpu: 2
          outputs: x
          hosts: [a]
          foo: 1
    cluster:
      engine: manual
      nodes: 2
      host: [a]
    settings: {}
  )") ==
      Lines{
          "flow.yaml:1:1: unknown key 'nmae'; did you mean 'name'?",
          "flow.yaml:2:1: unknown key 'stesp'; did you mean 'steps'?",
          "flow.yaml:3:1: key 'run' does not belong here; put it in a step, under 'steps:'",
          "flow.yaml:4:1: unknown key 'workdri'; did you mean 'workdir'?",
          "flow.yaml:5:1: YAML merge keys ('<<') are not supported; write the keys out",
          "flow.yaml:9:5: steps.a: unknown key 'neds'; did you mean 'needs'?",
          "flow.yaml:10:5: steps.a: key 'gpus' does not belong here; put it under 'parallel:'",
          "flow.yaml:11:5: steps.a: unknown key 'command'; expected one of: name, run, shell, env, workdir, "
          "needs, timeout, stall_timeout, parallel, outputs, inputs, collect, join, logs, forensics",
          "flow.yaml:13:7: steps.a.parallel: unknown key 'gpu'; did you mean 'gpus'?",
          "flow.yaml:14:7: steps.a.parallel: key 'outputs' does not belong here; put it in the step, next to "
          "'parallel:'",
          "flow.yaml:15:7: steps.a.parallel: key 'hosts' does not belong here; put it under the top-level "
          "'cluster:'",
          "flow.yaml:16:7: steps.a.parallel: unknown key 'foo'; expected one of: gpus, nodes, "
          "procs_per_node, "
          "cpus, max_restarts, restart, visible_devices, preflight, role, job_id, spare_nodes, node_checks",
          "flow.yaml:19:3: cluster: key 'nodes' does not belong here; put it under a step's 'parallel:'",
          "flow.yaml:20:3: cluster: unknown key 'host'; did you mean 'hosts'?",
          "flow.yaml:21:1: unknown key 'settings'; expected one of: name, env, workdir, python, steps, "
          "cluster",
      });
}

TEST_CASE("duplicate keys are an error at every level", "[spec]") {
  CHECK(errors(R"(
    name: a
    name: b
    env:
      X: 1
      X: 2
    steps:
      - name: a
        run: x
        run: y
        parallel:
          gpus: 2
          gpus: 4
    cluster:
      engine: slurm
      engine: ssh
  )") ==
        Lines{
            "flow.yaml:2:1: duplicate key 'name' (first at line 1); YAML keeps only one of them",
            "flow.yaml:5:3: env: duplicate key 'X' (first at line 4); YAML keeps only one of them",
            "flow.yaml:9:5: steps.a: duplicate key 'run' (first at line 8); YAML keeps only one of them",
            "flow.yaml:12:7: steps.a.parallel: duplicate key 'gpus' (first at line 11); YAML keeps only one "
            "of them",
            "flow.yaml:15:3: cluster: duplicate key 'engine' (first at line 14); YAML keeps only one of them",
        });
  CHECK(
      errors("steps: [{name: a, run: x, name: b}]\n") ==
      Lines{"flow.yaml:1:27: steps.a: duplicate key 'name' (first at line 1); YAML keeps only one of them"});
}

TEST_CASE("keys must be strings", "[spec]") {
  CHECK(errors("? [a]\n: 1\nsteps: [{name: a, run: x}]\n") ==
        Lines{"flow.yaml:1:3: expected a key name, got a sequence"});
}

TEST_CASE("env keeps spec order and turns values into text", "[spec]") {
  Spec spec = valid(R"(
    env:
      ZED: last
      ALPHA: 1
      EMPTY:
      FLAG: true
      RATIO: 0.5
      OMP_NUM_THREADS: 8
    steps:
      - name: a
        run: x
        env: {B: "2", A: '1'}
      - name: b
        run: x
        env:
  )");
  CHECK(spec.env == EnvList{{"ZED", "last"},
                            {"ALPHA", "1"},
                            {"EMPTY", ""},
                            {"FLAG", "true"},
                            {"RATIO", "0.5"},
                            {"OMP_NUM_THREADS", "8"}});
  CHECK(spec.steps[0].env == EnvList{{"B", "2"}, {"A", "1"}});
  CHECK(spec.steps[1].env.empty());
}

TEST_CASE("env problems, and variables flowrun sets", "[spec]") {
  CHECK(
      errors(R"(
    env:
      CUDA_VISIBLE_DEVICES: 0,1
      1X: a
      A-B: a
      LIST: [1, 2]
      MAP: {a: 1}
    steps:
      - name: a
        run: x
        env:
          RANK: 0
          TORCHELASTIC_MAX_RESTARTS: 3
          NCCL_ASYNC_ERROR_HANDLING: 0
      - name: b
        run: x
        env: [A=1]
  )") ==
      Lines{
          "flow.yaml:2:3: env.CUDA_VISIBLE_DEVICES: flowrun sets CUDA_VISIBLE_DEVICES for every worker; "
          "select "
          "GPUs with parallel.gpus",
          "flow.yaml:3:3: env: invalid variable name '1X'; expected letters, digits and '_', not starting "
          "with a "
          "digit",
          "flow.yaml:4:3: env: invalid variable name 'A-B'; expected letters, digits and '_', not starting "
          "with "
          "a digit",
          "flow.yaml:5:9: env.LIST: expected a value (a string, number or boolean), got a sequence",
          "flow.yaml:6:8: env.MAP: expected a value (a string, number or boolean), got a mapping",
          "flow.yaml:11:7: steps.a.env.RANK: flowrun sets RANK for every worker; remove it from env",
          "flow.yaml:12:7: steps.a.env.TORCHELASTIC_MAX_RESTARTS: flowrun sets TORCHELASTIC_MAX_RESTARTS for "
          "every worker; set parallel.max_restarts",
          "flow.yaml:16:10: steps.b.env: expected a mapping of variable names to values, got a sequence",
      });
}

TEST_CASE("workdir is resolved against the spec's directory, a step's against the spec's workdir", "[spec]") {
  Spec spec = valid(R"(
    workdir: ../proj2/./run/
    steps:
      - name: a
        run: x
      - name: b
        workdir: sub/../data
        run: x
      - name: c
        workdir: /abs/dir/
        run: x
  )");
  CHECK(spec.workdir == "/work/proj2/run");
  CHECK(spec.steps[0].workdir == "/work/proj2/run");
  CHECK(spec.steps[1].workdir == "/work/proj2/run/data");
  CHECK(spec.steps[2].workdir == "/abs/dir");
  CHECK(valid("workdir: .\nsteps: [{name: a, run: x}]").workdir == "/work/proj");
  CHECK(errors("workdir: ''\nsteps: [{name: a, run: x, workdir: [a]}]\n") ==
        Lines{"flow.yaml:1:10: workdir: expected a directory path, got an empty string",
              "flow.yaml:2:36: steps.a.workdir: expected a directory path, got a sequence"});
}

TEST_CASE("stall_timeout: a duration written like timeout, in a step", "[spec]") {
  auto stall = [](const std::string& value) {
    return valid("steps: [{name: a, run: x, stall_timeout: " + value + "}]").steps[0].stall_timeout_s.value();
  };
  CHECK(stall("90") == 90);
  CHECK(stall("2.5") == 2.5);
  CHECK(stall("5m") == 300);
  CHECK(stall("1h30m") == 5400);
  CHECK(stall("500ms") == 0.5);
  CHECK_FALSE(valid("steps: [{name: a, run: x, timeout: 1h}]").steps[0].stall_timeout_s.has_value());
  const Spec parallel =
      valid("steps: [{name: a, run: x, stall_timeout: 10m, timeout: 12h, parallel: {cpus: 2}}]");
  CHECK(parallel.steps[0].stall_timeout_s == 600);
  CHECK(parallel.steps[0].timeout_s == 43200);
  CHECK(errors(R"(steps:
  - name: a
    run: x
    stall_timeout: 0
  - name: b
    run: x
    stall_timeout: 1 minute
  - name: c
    run: x
    stall_timeout: 400d
  - name: d
    run: x
    stall_timeout: -3
)") == Lines{"flow.yaml:4:20: steps.a.stall_timeout: expected a positive duration: seconds (90) or a string "
             "like "
             "'90s', '30m', '1h30m' or '2d', got 0",
             "flow.yaml:7:20: steps.b.stall_timeout: expected a positive duration: seconds (90) or a string "
             "like "
             "'90s', '30m', '1h30m' or '2d', got a string '1 minute'",
             "flow.yaml:10:20: steps.c.stall_timeout: expected a duration up to 365d, got a string '400d'",
             "flow.yaml:13:20: steps.d.stall_timeout: expected a positive duration: seconds (90) or a string "
             "like "
             "'90s', '30m', '1h30m' or '2d', got -3"});
  CHECK(errors("steps: [{name: a, run: x, parallel: {stall_timeout: 5}}]") ==
        Lines{"flow.yaml:1:38: steps.a.parallel: key 'stall_timeout' does not belong here; put it in the "
              "step, next "
              "to 'parallel:'"});
  CHECK(errors("stall_timeout: 5\nsteps: [{name: a, run: x}]") ==
        Lines{"flow.yaml:1:1: key 'stall_timeout' does not belong here; put it in a step, under 'steps:'"});
  CHECK(errors("steps: [{name: a, run: x, stall_timout: 5}]") ==
        Lines{"flow.yaml:1:27: steps.a: unknown key 'stall_timout'; did you mean 'stall_timeout'?"});
}

TEST_CASE("timeout: seconds or a duration with units", "[spec]") {
  auto timeout = [](const std::string& value) {
    return valid("steps: [{name: a, run: x, timeout: " + value + "}]").steps[0].timeout_s.value();
  };
  CHECK(timeout("90") == 90);
  CHECK(timeout("1.5") == 1.5);
  CHECK(timeout("90s") == 90);
  CHECK(timeout("30m") == 1800);
  CHECK(timeout("2h") == 7200);
  CHECK(timeout("1h30m") == 5400);
  CHECK(timeout("1d2h3m4s") == 93784);
  CHECK(timeout("'1.5h'") == 5400);
  CHECK(timeout("365d") == 365 * 86400);
  CHECK(timeout("500ms") == 0.5);
  CHECK(timeout("1m30s500ms") == 90.5);
  for (const char* bad :
       {"0",    "0s",   "-5",  "1h1h", "30m1h", "1x",   "h",   "1.5.2s", "1 h",   ".5", "5.",
        ".nan", ".inf", "1e3", "0x10", "1h30",  "true", "0ms", "1ms1s",  "1msms", "ms", "1mss"}) {
    INFO(bad);
    auto got = errors(std::string("steps: [{name: a, run: x, timeout: ") + bad + "}]");
    REQUIRE(got.size() == 1);
    CHECK_THAT(got[0],
               Catch::StartsWith("flow.yaml:1:36: steps.a.timeout: expected a positive duration: seconds "
                                 "(90) or a string like '90s', '30m', '1h30m' or '2d', got "));
  }
  // A number-like word is shown as written, anything else quoted, so a value
  // that only starts like an octal or hex number never breaks the message's line.
  CHECK(errors("steps: [{name: a, run: x, timeout: 0x1F}]") ==
        Lines{"flow.yaml:1:36: steps.a.timeout: expected a positive duration: seconds (90) or a string like "
              "'90s', '30m', '1h30m' or '2d', got 0x1F"});
  CHECK(errors("steps: [{name: a, run: x, timeout: \"0ozz\\nz\"}]") ==
        Lines{"flow.yaml:1:36: steps.a.timeout: expected a positive duration: seconds (90) or a string like "
              "'90s', '30m', '1h30m' or '2d', got a string '0ozz\\nz'"});
  CHECK(errors("steps: [{name: a, run: x, timeout: 366d}]") ==
        Lines{"flow.yaml:1:36: steps.a.timeout: expected a duration up to 365d, got a string '366d'"});
  CHECK(errors("steps: [{name: a, run: x, timeout: 99999999999999999999999999999999999999999999}]") ==
        Lines{"flow.yaml:1:36: steps.a.timeout: expected a duration up to 365d, got "
              "'9999999999999999999999999999999999999999...'"});
}

TEST_CASE("parallel: defaults, and where each value came from", "[spec]") {
  Spec spec = valid(R"(
    steps:
      - name: a
        run: x
        parallel:
      - name: b
        run: x
        parallel: {}
      - name: c
        run: x
        parallel:
          gpus: 8
          nodes: 2
          procs_per_node: auto
          max_restarts: 3
          visible_devices: process
        outputs: checkpoints/*.pt
        collect: all
  )");
  for (std::size_t i : {0, 1}) {
    const Step& step = spec.steps[i];
    REQUIRE(step.is_parallel());
    const ParallelSpec& p = *step.parallel;
    Location key{static_cast<int>(4 + 3 * i), 5};
    CHECK(p.loc == key);
    CHECK(p.gpus.kind == GpuRequest::Kind::all);
    CHECK_FALSE(p.gpus.is_set);
    CHECK(p.gpus.loc == key);
    CHECK(p.nodes.is_auto());
    CHECK(p.nodes.loc == key);
    CHECK(p.procs_per_node.is_auto());
    CHECK(p.procs_per_node.loc == key);
    CHECK_FALSE(p.cpus.has_value());
    CHECK(p.cpus_loc == key);
    CHECK(p.max_restarts == 0);
    CHECK(p.visible_devices == Visibility::node);
    CHECK(step.collect == Collect::rank0);
    CHECK(step.outputs.empty());
  }
  const Step& c = spec.steps[2];
  const ParallelSpec& p = *c.parallel;
  CHECK(p.loc == Location{10, 5});
  CHECK(p.gpus.kind == GpuRequest::Kind::count);
  CHECK(p.gpus.count == 8);
  CHECK(p.gpus.is_set);
  CHECK(p.gpus.loc == Location{11, 13});
  CHECK(p.nodes.value == 2);
  CHECK(p.nodes.loc == Location{12, 14});
  CHECK(p.procs_per_node.is_auto());
  CHECK(p.procs_per_node.loc == Location{13, 23});
  CHECK(p.max_restarts == 3);
  CHECK(p.visible_devices == Visibility::process);
  CHECK(c.outputs == std::vector<std::string>{"checkpoints/*.pt"});
  CHECK(c.collect == Collect::all);
}

TEST_CASE("parallel.role and parallel.job_id: names on one line, ROLE_NAME and TORCHELASTIC_RUN_ID",
          "[spec]") {
  const ParallelSpec p =
      *valid("steps: [{name: a, run: x, parallel: {role: trainer, job_id: exp-42}}]").steps[0].parallel;
  CHECK(p.role == "trainer");
  CHECK(p.job_id == "exp-42");
  const ParallelSpec defaults = *valid("steps: [{name: a, run: x, parallel: {}}]").steps[0].parallel;
  CHECK(defaults.role == "default");
  CHECK(defaults.job_id.empty());
  CHECK(
      errors(R"(
    steps:
      - name: a
        run: x
        parallel: {role: "", job_id: [1]}
        env: {ROLE_NAME: x, TORCHELASTIC_RUN_ID: y}
  )") ==
      std::vector<std::string>{
          "flow.yaml:4:22: steps.a.parallel.role: expected a name of 1 to 1000 characters on one line (it "
          "becomes every worker's ROLE_NAME), got an empty string",
          "flow.yaml:4:34: steps.a.parallel.job_id: expected a name (it becomes every worker's "
          "TORCHELASTIC_RUN_ID), got a sequence",
          "flow.yaml:5:11: steps.a.env.ROLE_NAME: flowrun sets ROLE_NAME for every worker; set parallel.role",
          "flow.yaml:5:25: steps.a.env.TORCHELASTIC_RUN_ID: flowrun sets TORCHELASTIC_RUN_ID for every "
          "worker; "
          "set parallel.job_id",
      });
}

TEST_CASE("parallel.gpus: all, a count or a list of ids", "[spec]") {
  auto gpus = [](const std::string& value) {
    return valid("steps: [{name: a, run: x, parallel: {gpus: " + value + "}}]").steps[0].parallel->gpus;
  };
  CHECK(gpus("all").kind == GpuRequest::Kind::all);
  CHECK(gpus("all").is_set);
  CHECK(gpus("4").count == 4);
  CHECK(gpus("'4'").count == 4);
  GpuRequest ids = gpus("[0, 03, '2', GPU-8f3a2b1c-aaaa, MIG-GPU-8f3a/1/0, MIG-1b2c]");
  CHECK(ids.kind == GpuRequest::Kind::ids);
  CHECK(ids.ids ==
        std::vector<std::string>{"0", "3", "2", "GPU-8f3a2b1c-aaaa", "MIG-GPU-8f3a/1/0", "MIG-1b2c"});
  CHECK(ids.loc == Location{1, 44});

  CHECK(
      errors(R"(
    steps:
      - name: a
        run: x
        parallel:
          gpus: 0
      - name: b
        run: x
        parallel:
          gpus: 99999999999999999999
      - name: c
        run: x
        parallel:
          gpus: "0,1"
      - name: d
        run: x
        parallel:
          gpus: []
      - name: e
        run: x
        parallel:
          gpus: [0, 1, 1, -1, GPU-, gpu-1, 1.5, [2], GPU-x, GPU-x, 01]
      - name: f
        run: x
        parallel:
          gpus: {count: 2}
      - name: g
        run: x
        parallel:
          gpus: 2.5
      - name: h
        run: x
        parallel:
          gpus: .nan
  )") ==
      Lines{
          "flow.yaml:5:13: steps.a.parallel.gpus: expected 'all', a positive whole number or a list of GPU "
          "ids "
          "like [0, 1], got 0; for CPU workers use 'cpus'",
          "flow.yaml:9:13: steps.b.parallel.gpus: expected a positive whole number up to 2147483647, got "
          "99999999999999999999",
          "flow.yaml:13:13: steps.c.parallel.gpus: expected 'all', a positive whole number or a list of GPU "
          "ids "
          "like [0, 1], got a string '0,1'",
          "flow.yaml:17:13: steps.d.parallel.gpus: expected a non-empty list of GPU ids, got an empty "
          "sequence",
          "flow.yaml:21:20: steps.e.parallel.gpus: GPU 1 is listed twice; expected each GPU once",
          "flow.yaml:21:23: steps.e.parallel.gpus: expected a GPU index (0, 1, ...) or a UUID starting with "
          "'GPU-' or 'MIG-', got -1",
          "flow.yaml:21:27: steps.e.parallel.gpus: expected a GPU index (0, 1, ...) or a UUID starting with "
          "'GPU-' or 'MIG-', got a string 'GPU-'",
          "flow.yaml:21:33: steps.e.parallel.gpus: expected a GPU index (0, 1, ...) or a UUID starting with "
          "'GPU-' or 'MIG-', got a string 'gpu-1'",
          "flow.yaml:21:40: steps.e.parallel.gpus: expected a GPU index (0, 1, ...) or a UUID starting with "
          "'GPU-' or 'MIG-', got 1.5",
          "flow.yaml:21:45: steps.e.parallel.gpus: expected a GPU index (0, 1, ...) or a UUID starting with "
          "'GPU-' or 'MIG-', got a sequence",
          "flow.yaml:21:57: steps.e.parallel.gpus: GPU GPU-x is listed twice; expected each GPU once",
          "flow.yaml:21:64: steps.e.parallel.gpus: GPU 1 is listed twice; expected each GPU once",
          "flow.yaml:25:13: steps.f.parallel.gpus: expected 'all', a positive whole number or a list of GPU "
          "ids "
          "like [0, 1], got a mapping",
          "flow.yaml:29:13: steps.g.parallel.gpus: expected 'all', a positive whole number or a list of GPU "
          "ids "
          "like [0, 1], got 2.5",
          "flow.yaml:33:13: steps.h.parallel.gpus: expected 'all', a positive whole number or a list of GPU "
          "ids "
          "like [0, 1], got .nan",
      });
}

TEST_CASE("parallel: the other keys", "[spec]") {
  Spec spec = valid("steps: [{name: a, run: x, parallel: {cpus: 4, nodes: auto, procs_per_node: 2}}]");
  const ParallelSpec& p = *spec.steps[0].parallel;
  CHECK(p.cpus == 4);
  CHECK(p.cpus_loc == Location{1, 44});
  CHECK_FALSE(p.gpus.is_set);
  CHECK(p.nodes.is_auto());
  CHECK(p.procs_per_node.value == 2);

  CHECK(
      errors(R"(
    steps:
      - name: a
        run: x
        parallel:
          gpus: all
          cpus: 4
      - name: b
        run: x
        parallel:
          nodes: 0
          procs_per_node: many
          cpus: -2
          max_restarts: -1
          visible_devices: all
      - name: c
        run: x
        parallel: true
      - name: d
        run: x
        parallel: [gpus]
      - name: e
        run: x
        parallel:
          max_restarts: 99999999999
          nodes: [1]
  )") ==
      Lines{
          "flow.yaml:6:7: steps.a.parallel.cpus: cpus and gpus cannot both be set; choose one: gpus for GPU "
          "workers, cpus for CPU workers",
          "flow.yaml:10:14: steps.b.parallel.nodes: expected 'auto' or a positive whole number, got 0",
          "flow.yaml:11:23: steps.b.parallel.procs_per_node: expected 'auto' or a positive whole number, got "
          "a "
          "string 'many'",
          "flow.yaml:12:13: steps.b.parallel.cpus: expected a positive whole number of CPU workers, got -2",
          "flow.yaml:13:21: steps.b.parallel.max_restarts: expected a whole number of restarts (0 or more), "
          "got "
          "-1",
          "flow.yaml:14:24: steps.b.parallel.visible_devices: expected 'node' or 'process', got a string "
          "'all'",
          "flow.yaml:17:15: steps.c.parallel: expected a mapping of parallel settings ('parallel: {}' for "
          "the "
          "defaults), got true",
          "flow.yaml:20:15: steps.d.parallel: expected a mapping of parallel settings ('parallel: {}' for "
          "the "
          "defaults), got a sequence",
          "flow.yaml:24:21: steps.e.parallel.max_restarts: expected a whole number up to 2147483647, got "
          "99999999999",
          "flow.yaml:25:14: steps.e.parallel.nodes: expected 'auto' or a positive whole number, got a "
          "sequence",
      });
}

TEST_CASE("outputs and collect belong to parallel steps; globs are checked", "[spec]") {
  Spec spec = valid(R"(
    steps:
      - name: a
        run: x
        parallel: {}
        outputs: ["**/*.pt", "logs/rank[0-9].txt", "a[]]b", "a[!x]", 'a\[b', "c/./d"]
  )");
  CHECK(spec.steps[0].outputs ==
        std::vector<std::string>{"**/*.pt", "logs/rank[0-9].txt", "a[]]b", "a[!x]", "a\\[b", "c/./d"});

  CHECK(
      errors(R"(
    steps:
      - name: a
        run: x
        outputs: x
        collect: all
      - name: b
        run: x
        parallel: {}
        outputs: ["", /abs/*.pt, ../up, "a/../b", "a/..", "x\ny", "a[b", "a]b", "[!]", 3, [x]]
        collect: everything
      - name: c
        run: x
        parallel: {}
        outputs: {a: b}
  )") ==
      Lines{
          "flow.yaml:4:5: steps.a.outputs: only parallel steps have outputs; add 'parallel:' or remove it",
          "flow.yaml:5:5: steps.a.collect: only parallel steps have collect; add 'parallel:' or remove it",
          "flow.yaml:9:15: steps.b.outputs: empty glob; expected a path pattern relative to the workdir, "
          "like "
          "'checkpoints/*.pt'",
          "flow.yaml:9:19: steps.b.outputs: glob '/abs/*.pt' is absolute; expected a pattern relative to the "
          "step's workdir",
          "flow.yaml:9:30: steps.b.outputs: glob '../up' leaves the workdir with '..'; expected a pattern "
          "inside "
          "it",
          "flow.yaml:9:37: steps.b.outputs: glob 'a/../b' leaves the workdir with '..'; expected a pattern "
          "inside it",
          "flow.yaml:9:47: steps.b.outputs: glob 'a/..' leaves the workdir with '..'; expected a pattern "
          "inside "
          "it",
          "flow.yaml:9:55: steps.b.outputs: glob 'x\\ny' contains a NUL or newline; expected a path pattern "
          "on "
          "one line",
          "flow.yaml:9:63: steps.b.outputs: glob 'a[b' has a '[' without ']'; expected balanced [...] "
          "character "
          "classes",
          "flow.yaml:9:70: steps.b.outputs: glob 'a]b' has a ']' without '['; expected balanced [...] "
          "character "
          "classes",
          "flow.yaml:9:77: steps.b.outputs: glob '[!]' has a '[' without ']'; expected balanced [...] "
          "character "
          "classes",
          "flow.yaml:9:87: steps.b.outputs: expected a glob (a string), got a sequence",
          "flow.yaml:10:14: steps.b.collect: expected 'rank0' or 'all', got a string 'everything'",
          "flow.yaml:14:14: steps.c.outputs: expected a glob or a list of globs, got a mapping",
      });
}

TEST_CASE("inputs are globs of a parallel step, checked as outputs are; cluster.shared_workdir", "[spec]") {
  Spec spec = valid(R"(
    steps:
      - name: a
        run: python3 train.py
        parallel: {nodes: 2}
        inputs: ["data/*", "conf/**/*.yaml"]
    cluster: {engine: manual, shared_workdir: false}
  )");
  CHECK(spec.steps[0].inputs == std::vector<std::string>{"data/*", "conf/**/*.yaml"});
  CHECK(spec.cluster->shared_workdir == SharedWorkdir::no);
  CHECK(valid("steps: [{name: a, run: x}]\ncluster: {engine: manual}\n").cluster->shared_workdir ==
        SharedWorkdir::detect);
  CHECK(valid("steps: [{name: a, run: x}]\ncluster: {engine: manual, shared_workdir: true}\n")
            .cluster->shared_workdir == SharedWorkdir::yes);
  CHECK(valid("steps: [{name: a, run: x}]\ncluster: {engine: manual, shared_workdir: auto}\n")
            .cluster->shared_workdir == SharedWorkdir::detect);

  CHECK(errors(R"(
    steps:
      - name: a
        run: x
        inputs: data/*
      - name: b
        run: x
        parallel: {}
        inputs: [../data, /abs]
    cluster: {engine: manual, shared_workdir: sometimes}
  )") ==
        Lines{
            "flow.yaml:4:5: steps.a.inputs: only parallel steps have inputs; add 'parallel:' or remove it",
            "flow.yaml:8:14: steps.b.inputs: glob '../data' leaves the workdir with '..'; expected a pattern "
            "inside it",
            "flow.yaml:8:23: steps.b.inputs: glob '/abs' is absolute; expected a pattern relative to the "
            "step's workdir",
            "flow.yaml:9:43: cluster.shared_workdir: expected 'auto', 'true' or 'false', got a string "
            "'sometimes'",
        });
}

TEST_CASE("a glob's '..' is found after its escapes are read", "[spec]") {
  // The walk looks '\.\.' up as '..': the check reads each component the same way.
  CHECK(errors(R"(
    steps:
      - name: b
        run: x
        parallel: {}
        outputs: ['\.\./secret.txt', 'a/.\./b', '\..']
  )") == Lines{
             "flow.yaml:5:15: steps.b.outputs: glob '\\.\\./secret.txt' leaves the workdir with '..'; "
             "expected a pattern inside it",
             "flow.yaml:5:34: steps.b.outputs: glob 'a/.\\./b' leaves the workdir with '..'; expected a "
             "pattern inside it",
             "flow.yaml:5:45: steps.b.outputs: glob '\\..' leaves the workdir with '..'; expected a pattern "
             "inside it",
         });
  // Escaped names that are not '..', and wildcards (a listing has no '..'), are fine.
  Spec spec = valid(R"(
    steps:
      - name: a
        run: x
        parallel: {}
        outputs: ['\.x', '.[.]', 'x\.', '..?']
  )");
  CHECK(spec.steps[0].outputs.size() == 4);
}

TEST_CASE("a glob's [...] class lies within one name, as the join's walk reads it", "[spec]") {
  // The walk matches 'a[b/c]' as the names 'a[b' and 'c]': the check reads the same names.
  CHECK(errors(R"(
    steps:
      - name: b
        run: x
        parallel: {}
        outputs: ['a[b/c]', 'x]/y[']
  )") == Lines{
             "flow.yaml:5:15: steps.b.outputs: glob 'a[b/c]' has a '[' without ']'; expected balanced [...] "
             "character classes",
             "flow.yaml:5:25: steps.b.outputs: glob 'x]/y[' has a ']' without '['; expected balanced [...] "
             "character classes",
         });
}

TEST_CASE("templates: ${steps.NAME.outputs} must name a parallel step that runs first", "[spec]") {
  Spec spec = valid(R"(
    steps:
      - name: train
        run: x
        parallel: {}
      - name: mid
        run: x
      - name: eval
        shell: true
        run: |
          ls ${steps.train.outputs} ${HOME} ${args}
          python eval.py "${X:-x}" "${steps.train.outputs}"
  )");
  CHECK(spec.steps[2].script.find("${steps.train.outputs}") != std::string::npos);

  CHECK(errors(R"(
    steps:
      - name: train
        run: x
        parallel: {}
      - name: prep
        needs: []
        run: x
      - name: eval
        needs: [prep]
        run: [python, "${steps.train.outputs}", "${steps.prep.outputs}", "${steps.trian.outputs}", "${steps.zz.outputs}"]
      - name: self
        needs: []
        parallel: {}
        run: echo ${steps.self.outputs}
      - name: late
        needs: []
        run: echo ${steps.later.outputs} ${steps.later.outputs}
      - name: later
        parallel: {}
        run: x
  )") == Lines{
             "flow.yaml:10:19: steps.eval.run: step 'train' does not run before this step; add it to needs "
             "or join "
             "it",
             "flow.yaml:10:45: steps.eval.run: '${steps.prep.outputs}' names step 'prep', which is not "
             "parallel; "
             "only parallel steps have outputs",
             "flow.yaml:10:70: steps.eval.run: no step named 'trian' (in '${steps.trian.outputs}'); did you "
             "mean "
             "'train'?",
             "flow.yaml:10:96: steps.eval.run: no step named 'zz' (in '${steps.zz.outputs}'); expected the "
             "name of "
             "a parallel step",
             "flow.yaml:14:10: steps.self.run: step 'self' does not run before this step; add it to needs or "
             "join "
             "it",
             "flow.yaml:17:10: steps.late.run: step 'later' does not run before this step; add it to needs "
             "or join "
             "it",
         });
  CHECK(errors(R"(
    steps:
      - name: a
        run: echo ${step.train.outputs} ok
      - name: b
        run: [echo, "${arg}"]
      - name: c
        shell: true
        run: echo ${steps.train} ${steps.x.outputs}
  )") == Lines{
             "flow.yaml:3:10: steps.a.run: unknown template '${step.train.outputs}'; did you mean "
             "'${steps.train.outputs}'?",
             "flow.yaml:5:17: steps.b.run: unknown template '${arg}'; did you mean '${args}'?",
             "flow.yaml:8:10: steps.c.run: malformed template '${steps.train}'; expected "
             "'${steps.NAME.outputs}'",
         });
}

TEST_CASE("find_placeholders", "[spec]") {
  auto find = [](std::string_view text) {
    std::string error;
    auto found = find_placeholders(text, &error);
    std::vector<std::string> out;
    if (!found) return std::vector<std::string>{"error: " + error};
    for (const auto& p : *found)
      out.push_back(p.kind == Placeholder::Kind::args ? "args" : "outputs:" + p.step);
    return out;
  };
  using V = std::vector<std::string>;
  CHECK(find("") == V{});
  CHECK(find("plain $HOME ${HOME} ${N:-4} $${x} ${} ${") == V{});
  CHECK(find("${args}") == V{"args"});
  CHECK(find("a ${steps.t-1.outputs}/m.pt ${args} ${steps.B_2.outputs}") ==
        V{"outputs:t-1", "args", "outputs:B_2"});
  CHECK(find("${X:-${args}}") == V{"args"});
  // `$${` is a literal `${`; a `$` before it is a `$`.
  CHECK(find("$${steps.a.outputs} $${args} $$${args} a$${X:-${args}}") == V{"args"});
  CHECK(find("$${steps.a} $${step.a.outputs} $${arg} $${args.lr} $${steps") == V{});
  CHECK(find("$ {args} $$ ${args}") == V{"args"});
  CHECK(find("${steps.a.outputs") == V{"error: unterminated template '${steps.a.outputs'; expected "
                                       "'${steps.NAME.outputs}'"});
  CHECK(find("${steps}") == V{"error: malformed template '${steps}'; expected '${steps.NAME.outputs}'"});
  CHECK(find("${steps.a}") == V{"error: malformed template '${steps.a}'; expected '${steps.NAME.outputs}'"});
  CHECK(find("${steps.a.output}") == V{"error: malformed template '${steps.a.output}'; expected "
                                       "'${steps.NAME.outputs}'"});
  CHECK(find("${steps.a.b.outputs}") == V{"error: malformed template '${steps.a.b.outputs}'; expected "
                                          "'${steps.NAME.outputs}'"});
  CHECK(find("${steps..outputs}") == V{"error: malformed template '${steps..outputs}'; expected "
                                       "'${steps.NAME.outputs}'"});
  CHECK(find("${step.a.outputs}") == V{"error: unknown template '${step.a.outputs}'; did you mean "
                                       "'${steps.a.outputs}'?"});
  CHECK(find("${step.a}") == V{"error: unknown template '${step.a}'; did you mean '${steps.NAME.outputs}'?"});
  CHECK(find("${arg}") == V{"error: unknown template '${arg}'; did you mean '${args}'?"});
  CHECK(find("${argv}") == V{"error: unknown template '${argv}'; did you mean '${args}'?"});
  CHECK(find("${args.0}") == V{"error: malformed template '${args.0}'; expected '${args}'"});
  CHECK(find("${args") == V{"error: unterminated template '${args'; expected '${args}'"});
  CHECK(find("${steps.a\nb}") ==
        V{"error: unterminated template '${steps.a'; expected '${steps.NAME.outputs}'"});
  CHECK(find("${steps.a.outputs/m.pt}") ==
        V{"error: unterminated template '${steps.a.outputs'; expected '${steps.NAME.outputs}'"});
  CHECK(find("${step.t.outputs ${args}") == V{"error: unknown template '${step.t.outputs'; did you mean "
                                              "'${steps.t.outputs}'?"});
  CHECK(find("${args:-x}") == V{"error: unterminated template '${args'; expected '${args}'"});
  CHECK(find("${\x01} ${ steps.a.outputs} ${STEPS.a.outputs}") == V{});
  CHECK(find("${steps." + std::string(100, 'x') + "}") ==
        V{"error: malformed template '${steps.xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...'; expected "
          "'${steps.NAME.outputs}'"});
  CHECK(find_placeholders("${args}", nullptr)->size() == 1);
  CHECK_FALSE(find_placeholders("${arg}", nullptr).has_value());
}

TEST_CASE("cluster", "[spec]") {
  Spec spec = valid(R"(
    cluster:
      engine: ssh
      hosts: [node1, user@node2]
      gpus_per_node: 8
    steps:
      - name: a
        run: x
  )");
  REQUIRE(spec.cluster.has_value());
  const ClusterSpec& c = *spec.cluster;
  CHECK(c.engine == Engine::ssh);
  CHECK(engine_name(c.engine) == "ssh");
  CHECK(c.hosts == std::vector<std::string>{"node1", "user@node2"});
  CHECK(c.hosts_loc == Location{3, 10});
  CHECK(c.loc == Location{1, 1});
  CHECK(c.gpus_per_node == 8);
  CHECK(c.ssh_command.empty());  // the runner applies FLOWRUN_SSH or "ssh"
  CHECK(c.hostfile.empty());
  CHECK_FALSE(c.address.has_value());
  CHECK(c.heartbeat_timeout_s == 10);
  CHECK(c.join_timeout_s == 300);
  CHECK(
      valid(
          "cluster: {engine: ssh, hosts: [a], ssh_command: ssh -p 2222 -o 'A B'}\nsteps: [{name: a, run: x}]")
          .cluster->ssh_command == std::vector<std::string>{"ssh", "-p", "2222", "-o", "A B"});
  Spec slurm =
      valid("cluster: {engine: slurm, srun_args: [--exclusive, --mem=0]}\nsteps: [{name: a, run: x}]");
  CHECK(slurm.cluster->engine == Engine::slurm);
  CHECK(slurm.cluster->srun_args == std::vector<std::string>{"--exclusive", "--mem=0"});
  CHECK(slurm.cluster->ssh_command.empty());
  CHECK(valid("cluster: {engine: manual}\nsteps: [{name: a, run: x}]").cluster->engine == Engine::manual);

  CHECK(errors("cluster:\nsteps: [{name: a, run: x}]\n") ==
        Lines{"flow.yaml:1:1: cluster: missing required key 'engine' ('slurm', 'ssh', 'manual' or 'gang')"});
  CHECK(
      errors("cluster: {engine: ssh}\nsteps: [{name: a, run: x}]\n") ==
      Lines{"flow.yaml:1:1: cluster: missing required key 'hosts' or 'hostfile' for engine 'ssh' (the nodes, "
            "in node-rank order)"});
  CHECK(
      errors(R"(
    cluster:
      engine: SLURM
      hosts: [a, a, "b c", -oProxyCommand=x, [d]]
      gpus_per_node: 0
      ssh_command: ssh
      srun_args: "--x 'y"
    steps: [{name: a, run: x}]
  )") ==
      Lines{
          "flow.yaml:2:11: cluster.engine: expected 'slurm', 'ssh', 'manual' or 'gang', got a string 'SLURM'",
          "flow.yaml:3:14: cluster.hosts: host 'a' is listed twice; expected each node once",
          "flow.yaml:3:17: cluster.hosts: expected a host name (no spaces, not starting with '-'), got a "
          "string "
          "'b c'",
          "flow.yaml:3:24: cluster.hosts: expected a host name (no spaces, not starting with '-'), got a "
          "string "
          "'-oProxyCommand=x'",
          "flow.yaml:3:42: cluster.hosts: expected a host name (no spaces, not starting with '-'), got a "
          "sequence",
          "flow.yaml:4:18: cluster.gpus_per_node: expected a positive whole number, got 0",
          "flow.yaml:6:14: cluster.srun_args: cannot split into words: unterminated single quote; fix the "
          "quoting or write a list of words",
      });
  CHECK(errors(R"(
    cluster:
      engine: ssh
      hosts: []
      ssh_command: []
      srun_args: [-N1]
    steps: [{name: a, run: x}]
  )") == Lines{
             "flow.yaml:3:10: cluster.hosts: expected a non-empty list of host names for engine 'ssh', got "
             "an empty "
             "sequence",
             "flow.yaml:4:16: cluster.ssh_command: expected a command (a string or a list of words), got an "
             "empty "
             "sequence",
             "flow.yaml:5:3: cluster.srun_args: srun_args is only used with engine 'slurm'; remove it or set "
             "engine: slurm",
         });
  CHECK(
      errors("cluster: {engine: manual, ssh_command: x}\nsteps: [{name: a, run: x}]\n") ==
      Lines{
          "flow.yaml:1:27: cluster.ssh_command: ssh_command is only used with engine 'ssh'; remove it or set "
          "engine: ssh"});
  CHECK(
      errors("cluster: slurm\nsteps: [{name: a, run: x}]\n") ==
      Lines{"flow.yaml:1:10: cluster: expected a mapping with the cluster's 'engine', got a string 'slurm'"});
}

TEST_CASE("cluster: hostfile, address, heartbeat_timeout, join_timeout", "[spec]") {
  Spec spec = valid(R"(
    cluster:
      engine: ssh
      hostfile: ../nodes/hosts.txt
      address: 10.200.0.1
      heartbeat_timeout: 500ms
      join_timeout: 5m
    steps: [{name: a, run: x}]
  )");
  const ClusterSpec& c = *spec.cluster;
  CHECK(c.hostfile == "/work/nodes/hosts.txt");
  CHECK(c.hosts.empty());  // parse_spec does no I/O; load_spec reads the file
  CHECK(c.hosts_loc == Location{3, 13});
  CHECK(c.address == "10.200.0.1");
  CHECK(c.heartbeat_timeout_s == 0.5);
  CHECK(c.join_timeout_s == 300);
  CHECK(valid("cluster: {engine: ssh, hostfile: /etc/h}\nsteps: [{name: a, run: x}]").cluster->hostfile ==
        "/etc/h");
  Spec slurm =
      valid("cluster: {engine: slurm, heartbeat_timeout: 2.5, join_timeout: 1h}\nsteps: [{name: a, run: x}]");
  CHECK(slurm.cluster->heartbeat_timeout_s == 2.5);
  CHECK(slurm.cluster->join_timeout_s == 3600);
  CHECK(valid("cluster: {engine: manual, address: gpu-head.example.org}\nsteps: [{name: a, run: x}]")
            .cluster->address == "gpu-head.example.org");

  CHECK(errors(R"(
    cluster:
      engine: ssh
      hosts: [a]
      hostfile: hosts.txt
    steps: [{name: a, run: x}]
  )") ==
        Lines{"flow.yaml:4:3: cluster.hostfile: hosts and hostfile cannot both be set; list the nodes in one "
              "of them"});
  CHECK(errors(R"(
    cluster:
      engine: slurm
      hostfile: hosts.txt
      address: "10.0.0.1 10.0.0.2"
      heartbeat_timeout: 0
      join_timeout: -1
    steps: [{name: a, run: x}]
  )") == Lines{
             "flow.yaml:3:3: cluster.hostfile: hostfile is only used with engine 'ssh'; remove it or set "
             "engine: ssh",
             "flow.yaml:4:12: cluster.address: expected an address (an IP address or a host name, no "
             "spaces), got a string '10.0.0.1 10.0.0.2'",
             "flow.yaml:5:22: cluster.heartbeat_timeout: expected a positive duration: seconds (90) or a "
             "string like '90s', '30m', '1h30m' or '2d', got 0",
             "flow.yaml:6:17: cluster.join_timeout: expected a positive duration: seconds (90) or a string "
             "like '90s', '30m', '1h30m' or '2d', got -1",
         });
  CHECK(errors(R"(
    cluster:
      engine: ssh
      hostfile: [a]
      address: ''
      heartbeat_timeout: 400d
    steps: [{name: a, run: x}]
  )") == Lines{
             "flow.yaml:3:13: cluster.hostfile: expected a file path (a string), got a sequence",
             "flow.yaml:4:12: cluster.address: expected an address (an IP address or a host name, no "
             "spaces), got an empty string",
             "flow.yaml:5:22: cluster.heartbeat_timeout: expected a duration up to 365d, got a string '400d'",
         });
  CHECK(errors("cluster: {engine: ssh, hostfile: ''}\nsteps: [{name: a, run: x}]\n") ==
        Lines{"flow.yaml:1:34: cluster.hostfile: expected a file path, got an empty string"});
  CHECK(
      errors("cluster: {engine: ssh, address: -x, hosts: [a]}\nsteps: [{name: a, run: x}]\n") ==
      Lines{"flow.yaml:1:33: cluster.address: expected an address (an IP address or a host name, no spaces), "
            "got a string '-x'"});
  CHECK(errors("heartbeat_timeout: 1\ncluster: {engine: slurm, timeout: 1}\nsteps: [{name: a, run: x}]\n") ==
        Lines{"flow.yaml:1:1: key 'heartbeat_timeout' does not belong here; put it under 'cluster:'",
              "flow.yaml:2:26: cluster: key 'timeout' does not belong here; put it in a step, under 'steps:' "
              "(the cluster has 'heartbeat_timeout' and 'join_timeout')"});
}

TEST_CASE("the whole file: empty, not a mapping, not YAML, too large, not text", "[spec]") {
  CHECK(errors("") == Lines{"flow.yaml: the file is empty; expected a mapping with a list of 'steps'"});
  CHECK(errors("# just a comment\n\n") ==
        Lines{"flow.yaml: the file is empty; expected a mapping with a list of 'steps'"});
  CHECK(errors("- a\n- b\n") ==
        Lines{"flow.yaml:1:1: expected a mapping with a list of 'steps', got a sequence"});
  CHECK(errors("hello\n") ==
        Lines{"flow.yaml:1:1: expected a mapping with a list of 'steps', got a string 'hello'"});
  CHECK(errors("steps: [{name: a, run: x}\n") ==
        Lines{"flow.yaml:2:1: invalid YAML: end of sequence flow not found"});
  CHECK(errors("steps:\n  - name: a\n   run: x\n") ==
        Lines{"flow.yaml:3:4: invalid YAML: end of sequence not found"});
  CHECK(errors("steps: [{name: a, run: x}]\n---\nsteps: []\n") ==
        Lines{"flow.yaml:3:1: the file holds more than one YAML document; expected one spec"});
  CHECK(valid("---\nsteps: [{name: a, run: x}]\n...\n").steps.size() == 1);
  CHECK(errors(std::string(kMaxSpecBytes + 1, '#')) ==
        Lines{"flow.yaml: the file is larger than 1 MiB; a spec must be smaller"});
  CHECK(errors(std::string("steps:\n  - na\0me: a\n", 20)) ==
        Lines{"flow.yaml:2:7: the file contains a NUL byte; expected YAML text"});
  CHECK(errors("name: caf\xc3\xa9\nsteps: \xff\n") ==
        Lines{"flow.yaml:2:8: the file is not valid UTF-8; expected YAML text in UTF-8"});
  CHECK(errors("a: \xed\xa0\x80\n") ==
        Lines{"flow.yaml:1:4: the file is not valid UTF-8; expected YAML text in UTF-8"});
  CHECK(errors(std::string(3000, '[')) == Lines{"flow.yaml:2:1: invalid YAML: nested too deeply"});
  // yaml-cpp 0.7 loops forever on a stray top-level ',' unless we stop it.
  CHECK(errors(",") == Lines{"flow.yaml:1:1: invalid YAML: unexpected ','"});
  CHECK(errors("&a ,[*a]\n") == Lines{"flow.yaml:1:4: invalid YAML: unexpected ','"});
  CHECK(errors("steps: [{name: a, run: x}]\n---\n,\n") ==
        Lines{"flow.yaml:3:1: invalid YAML: unexpected ','"});
  std::string largest = "steps: [{name: a, run: x}]\n";
  largest += std::string(kMaxSpecBytes - largest.size(), '#');
  CHECK(parse_spec(largest, "f", "/").spec.has_value());
}

TEST_CASE("hostile YAML never hangs or crashes", "[spec]") {
  CHECK(errors("&a [*a]\n") ==
        Lines{"flow.yaml:1:1: expected a mapping with a list of 'steps', got a sequence"});
  CHECK(errors("steps: &s [*s]\n") ==
        Lines{"flow.yaml:1:8: steps[0]: expected a step (a mapping with 'name' and 'run'), got a sequence"});
  CHECK(
      errors("&m {steps: [{name: a, run: x, env: *m, parallel: *m}]}\n") ==
      Lines{"flow.yaml:1:5: steps.a.parallel: unknown key 'steps'; expected one of: gpus, nodes, "
            "procs_per_node, "
            "cpus, max_restarts, restart, visible_devices, preflight, role, job_id, spare_nodes, node_checks",
            "flow.yaml:1:12: steps.a.env.steps: expected a value (a string, number or boolean), got a "
            "sequence"});
  // Billion laughs: aliases share nodes, nothing is expanded.
  std::string laughs = "a: &a [x, x, x, x, x, x, x, x]\n";
  for (char c = 'b'; c <= 'k'; ++c) {
    std::string prev(1, static_cast<char>(c - 1));
    laughs += std::string(1, c) + ": &" + c + " [*" + prev + ", *" + prev + ", *" + prev + ", *" + prev +
              ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + "]\n";
  }
  laughs += "steps: *k\n";
  CHECK_FALSE(parse(laughs).spec.has_value());
  // Aliases that name one large value many times: the walk is bounded too.
  std::string amplified = "common: &n [";
  for (int i = 0; i < 1000; ++i) amplified += "name" + std::to_string(i) + ", ";
  amplified += "]\nsteps:\n";
  for (int i = 0; i < 1000; ++i) amplified += "  - {name: s" + std::to_string(i) + ", run: x, needs: *n}\n";
  CHECK(errors(amplified) ==
        Lines{"flow.yaml: the spec is too large once its aliases (*name) are expanded; use fewer aliases"});
  std::string deep_block;
  for (int i = 0; i < 300; ++i) deep_block += std::string(static_cast<std::size_t>(i), ' ') + "a:\n";
  CHECK_FALSE(parse(deep_block).spec.has_value());
  CHECK_FALSE(parse(std::string(5000, '-') + " x").spec.has_value());
  // Many unknown names among many steps: "did you mean" must not go quadratic.
  std::string unknown = "steps:\n";
  for (int i = 0; i < 4000; ++i)
    unknown += "  - {name: step" + std::to_string(i) + ", run: x, needs: [other" + std::to_string(i) + "]}\n";
  CHECK(parse(unknown).diagnostics.size() == 4000);
  // Templates naming later steps: the "runs before" check must not go quadratic either.
  std::string later = "steps:\n";
  for (int i = 0; i < 4000; ++i)
    later += "  - {name: s" + std::to_string(i) + ", run: '${steps.s" + std::to_string(i + 1) +
             ".outputs}', parallel: {}}\n";
  later += "  - {name: s4000, run: x, parallel: {}}\n";
  CHECK(parse(later).diagnostics.size() == 4000);
  std::string long_chain = "steps:\n";
  for (int i = 0; i < 5000; ++i) long_chain += "  - {name: s" + std::to_string(i) + ", run: x}\n";
  Spec chain = valid(long_chain);
  CHECK(chain.order.size() == 5000);
  CHECK(chain.order.back() == 4999);
}

TEST_CASE("diagnostics come sorted by position", "[spec]") {
  auto result = parse(R"(
    cluster: {engine: nope}
    steps:
      - name: a
        run: x
        needs: [zz]
    env: {RANK: 1}
  )");
  std::vector<int> lines;
  for (const auto& d : result.diagnostics) lines.push_back(d.loc.line);
  CHECK(lines == std::vector<int>{1, 5, 6});
}

TEST_CASE("load_spec reads the file and resolves paths against its directory", "[spec]") {
  const testing::ScopedTempDir scratch("spec-test");
  const std::string& dir = scratch.path();
  const std::string path = dir + "/train.yaml";
  {
    std::ofstream out(path);
    out << "workdir: sub\nsteps: [{name: a, run: x}]\n";
  }
  SpecParse result = load_spec(path);
  REQUIRE(result.spec.has_value());
  CHECK(result.spec->file == path);
  CHECK(result.spec->dir == dir);
  CHECK(result.spec->name == "train");
  CHECK(result.spec->workdir == dir + "/sub");

  SpecParse missing = load_spec(dir + "/nope.yaml");
  REQUIRE(missing.diagnostics.size() == 1);
  CHECK(missing.diagnostics[0].to_string() == dir + "/nope.yaml: cannot read: No such file or directory");
  SpecParse directory = load_spec(dir);
  REQUIRE(directory.diagnostics.size() == 1);
  CHECK(directory.diagnostics[0].to_string() == dir + ": cannot read: Is a directory");
}

TEST_CASE("load_spec reads cluster.hostfile into cluster.hosts", "[spec]") {
  const testing::ScopedTempDir scratch("hostfile-test");
  const std::string& dir = scratch.path();
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir + "/" + name) << text;
  };
  auto load = [&](const std::string& hostfile_text) {
    write("hosts.txt", hostfile_text);
    return load_spec(dir + "/train.yaml");
  };
  auto problems = [&](const std::string& hostfile_text) {
    Lines out;
    for (const auto& d : load(hostfile_text).diagnostics) out.push_back(d.to_string());
    return out;
  };
  write("train.yaml", "cluster:\n  engine: ssh\n  hostfile: hosts.txt\nsteps: [{name: a, run: x}]\n");
  const std::string hostfile = dir + "/hosts.txt";

  SpecParse ok = load(
      "# the nodes, in node-rank order\n"
      "gpu-a slots=8\n"
      "\n"
      "  alice@gpu-b\t# the second node\r\n"
      "gpu-c   slots=8   \n"
      "gpu-d");
  REQUIRE(ok.spec.has_value());
  CHECK(ok.spec->cluster->hostfile == hostfile);
  CHECK(ok.spec->cluster->hosts == std::vector<std::string>{"gpu-a", "alice@gpu-b", "gpu-c", "gpu-d"});

  // Problems are reported at the hostfile's own lines, every one of them.
  CHECK(
      problems("gpu-a slots=8\n"
               "gpu-b slots=8 max_slots=16\n"
               "gpu-c junk\n"
               "  gpu-a\n"
               "-oProxyCommand=x\n"
               "gpu-e slots=0\n"
               "gpu-f slots=many\n") ==
      Lines{
          hostfile + ":2:15: unexpected 'max_slots=16'; expected one host per line, optionally followed by "
                     "'slots=N'",
          hostfile + ":3:7: unexpected 'junk'; expected one host per line, optionally followed by 'slots=N'",
          hostfile + ":4:3: host 'gpu-a' is listed twice (first at line 1); expected each node once",
          hostfile + ":5:1: expected a host name (not starting with '-', no control characters), got "
                     "'-oProxyCommand=x'",
          hostfile + ":6:7: expected 'slots=N' with N a positive whole number, got 'slots=0'",
          hostfile + ":7:7: expected 'slots=N' with N a positive whole number, got 'slots=many'",
      });
  CHECK(load("gpu-a junk\n").spec == std::nullopt);
  CHECK(problems("# nothing yet\n\n") ==
        Lines{dir + "/train.yaml:3:13: cluster.hostfile: " + hostfile +
              " lists no hosts; expected one host per line, the nodes in node-rank order"});
  std::remove(hostfile.c_str());
  CHECK(load_spec(dir + "/train.yaml").diagnostics.at(0).to_string() ==
        dir + "/train.yaml:3:13: cluster.hostfile: cannot read " + hostfile + ": No such file or directory");

  // A spec named relatively names its hostfile the same way.
  write("hosts.txt", "gpu-a\ngpu-a\n");
  const std::string relative_dir =
      std::filesystem::path(dir).lexically_relative(std::filesystem::current_path());
  SpecParse relative = load_spec(relative_dir + "/train.yaml");
  REQUIRE(relative.diagnostics.size() == 1);
  CHECK(relative.diagnostics[0].to_string() ==
        relative_dir +
            "/hosts.txt:2:1: host 'gpu-a' is listed twice (first at line 1); expected each node once");

  // Only a clean spec has its hostfile read.
  write("train.yaml", "cluster:\n  engine: ssh\n  hostfile: hosts.txt\nsteps: [{name: a}]\n");
  CHECK(problems("gpu-a junk\n") ==
        Lines{dir + "/train.yaml:4:9: steps.a: missing required key 'run' (the command to run)"});
}

TEST_CASE("logs.console picks the ranks the console shows", "[spec]") {
  auto parsed = parse(R"(
steps:
  - name: a
    run: x
    parallel: {}
    logs: {console: [0, 3]}
  - name: b
    run: x
    parallel: {}
    logs: {console: all}
  - name: c
    run: x
    parallel: {}
    logs: {console: 2}
)");
  REQUIRE(parsed.spec);
  CHECK(parsed.spec->steps[0].console_ranks == std::vector<int>{0, 3});
  CHECK_FALSE(parsed.spec->steps[1].console_ranks.has_value());
  CHECK(parsed.spec->steps[2].console_ranks == std::vector<int>{2});
  CHECK(errors(R"(
steps:
  - name: a
    run: x
    logs: {console: 0}
  - name: b
    run: x
    parallel: {}
    logs: {console: [x], files: no}
)") == std::vector<std::string>{
           "flow.yaml:4:5: steps.a.logs: only parallel steps have logs; add 'parallel:' or remove it",
           "flow.yaml:8:22: steps.b.logs.console: expected 'all' or a rank (a whole number, 0 or more), "
           "got a string 'x'",
           "flow.yaml:8:26: steps.b.logs: unknown key 'files'; expected one of: console, fold",
       });
}

TEST_CASE("logs.fold: how long a line waits for the other ranks, or not folded", "[spec]") {
  auto parsed = parse(R"(
steps:
  - name: a
    run: x
    parallel: {}
    logs: {fold: false}
  - name: b
    run: x
    parallel: {}
    logs: {fold: true}
  - name: c
    run: x
    parallel: {}
    logs: {fold: 500ms}
  - name: d
    run: x
    parallel: {}
)");
  REQUIRE(parsed.spec);
  CHECK(parsed.spec->steps[0].fold_s == 0.0);
  CHECK(parsed.spec->steps[1].fold_s == kDefaultFoldS);
  CHECK(parsed.spec->steps[2].fold_s == 0.5);
  CHECK_FALSE(parsed.spec->steps[3].fold_s.has_value());
  CHECK(
      errors(R"(
steps:
  - name: a
    run: x
    parallel: {}
    logs: {fold: 2m}
  - name: b
    run: x
    parallel: {}
    logs: {fold: [1]}
)") ==
      std::vector<std::string>{
          "flow.yaml:5:18: steps.a.logs.fold: expected true, false or the longest a line waits for the other "
          "ranks, up to 60s ('0.2s'), got a string '2m'",
          "flow.yaml:9:18: steps.b.logs.fold: expected true, false or the longest a line waits for the other "
          "ranks, up to 60s ('0.2s'), got a sequence",
      });
}

TEST_CASE("forensics: nccl, off or a mapping of stacks, timeout and nccl, on a parallel step", "[spec]") {
  const Spec spec = valid(R"(
steps:
  - name: a
    run: x
    parallel: {}
  - name: b
    run: x
    parallel: {}
    forensics: nccl
  - name: c
    run: x
    parallel: {}
    forensics: off
  - name: d
    run: x
    parallel: {}
    forensics: {timeout: 1m30s, nccl: true}
  - name: e
    run: x
    parallel: {}
    forensics: {stacks: false}
)");
  const auto& a = spec.steps[0].forensics;
  CHECK((a.stacks && a.timeout_s == 3 && !a.nccl && a.loc.line == 0 && a.is_default()));
  const auto& b = spec.steps[1].forensics;
  CHECK((b.stacks && b.timeout_s == 3 && b.nccl && b.loc.line == 8 && !b.is_default()));
  const auto& c = spec.steps[2].forensics;
  CHECK((!c.stacks && c.timeout_s == 3 && !c.nccl));
  const auto& d = spec.steps[3].forensics;
  CHECK((d.stacks && d.timeout_s == 90 && d.nccl));
  const auto& e = spec.steps[4].forensics;
  CHECK((!e.stacks && !e.nccl));

  CHECK(errors(R"(
forensics: nccl
steps:
  - name: a
    run: x
    forensics: nccl
  - name: b
    run: x
    parallel: {forensics: off}
  - name: c
    run: x
    parallel: {}
    forensics: nccI
  - name: d
    run: x
    parallel: {}
    forensics: [nccl]
  - name: e
    run: x
    parallel: {}
    forensics: {stacks: maybe, timeout: 0, nccl: 1, py_spy: true}
  - name: f
    run: x
    parallel: {}
    forensics: {stacks: false, timeout: 10s}
)") == Lines{
           "flow.yaml:1:1: key 'forensics' does not belong here; put it in a step, under 'steps:'",
           "flow.yaml:5:5: steps.a.forensics: only parallel steps have forensics; add 'parallel:' or remove "
           "it",
           "flow.yaml:8:16: steps.b.parallel: key 'forensics' does not belong here; put it in the step, next "
           "to 'parallel:'",
           "flow.yaml:12:16: steps.c.forensics: expected 'nccl', 'off' or a mapping such as {stacks: true, "
           "timeout: 3s, nccl: true, sample: 1s}, got a string 'nccI'; did you mean 'nccl'?",
           "flow.yaml:16:16: steps.d.forensics: expected 'nccl', 'off' or a mapping such as {stacks: true, "
           "timeout: 3s, nccl: true, sample: 1s}, got a sequence",
           "flow.yaml:20:25: steps.e.forensics.stacks: expected true or false, got a string 'maybe'",
           "flow.yaml:20:41: steps.e.forensics.timeout: expected a positive duration: seconds (90) or a "
           "string like '90s', '30m', '1h30m' or '2d', got 0",
           "flow.yaml:20:50: steps.e.forensics.nccl: expected true or false, got 1",
           "flow.yaml:20:53: steps.e.forensics: unknown key 'py_spy'; expected one of: stacks, timeout, "
           "nccl, sample",
           "flow.yaml:24:32: steps.f.forensics.timeout: timeout is the time for the ranks' stacks, and "
           "stacks: false takes none; remove one of them",
       });
}

TEST_CASE("forensics' sample: every so often, off, or not too often", "[spec]") {
  const auto sample_of = [](const std::string& value) {
    return valid("name: f\nsteps:\n  - name: t\n    run: x\n    parallel: {}\n    forensics: " + value + "\n")
        .steps[0]
        .forensics.sample_s;
  };
  CHECK(sample_of("nccl") == kDefaultSampleS);
  CHECK(sample_of("{sample: 10s}") == 10);
  CHECK(sample_of("{sample: off}") == 0);
  CHECK(sample_of("{sample: false}") == 0);
  CHECK(sample_of("off") == 0);
  CHECK(valid("name: f\nsteps: [{name: t, run: x, parallel: {}}]").steps[0].forensics.sample_s ==
        kDefaultSampleS);
  CHECK(
      errors("name: f\nsteps:\n  - name: t\n    run: x\n    parallel: {}\n    forensics: {sample: 0.05}\n") ==
      Lines{"flow.yaml:6:25: steps.t.forensics.sample: a sample every 0.05 s would cost the ranks time; at "
            "least "
            "0.1s (or off)"});
}

TEST_CASE("names that become file names are at most 100 characters", "[spec]") {
  const std::string at_limit(100, 'a');
  const std::string over(300, 's');
  CHECK(valid("name: f" + at_limit.substr(1) + "\nsteps: [{name: " + at_limit + ", run: x}]").steps[0].name ==
        at_limit);
  CHECK(errors("name: f" + over + "\nsteps:\n  - name: " + over +
               "\n    run: x\n  - name: b\n    needs: " + over + "\n    run: x\n") ==
        Lines{
            "flow.yaml:1:7: name: flow name 'fsssssssssssssssssssssssssssssssssssssss...' is 301 characters "
            "long; expected at most 100 (it becomes part of file names)",
            "flow.yaml:3:11: steps[0].name: step name 'ssssssssssssssssssssssssssssssssssssssss...' is 300 "
            "characters long; expected at most 100 (it becomes part of file names)",
        });
}

TEST_CASE("NUL bytes and overlong strings are refused where a program or variable would get them", "[spec]") {
  CHECK(
      errors(R"(
    env:
      A: "x\0y"
      B: ok
    steps:
      - name: a
        run: ["echo", "p\0q"]
        env: {C: "\0"}
      - name: b
        shell: true
        run: "echo \0"
      - name: c
        run: "echo 'p\0q'"
    cluster:
      engine: ssh
      hosts: [h]
      ssh_command: ["ssh", "-o\0x"]
  )") ==
      Lines{
          "flow.yaml:2:6: env.A: the value of A holds a NUL byte (\\0), which no environment variable can "
          "hold; remove it",
          "flow.yaml:6:10: steps.a.run: word 2 holds a NUL byte (\\0), which no program argument can hold; "
          "remove it",
          "flow.yaml:7:14: steps.a.env.C: the value of C holds a NUL byte (\\0), which no environment "
          "variable can hold; remove it",
          "flow.yaml:10:10: steps.b.run: the script holds a NUL byte (\\0), which no program argument can "
          "hold; remove it",
          "flow.yaml:12:10: steps.c.run: word 2 holds a NUL byte (\\0), which no program argument can hold; "
          "remove it",
          "flow.yaml:16:16: cluster.ssh_command: word 2 holds a NUL byte (\\0), which no program argument "
          "can hold; remove it",
      });
  const std::string big(kMaxArgLength, 'v');
  CHECK(
      errors("env: {AB: " + big + "}\nsteps:\n  - name: a\n    run: [x, " + big + "y]\n") ==
      Lines{
          "flow.yaml:1:11: env.AB: AB=VALUE is 131074 bytes long; the kernel passes at most 131071 bytes in "
          "one variable",
          "flow.yaml:4:10: steps.a.run: word 2 is 131072 bytes long; the kernel passes at most 131071 bytes "
          "in one argument",
      });
  CHECK(
      errors("workdir: /x/" + std::string(256, 'd') + "\nsteps: [{name: a, run: x}]\n") ==
      Lines{
          "flow.yaml:1:10: workdir: the directory path's part 'dddddddddddddddddddddddddddddddddddddddd...' "
          "is 256 bytes long; a file name holds at most 255",
      });
}

TEST_CASE("parallel.restart: which failures restart, and what counts as progress", "[spec]") {
  const Spec spec = valid(R"(
    steps:
      - name: a
        run: x
        workdir: /data/run
        parallel:
          max_restarts: 3
          restart:
            causes: [signal, exit_code]
            exit_codes: [75, 3]
            min_attempt: 10m
            progress_file: ckpt/last.pt
      - name: b
        run: x
        parallel: {max_restarts: 1, restart: {}}
      - name: c
        run: x
        parallel: {max_restarts: 2, restart: {causes: signal, progress_file: /abs/ckpt.pt}}
      - name: d
        run: x
        parallel: {max_restarts: 2, restart: {causes: [], exit_codes: 75}}
      - name: e
        run: x
        parallel: {max_restarts: 2}
  )");
  const RestartPolicy& a = spec.steps[0].parallel->restart;
  CHECK(a.is_set);
  CHECK(a.loc == Location{7, 7});
  CHECK_FALSE(a.on_exception);
  CHECK(a.on_exit_code);
  CHECK(a.on_signal);
  CHECK(a.exit_codes == std::vector<int>{75, 3});
  CHECK(a.min_attempt_s == 600);
  CHECK(a.progress_file == "/data/run/ckpt/last.pt");
  CHECK(a.progress_file_text == "ckpt/last.pt");

  const RestartPolicy& b = spec.steps[1].parallel->restart;
  CHECK(b.is_set);
  CHECK((b.on_exception && b.on_exit_code && b.on_signal));
  CHECK(b.exit_codes.empty());
  CHECK_FALSE(b.min_attempt_s);
  CHECK(b.progress_file.empty());

  const RestartPolicy& c = spec.steps[2].parallel->restart;
  CHECK((!c.on_exception && !c.on_exit_code && c.on_signal));
  CHECK(c.progress_file == "/abs/ckpt.pt");
  const RestartPolicy& d = spec.steps[3].parallel->restart;
  CHECK((!d.on_exception && !d.on_exit_code && !d.on_signal));
  CHECK(d.exit_codes == std::vector<int>{75});
  CHECK_FALSE(spec.steps[4].parallel->restart.is_set);
}

TEST_CASE("parallel.restart problems", "[spec]") {
  CHECK(errors(R"(
    steps:
      - name: a
        run: x
        parallel:
          max_restarts: 2
          restart:
            causes: [node_lost, sigkill, signal, signal]
            exit_codes: [0, 75, 75, 256, x]
            min_attempt: 0
            progress_file: ckpt/
            max_tries: 3
      - name: b
        run: x
        parallel:
          restart: {causes: []}
      - name: c
        run: x
        parallel:
          max_restarts: 0
          restart: [signal]
      - name: d
        run: x
        parallel:
          max_restarts: -1
          restart:
            max_restarts: 2
      - name: e
        run: x
        restart: {}
        parallel:
          causes: signal
  )") ==
        Lines{
            "flow.yaml:7:18: steps.a.parallel.restart.causes: node_lost cannot restart a step: a restart runs"
            " every rank again on the nodes the step started with, and a lost node is not replaced "
            "(docs/multinode.md); remove it",
            "flow.yaml:7:29: steps.a.parallel.restart.causes: expected 'exception', 'exit_code' or 'signal', "
            "got a string 'sigkill'",
            "flow.yaml:7:46: steps.a.parallel.restart.causes: cause 'signal' is listed twice",
            "flow.yaml:8:22: steps.a.parallel.restart.exit_codes: expected an exit code from 1 to 255, got 0",
            "flow.yaml:8:29: steps.a.parallel.restart.exit_codes: exit code 75 is listed twice",
            "flow.yaml:8:33: steps.a.parallel.restart.exit_codes: expected an exit code from 1 to 255, got "
            "256",
            "flow.yaml:8:38: steps.a.parallel.restart.exit_codes: expected an exit code from 1 to 255, got a "
            "string 'x'",
            "flow.yaml:9:22: steps.a.parallel.restart.min_attempt: expected a positive duration: seconds (90)"
            " or a string like '90s', '30m', '1h30m' or '2d', got 0",
            "flow.yaml:10:24: steps.a.parallel.restart.progress_file: expected a file path (relative to the "
            "step's workdir, or absolute), got a string 'ckpt/'",
            "flow.yaml:11:9: steps.a.parallel.restart: unknown key 'max_tries'; expected one of: causes, "
            "exit_codes, min_attempt, progress_file",
            "flow.yaml:15:7: steps.b.parallel.restart: restart: chooses which failures restart the step, but "
            "max_restarts is not set (0); set max_restarts to how many restarts it may start (torchrun's "
            "--max-restarts)",
            "flow.yaml:15:25: steps.b.parallel.restart.causes: no cause and no exit code would restart the "
            "step; name the causes that restart it (exception, exit_code, signal), or the exit codes under "
            "exit_codes",
            "flow.yaml:20:7: steps.c.parallel.restart: restart: chooses which failures restart the step, but "
            "max_restarts is 0; set max_restarts to how many restarts it may start (torchrun's "
            "--max-restarts)",
            "flow.yaml:20:16: steps.c.parallel.restart: expected a mapping of restart settings ('restart: {}'"
            " for the defaults), got a sequence",
            "flow.yaml:24:21: steps.d.parallel.max_restarts: expected a whole number of restarts (0 or more),"
            " got -1",
            "flow.yaml:26:9: steps.d.parallel.restart: key 'max_restarts' does not belong here; put it in "
            "'parallel:', next to 'restart:'",
            "flow.yaml:29:5: steps.e: key 'restart' does not belong here; put it under 'parallel:'",
            "flow.yaml:31:7: steps.e.parallel: key 'causes' does not belong here; put it under 'restart:'",
        });
}

// ---- writing a spec: spec_word, yaml_quoted, escape_templates ----------------

// Words that YAML or flowrun's templates would read otherwise than as written.
const std::vector<std::string> kHostileWords = {"",
                                                " ",
                                                "  lead",
                                                "trail  ",
                                                "null",
                                                "Null",
                                                "~",
                                                "true",
                                                "no",
                                                "1e3",
                                                "0o17",
                                                ".inf",
                                                "- x",
                                                "-",
                                                ":",
                                                "a: b",
                                                "#",
                                                "x #y",
                                                "'",
                                                "\"",
                                                "\\",
                                                "\\n",
                                                "\\x41",
                                                "a\nb",
                                                "\n",
                                                "\n\n",
                                                "\t",
                                                "\r",
                                                "\r\n",
                                                "[a, b]",
                                                "{a: b}",
                                                "&a",
                                                "*a",
                                                "!tag",
                                                "!!binary",
                                                "%YAML 1.2",
                                                "---",
                                                "...",
                                                "|",
                                                ">",
                                                "@",
                                                "`",
                                                "?",
                                                ",",
                                                "${args}",
                                                "y=${args}",
                                                "lr=${args.lr}",
                                                "sched.total=${steps.max}",
                                                "${steps.train.outputs}",
                                                "${step.x.outputs}",
                                                "${arg}",
                                                "$${args}",
                                                "$$${args}",
                                                "$$$${args}",
                                                "${",
                                                "$",
                                                "$$",
                                                "${$${",
                                                "${HOME}",
                                                "${X:-${args}}",
                                                "$HOME",
                                                "\x01\x1b[31m\x7f",
                                                "\xc2\x85",
                                                "\xc2\x9f",
                                                "\xc2\xa0",
                                                "\xe2\x80\xa8",
                                                "\xe2\x80\xa9",
                                                "\xef\xbb\xbf",
                                                "\xef\xbb\xbfx",
                                                "\xc3\xa9\xe6\xbc\xa2\xf0\x9f\x99\x82",
                                                "\xff",
                                                "a\xff${args}\xfe",
                                                "\xed\xa0\x80",
                                                "\xc0\xaf",
                                                "\xf4\x90\x80\x80",
                                                "\xe2\x82",
                                                "--",
                                                "-m",
                                                "--nproc-per-node=3",
                                                std::string(4000, 'x') + "${args}"};

TEST_CASE("spec_word: a run word reads back byte for byte, whatever it holds", "[spec_word]") {
  const RunLayout layout{"/w/.flowrun/runs/r1"};
  for (const std::string& word : kHostileWords) {
    const std::string text = "steps:\n  - name: t\n    run: [prog, " + spec_word(word) + ", \"${args}\"]\n";
    INFO(text);
    SpecParse parsed = parse_spec(text, "t.yaml", "/w");
    REQUIRE(parsed.diagnostics.empty());
    CHECK(expand_command(parsed.spec->steps[0], layout, {"${args}", "-"}) ==
          std::vector<std::string>{"prog", word, "${args}", "-"});
  }
}

TEST_CASE("yaml_quoted: a name YAML would read as null, a boolean or a number reads back as written",
          "[spec_word]") {
  for (const std::string name : {"null", "Null", "true", "no", "on", "1e3", "0o17", "0x1f", "12"}) {
    const std::string text = "name: " + yaml_quoted(name) + "\nsteps:\n  - name: " + yaml_quoted(name) +
                             "\n    run: [prog]\n    parallel: {}\n";
    INFO(text);
    SpecParse parsed = parse_spec(text, "t.yaml", "/w");
    REQUIRE(parsed.diagnostics.empty());
    CHECK(parsed.spec->name == name);
    CHECK(parsed.spec->steps[0].name == name);
  }
}

TEST_CASE("spec_word and yaml_quoted write", "[spec_word]") {
  CHECK(yaml_quoted("null") == "\"null\"");
  CHECK(yaml_quoted("") == "\"\"");
  CHECK(yaml_quoted("a\"b\\c\nd\te\r\x01\x7f") == R"("a\"b\\c\nd\te\r\x01\x7f")");
  CHECK(yaml_quoted("\xc2\x85|\xe2\x80\xa8|\xef\xbb\xbf|\xc3\xa9") == "\"\\x85|\\u2028|\\ufeff|\xc3\xa9\"");
  CHECK(escape_templates("y=${args} $${x} $") == "y=$${args} $$${x} $");
  CHECK(spec_word("lr=${args.lr}") == "\"lr=$${args.lr}\"");
  CHECK(spec_word("a\xff${") == "!!binary \"Yf8kJHs=\"");
}

TEST_CASE("a !!binary word that is not base64 is refused", "[spec_word]") {
  SpecParse parsed = parse_spec("steps:\n  - name: t\n    run: [prog, !!binary \"%%%\"]\n", "t.yaml", "/w");
  REQUIRE(parsed.diagnostics.size() == 1);
  CHECK(parsed.diagnostics[0].to_string() == "t.yaml:3:17: steps.t.run: a !!binary word is not valid base64");
}

TEST_CASE("use_python: the interpreter's path is a path, not a template", "[spec_word]") {
  SpecParse parsed =
      parse_spec("steps:\n  - name: t\n    run: [python3, \"$${args}\", \"${args}\"]\n", "t.yaml", "/w");
  REQUIRE(parsed.diagnostics.empty());
  use_python(*parsed.spec, "/tmp/${args}/$${x}/bin/python3");
  CHECK(expand_command(parsed.spec->steps[0], RunLayout{"/w/r"}, {"a"}) ==
        std::vector<std::string>{"/tmp/${args}/$${x}/bin/python3", "${args}", "a"});
}
