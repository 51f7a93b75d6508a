"""What flowrun installs beside the binary says what the binary does: the manual page
and the bash, zsh and fish completions (all made by scripts/cli-docs from
packaging/flowrun.1.md) cover every subcommand `flowrun --help` lists and every
option each one's --help lists.

  python3 -m pytest tests/test_install.py [--flowrun PATH] [-k NAME]

A failure names what is missing and where to add it. The .deb and the wheel themselves are
built, installed and removed by scripts/test's package and wheel phases, and what they
install is checked by tests/test_installed.py.
"""
import gzip
import importlib.machinery
import importlib.util
import os
import re
import shutil
import subprocess

import pytest

from flowrun_testlib import clean_env, run

pytestmark = pytest.mark.install

SOURCE = "packaging/flowrun.1.md"
SUBCOMMANDS = re.compile(r"^Subcommands:\n((?:  .*\n)+)", re.M)  # a long description wraps
OPTION_LINE = re.compile(r"^  (-[^\s]+)", re.M)
UNIVERSAL = {"-h", "--help"}  # every subcommand has them; the man page says so once


def cli_docs(repo_root):
    """scripts/cli-docs as a module (its load() reads packaging/flowrun.1.md)."""
    loader = importlib.machinery.SourceFileLoader("cli_docs", os.path.join(repo_root, "scripts", "cli-docs"))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader("cli_docs", loader))
    loader.exec_module(module)
    return module


def help_of(flowrun, *args):
    r = run([flowrun, *args, "--help"], cwd=None, env=clean_env())
    assert r.returncode == 0, f"flowrun {' '.join(args)} --help exited {r.returncode}: {r.stderr}"
    return r.stdout


def options_in(help_text):
    """The options a --help lists: the names at the start of its option lines."""
    names = []
    for head in OPTION_LINE.findall(help_text):
        names += [n for n in head.split(",") if n.startswith("-")]
    return names


@pytest.fixture(scope="module")
def cli(flowrun):
    """{"": flowrun's own options, SUB: SUB's options} from the binary's --help."""
    top = help_of(flowrun)
    m = SUBCOMMANDS.search(top)
    assert m, "flowrun --help has no Subcommands: section\n" + top
    subs = [line.split()[0] for line in m.group(1).splitlines() if not line.startswith("   ")]
    return {"": options_in(top), **{s: options_in(help_of(flowrun, s)) for s in subs}}


@pytest.fixture(scope="module")
def made(repo_root, tmp_path_factory):
    """The files scripts/cli-docs makes, as the build makes them."""
    out = tmp_path_factory.mktemp("cli-docs")
    subprocess.run([os.path.join(repo_root, "scripts", "cli-docs"), "--version", "0", "--out", str(out)],
                   check=True, timeout=60)
    return out


def man_sections(made):
    """{"": the OPTIONS section, SUB: the section of `flowrun SUB`} of the page, as plain text."""
    roff = gzip.decompress((made / "flowrun.1.gz").read_bytes()).decode()
    text = re.sub(r"\\f[BIRP]|\\&", "", roff).replace("\\-", "-").replace("\\e", "\\")
    sections = {}
    for head, body in re.findall(r"^\.S[HS] (.*)\n((?:(?!\.S[HS] ).*\n)*)", text, re.M):
        m = re.match(r"flowrun (\S+)", head)
        if m:
            sections[m.group(1)] = body
        elif head == "OPTIONS":
            sections[""] = body
    return sections


def where(sub):
    return "flowrun's own options (# OPTIONS)" if not sub else f"'## `flowrun {sub}`'"


def test_man_page_covers_the_help(cli, made, repo_root, check):
    sections = man_sections(made)
    model = cli_docs(repo_root).load(os.path.join(repo_root, SOURCE))
    missing = []
    for sub, options in cli.items():
        if sub not in sections:
            missing.append(f"subcommand '{sub}': add a '## `flowrun {sub}`' section under # COMMANDS")
            continue
        listed = model["options"] if not sub else model["commands"][sub].options
        text = sections[sub]
        if sub and model["commands"][sub].inherits:  # options-from: they are in the other's section
            text += sections.get(model["commands"][sub].inherits[0], "")
        for name in options:
            if sub and name in UNIVERSAL:
                continue
            shown = re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text)
            if not shown or name not in {n for o in listed for n in o.names}:
                missing.append(f"{name} of flowrun{' ' + sub if sub else ''}: add a '`{name}` *ARG*' term "
                               f"(a ':   ' line below it) to {where(sub)}")
    check(not missing, f"{SOURCE} covers every subcommand and option --help lists",
          "missing:\n  " + "\n  ".join(missing))
    stale = [f"'## `flowrun {name}`' (flowrun --help does not list {name})"
             for name in model["commands"] if name not in cli]
    for sub, options in cli.items():
        if sub in model["commands"] or not sub:
            listed = model["options"] if not sub else model["commands"][sub].options
            stale += [f"{n} in {where(sub)} (its --help does not list it)"
                      for o in listed for n in o.names if n.startswith("--") and n not in options]
    check(not stale, f"{SOURCE} documents only what flowrun has", "no longer there:\n  " + "\n  ".join(stale))


