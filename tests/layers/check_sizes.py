#!/usr/bin/env python3
"""No class over about 400 lines, no function over about 100, except those named.

  check_sizes.py SOURCE_DIR [--list]

Reads every lib/**/*.cpp and *.h, finds each class or struct body and each
function body (methods and free functions; lambdas count toward the function
around them) by their braces, and fails for any class longer than 400 lines or
function longer than 100 that docs/ARCHITECTURE.md's "## Size exceptions"
block does not name. It also fails for a named exception that no longer
needs to be one, so the list shrinks as the code does. --list prints every
class and function over half its limit.
"""
import glob
import os
import re
import sys

CLASS_LIMIT = 400
FUNCTION_LIMIT = 100
CONTROL = re.compile(r"^(if|for|while|switch|catch|do|else|try|return)\b|\b(if|for|while|switch|catch)\s*\(")


def number_before(text, i):
    j = i
    while j > 0 and (text[j - 1].isalnum() or text[j - 1] == "'"):
        j -= 1
    return j < i and text[j].isdigit()


def strip(text):
    """The source with comments, strings and character literals blanked (lines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "'" and number_before(text, i):
            out.append(c)  # a digit separator: 1'000'000
            i += 1
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (j - i - 1) + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def bodies(path):
    """(kind, name, first line, line count) of each class and outermost function body."""
    text = strip(open(path, encoding="utf-8").read())
    found, stack, stmt_start, line = [], [], 0, 1
    for i, c in enumerate(text):
        if c == "\n":
            line += 1
        elif c in ";}":
            if c == "}" and stack:
                kind, name, start, first = stack.pop()
                if kind in ("class", "function"):
                    found.append((kind, name, first, line - first + 1))
            stmt_start = i + 1
        elif c == "{":
            head = " ".join(text[stmt_start:i].split())
            head = re.sub(r"^(public|private|protected)\s*:\s*", "", head)
            lead = len(text[stmt_start:i]) - len(text[stmt_start:i].lstrip())
            first = line - text[stmt_start + lead:i].count("\n")
            in_function = any(k == "function" for k, *_ in stack)
            m_class = re.match(r"^(?:template\s*<.*>\s*)?(class|struct|union)\s+(?:\[\[.*?\]\]\s*)?(\w+)", head)
            if in_function:
                kind, name = "other", ""
            elif m_class and "(" not in head.split(m_class.group(2), 1)[0]:
                kind, name = "class", m_class.group(2)
            elif head.startswith(("namespace", "extern")) or re.match(r"^(enum|typedef)\b", head) or "=" in head.split("(")[0]:
                kind, name = "other", ""
            elif re.search(r"\)\s*(const|noexcept|override|final|mutable|&|&&|->\s*[\w:<>,\s*&]+|\s)*$", head) or \
                    re.search(r"\)\s*:\s*.*", head) and not CONTROL.search(head):
                m = re.search(r"([~\w:]+|operator\s*\S+)\s*\(", head)
                kind, name = ("function", m.group(1)) if m and not CONTROL.search(head) else ("other", "")
            else:
                kind, name = "other", ""
            stack.append((kind, name, i, first))
            stmt_start = i + 1
    return found


def exceptions(path):
    text = open(path, encoding="utf-8").read()
    m = re.search(r"^## Size exceptions\n.*?```text\n(.*?)```", text, re.S | re.M)
    if not m:
        sys.exit(f"{path}: no '## Size exceptions' section with a ```text block")
    named = {}
    for line in m.group(1).splitlines():
        parts = line.split(None, 2)
        if len(parts) >= 2 and not line.startswith("#"):
            named[(parts[0], parts[1])] = parts[2] if len(parts) > 2 else ""
    return named


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 1:
        sys.exit(__doc__)
    root = os.path.abspath(args[0])
    named = exceptions(f"{root}/docs/ARCHITECTURE.md")
    over, seen = [], set()
    for path in sorted(glob.glob(f"{root}/lib/**/*.cpp", recursive=True) + glob.glob(f"{root}/lib/**/*.h", recursive=True)):
        rel = os.path.relpath(path, root)
        for kind, name, first, count in bodies(path):
            limit = CLASS_LIMIT if kind == "class" else FUNCTION_LIMIT
            if "--list" in sys.argv and count > limit // 2:
                print(f"{count:5d}  {kind:8s} {rel}:{first} {name}")
            if count > limit:
                key = (rel, name)
                seen.add(key)
                if key not in named:
                    over.append(f"{rel}:{first}: {kind} {name} has {count} lines (the limit is {limit})")
    stale = [f"{f} {n}" for (f, n) in named if (f, n) not in seen]
    for o in over:
        print(f"FAIL  {o}: cut it, or name it with the reason in docs/ARCHITECTURE.md's size exceptions")
    for s in stale:
        print(f"FAIL  '{s}' is named in docs/ARCHITECTURE.md's size exceptions but is within its limit: remove it")
    print(f"{len(seen)} bodies over their limit, {len(named)} named; {len(over)} unnamed, {len(stale)} stale")
    return 1 if over or stale else 0


if __name__ == "__main__":
    sys.exit(main())