def bash_complete(made, words, cwd):
    """COMPREPLY of the bash completion for the command line `words` (the last is being typed)."""
    script = (f'source {made / "flowrun.bash"}; COMP_WORDS=("$@"); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); '
              '_flowrun; printf "%s\\n" "${COMPREPLY[@]}"')
    r = subprocess.run(["bash", "-c", script, "bash", *words], capture_output=True, text=True, cwd=cwd, timeout=60)
    assert r.returncode == 0 and not r.stderr, f"bash completion of {words}: exit {r.returncode}: {r.stderr}"
    return set(r.stdout.split())


def test_bash_completion(cli, made, scratch, check):
    subs = [s for s in cli if s]
    got = bash_complete(made, ["flowrun", ""], scratch)
    check(set(subs) <= got, "flowrun <TAB> offers every subcommand",
          f"missing: {sorted(set(subs) - got)} (add a '## `flowrun NAME`' section to {SOURCE})")
    for sub, options in cli.items():
        got = bash_complete(made, ["flowrun", *([sub] if sub else []), "-"], scratch)
        lacking = sorted(set(options) - got - ({"-h"} if sub else set()))
        check(not lacking, f"flowrun {sub + ' ' if sub else ''}-<TAB> offers every option",
              f"missing: {lacking} (add them to {where(sub)} in {SOURCE})")
    got = bash_complete(made, ["flowrun", "--color", ""], scratch)
    check(got == {"auto", "always", "never"}, "flowrun --color <TAB> offers its values", str(sorted(got)))
    got = bash_complete(made, ["flowrun", "--cpus", ""], scratch)
    check(got == set(), "flowrun --cpus <TAB> offers no subcommand", str(sorted(got)))
    open(os.path.join(scratch, "train.yaml"), "w").close()
    got = bash_complete(made, ["flowrun", "plan", "tr"], scratch)
    check(got == {"train.yaml"}, "flowrun plan tr<TAB> completes the spec file", str(sorted(got)))


@pytest.mark.skipif(shutil.which("fish") is None, reason="no fish (apt-get install fish, or scripts/test --phase deps)")
def test_fish_completion(cli, made, scratch, check):
    def complete(line):
        r = subprocess.run(["fish", "--no-config", "-c", f"source {made / 'flowrun.fish'}; complete -C '{line}'"],
                           capture_output=True, text=True, cwd=scratch, timeout=60)
        assert r.returncode == 0 and not r.stderr, f"fish completion of {line!r}: {r.stderr}"
        return {entry.split("\t")[0] for entry in r.stdout.splitlines()}

    subs = [s for s in cli if s]
    got = complete("flowrun ")
    check(set(subs) <= got, "fish: flowrun <TAB> offers every subcommand", f"missing: {sorted(set(subs) - got)}")
    for sub, options in cli.items():
        got = complete(f"flowrun {sub + ' ' if sub else ''}-")
        lacking = sorted(n for n in options if n.startswith("--") and n not in got and n != "--help")
        check(not lacking, f"fish: flowrun {sub + ' ' if sub else ''}-<TAB> offers every long option",
              f"missing: {lacking} (add them to {where(sub)} in {SOURCE})")


def test_zsh_completion(cli, made, check):
    text = (made / "_flowrun").read_text()
    check(text.startswith("#compdef flowrun\n"), "zsh: a #compdef file", text[:80])
    if shutil.which("zsh"):
        r = subprocess.run(["zsh", "-n", str(made / "_flowrun")], capture_output=True, text=True, timeout=60)
        check(r.returncode == 0, "zsh: the completion parses (zsh -n)", r.stderr)
    commands = re.search(r"commands=\(\n(.*?)\n  \)", text, re.S)
    listed = set(re.findall(r"^    '([\w-]+):", commands.group(1), re.M)) if commands else set()
    subs = [s for s in cli if s]
    check(set(subs) <= listed, "zsh: every subcommand is offered", f"missing: {sorted(set(subs) - listed)}")
    for sub, options in cli.items():
        if sub:
            branch = re.search(rf"^        {re.escape(sub)}\)\n(.*?)\n          ;;", text, re.S | re.M)
            body = branch.group(1) if branch else ""
        else:
            body = text.split("'1: :->first'")[0]
        lacking = sorted(n for n in options if f"'{n}[" not in body and n not in UNIVERSAL)
        check(not lacking, f"zsh: flowrun {sub + ' ' if sub else ''}-<TAB> offers every option",
              f"missing: {lacking} (add them to {where(sub)} in {SOURCE})")


def test_readme_lists_every_package(repo_root, check):
    # Every Debian package scripts/test installs, but the test cluster's, is named
    # in README.md's "Building by hand", for those who install them by hand.
    def packages(array):
        r = subprocess.run(["bash", "-c", f'source scripts/lib.sh; printf "%s\\n" "${{{array}[@]}}"'],
                           cwd=repo_root, capture_output=True, text=True, check=True, timeout=60)
        return r.stdout.split()

    wanted = [p for p in packages("FLOWRUN_PACKAGES") if p not in packages("FLOWRUN_CLUSTER_PACKAGES")]
    readme = open(os.path.join(repo_root, "README.md")).read()
    m = re.search(r"^## Building by hand\n(.*?)^## ", readme, re.S | re.M)
    named = set(" ".join(re.findall(r"`([^`]+)`", m.group(1) if m else "")).split())
    lacking = [p for p in wanted if p not in named]
    check(m and not lacking, "README.md's Building by hand names every package of scripts/lib.sh",
          f"missing: {' '.join(lacking)}")
