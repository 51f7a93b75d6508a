#!/usr/bin/env python3
"""The build's target graph against docs/ARCHITECTURE.md's layer map.

  check_layers.py SOURCE_DIR BUILD_DIR

Configures SOURCE_DIR once more (configure only, in a scratch directory, with
BUILD_DIR's generator and compiler) with `cmake --graphviz`, and checks:

  * every flowrun target is in the map and every target of the map is built;
  * each target links exactly the flowrun targets the map says, PUBLIC and
    PRIVATE as it says, and only targets of a lower layer;
  * every folder of lib/ is the target of its name, its public headers are in
    its include/flowrun/, and no two modules have a header of the same name;
  * a module includes a header of another module exactly when it links it
    (link what you use, use what you link), and nothing in lib/ or apps/
    reaches a header through a relative path;
  * the build enforces it: a source of flowrun_base that includes a header of
    a higher module does not compile with flowrun_base's own flags;
  * the multi-node wing: the head and the agent never link each other (and a
    source of either does not compile when it includes the other's header),
    and only the control layer (lib/control) includes a socket API, but for
    the one file that holds the ranks' MASTER_PORT (SOCKET_EXCEPTIONS).
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

failures = []
checks = 0


def check(ok, label, detail=""):
    global checks
    checks += 1
    if ok:
        print(f"  ok    {label}")
    else:
        failures.append(label)
        print(f"  FAIL  {label}" + (f"\n        {detail}" if detail else ""))


def read_map(path):
    """The fenced block under '## Layer map': 'layer target public: ... private: ...'."""
    text = open(path, encoding="utf-8").read()
    m = re.search(r"^## Layer map\n.*?```text\n(.*?)```", text, re.S | re.M)
    if not m:
        sys.exit(f"{path}: no '## Layer map' section with a ```text block")
    layers, public, private = {}, {}, {}
    for n, line in enumerate(m.group(1).splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#") or line.startswith("layer"):
            continue
        parts = re.match(r"(\d+)\s+(\S+)\s+\S+\s*(?:public:(.*?))?\s*(?:private:(.*))?$", line)
        if not parts:
            sys.exit(f"{path}: layer map line {n} is not 'LAYER TARGET FOLDER public: ... private: ...': {line}")
        target = parts.group(2)
        layers[target] = int(parts.group(1))
        public[target] = set((parts.group(3) or "").split()) - {"-"}
        private[target] = set((parts.group(4) or "").split()) - {"-"}
    return layers, public, private


def cache_value(build, key):
    try:
        for line in open(os.path.join(build, "CMakeCache.txt"), encoding="utf-8"):
            if line.startswith(key + ":"):
                return line.split("=", 1)[1].strip()
    except OSError:
        pass
    return ""


def target_graph(source, build, scratch):
    """{target: (public deps, private deps)} of flowrun's own targets, from cmake --graphviz."""
    args = ["cmake", "-S", source, "-B", scratch, "-DFLOWRUN_TESTS=OFF", "-DFLOWRUN_BENCH=OFF",
            f"--graphviz={scratch}/graph.dot"]
    generator = cache_value(build, "CMAKE_GENERATOR")
    compiler = cache_value(build, "CMAKE_CXX_COMPILER")
    if generator:
        args += ["-G", generator]
    if compiler:
        args += [f"-DCMAKE_CXX_COMPILER={compiler}"]
    done = subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        sys.exit("cmake --graphviz failed:\n" + done.stderr)
    dot = open(f"{scratch}/graph.dot", encoding="utf-8").read()
    names = dict(re.findall(r'"(node\d+)" \[ label = "([^"]+)"', dot))
    graph = {}
    for name in names.values():
        if name == "flowrun" or name.startswith("flowrun_"):
            graph[name] = (set(), set())
    for a, b, attrs in re.findall(r'"(node\d+)" -> "(node\d+)"\s*(\[[^\]]*\])?', dot):
        src, dst = names[a], names[b]
        if src in graph and dst in graph:
            # solid: PUBLIC; dotted: PRIVATE; dashed: INTERFACE (none here)
            graph[src][1 if "dotted" in attrs else 0].add(dst)
    return graph


def module_headers(source):
    owner, clashes = {}, []
    for h in sorted(glob.glob(f"{source}/lib/*/include/flowrun/*.h")):
        module = os.path.relpath(h, f"{source}/lib").split(os.sep)[0]
        name = os.path.basename(h)
        if name in owner:
            clashes.append(f"{name} in {owner[name]} and {module}")
        owner[name] = module
    owner["version.h"] = "base"  # generated into the build tree
    return owner, clashes


def includes_of(files):
    found = {}
    for f in files:
        for n, line in enumerate(open(f, encoding="utf-8"), 1):
            m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
            if m:
                found.setdefault(m.group(1), []).append(f"{f}:{n}")
    return found


def probe_compile(entry, text):
    """Compiles `text` (-fsyntax-only) with the command line compile_commands.json gives `entry`."""
    with tempfile.TemporaryDirectory() as tmp:
        probe = os.path.join(tmp, "probe.cpp")
        with open(probe, "w") as f:
            f.write(text)
        argv, words = [], iter(entry["command"].split())
        for a in words:
            if a in ("-o", "-MT", "-MF"):
                next(words, None)  # and its value
            elif a not in ("-c", "-MD", "-MMD", "ccache"):
                argv.append(probe if a == entry["file"] else a)
        return subprocess.run(argv + ["-fsyntax-only"], cwd=entry["directory"], capture_output=True, text=True)


def probe_enforced(build):
    """(ok, detail): flowrun_base's own command line compiles a source that includes base's headers,
    and refuses one that includes plan.h, for that header alone."""
    try:
        commands = json.load(open(os.path.join(build, "compile_commands.json"), encoding="utf-8"))
    except OSError as e:
        return False, f"no compile_commands.json in {build}: {e}"
    # A source of lib/base, or the file a unity build (FLOWRUN_UNITY) compiles them in.
    base = [c for c in commands if c["file"].endswith("lib/base/error.cpp") or "/flowrun_base.dir/" in c["file"]]
    if not base:
        return False, "no source of flowrun_base is in compile_commands.json"
    control = probe_compile(base[0], '#include "flowrun/error.h"\n#include "flowrun/util.h"\n')
    if control.returncode != 0:
        return False, "the control probe (base's own headers) does not compile: " + control.stderr.strip()[:300]
    done = probe_compile(base[0], '#include "flowrun/error.h"\n#include "flowrun/plan.h"\n')
    return done.returncode != 0 and "flowrun/plan.h" in done.stderr, done.stderr.strip()[:300]


# A socket API: what a source must include to open, bind, accept or connect
# a socket, or to read this host's interfaces and resolve names to addresses.
SOCKET_API = re.compile(r"^\s*#\s*include\s*<(boost/asio\.hpp|boost/asio/ip/|boost/asio/local/|sys/socket\.h|"
                        r"sys/un\.h|netinet/|arpa/inet\.h|netdb\.h|ifaddrs\.h|net/if\.h)")
# lib/process/ports.cpp: the ranks' MASTER_PORT, bound (never listening, never
# connecting) until they start, and who listens on a taken port.
SOCKET_EXCEPTIONS = {"lib/process/ports.cpp"}


def socket_users(source):
    """The files of lib/ and apps/ outside lib/control that include a socket API, as 'file:line: include'."""
    found = []
    for f in sorted(glob.glob(f"{source}/lib/**/*.[ch]*", recursive=True) +
                    glob.glob(f"{source}/apps/**/*.[ch]*", recursive=True)):
        rel = os.path.relpath(f, source)
        if rel.startswith("lib/control/") or rel in SOCKET_EXCEPTIONS:
            continue
        for n, line in enumerate(open(f, encoding="utf-8"), 1):
            if SOCKET_API.match(line):
                found.append(f"{rel}:{n}: {line.strip()}")
    return found


def probe_refused(build, module, header):
    """(ok, detail): a source of `module` that includes flowrun/`header` does not compile with its flags."""
    try:
        commands = json.load(open(os.path.join(build, "compile_commands.json"), encoding="utf-8"))
    except OSError as e:
        return False, f"no compile_commands.json in {build}: {e}"
    own = [c for c in commands if f"/lib/{module}/" in c["file"]]  # its sources, or its unity files
    if not own:
        return False, f"no source of lib/{module} is in compile_commands.json"
    done = probe_compile(own[0], f'#include "flowrun/{header}"\n')
    return done.returncode != 0 and f"flowrun/{header}" in done.stderr, done.stderr.strip()[:300]


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    source, build = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    layers, public, private = read_map(f"{source}/docs/ARCHITECTURE.md")
    scratch = tempfile.mkdtemp(prefix="flowrun-layers-")
    try:
        graph = target_graph(source, build, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    print("the target graph against docs/ARCHITECTURE.md's layer map")
    check(set(graph) == set(layers), "every flowrun target is in the layer map, and every mapped target is built",
          f"built only: {sorted(set(graph) - set(layers))}; mapped only: {sorted(set(layers) - set(graph))}")
    for target in sorted(set(graph) & set(layers)):
        pub, priv = graph[target]
        check(pub == public[target] and priv == private[target],
              f"{target} links what the map says",
              f"built: public {sorted(pub)} private {sorted(priv)}; "
              f"map: public {sorted(public[target])} private {sorted(private[target])}")
        up = sorted(d for d in pub | priv if d in layers and layers[d] >= layers[target])
        check(not up, f"{target} (layer {layers[target]}) links only lower layers",
              f"links {', '.join(f'{d} (layer {layers[d]})' for d in up)}")

    print("folders, headers and includes")
    owner, clashes = module_headers(source)
    check(not clashes, "no two modules have a public header of the same name", "; ".join(clashes))
    check(not glob.glob(f"{source}/include/**/*.h", recursive=True),
          "no header is left in a shared include/ directory")
    modules = sorted(d for d in os.listdir(f"{source}/lib") if os.path.isdir(f"{source}/lib/{d}"))
    check(sorted(f"flowrun_{m}" for m in modules) == sorted(t for t in layers if t != "flowrun"),
          "every folder of lib/ is the target of its name", f"folders: {modules}")
    for m in modules:
        files = glob.glob(f"{source}/lib/{m}/**/*.cpp", recursive=True) + \
            glob.glob(f"{source}/lib/{m}/**/*.h", recursive=True)
        used, unknown = set(), []
        for inc, where in includes_of(files).items():
            if inc.startswith("flowrun/"):
                o = owner.get(inc[len("flowrun/"):])
                if o is None:
                    unknown.append(f"{where[0]}: {inc}")
                elif o != m:
                    used.add(f"flowrun_{o}")
        check(not unknown, f"every flowrun/ header that lib/{m} includes is some module's public header",
              "; ".join(unknown))
        target = f"flowrun_{m}"
        linked = public.get(target, set()) | private.get(target, set())
        check(used == linked, f"flowrun_{m} includes headers of exactly the modules it links",
              f"includes but does not link: {sorted(used - linked)}; links but never includes: {sorted(linked - used)}")
    relative = [w for f in glob.glob(f"{source}/lib/**/*.[ch]*", recursive=True) +
                glob.glob(f"{source}/apps/**/*.[ch]*", recursive=True)
                for inc, ws in includes_of([f]).items() if inc.startswith(("../", "/")) for w in ws]
    check(not relative, "nothing in lib/ or apps/ includes a header through a relative or absolute path",
          "; ".join(relative))

    print("the build enforces it")
    ok, detail = probe_enforced(build)
    check(ok, "a flowrun_base source that includes flowrun/plan.h does not compile with flowrun_base's flags",
          detail)

    print("the multi-node wing")
    for a, b in (("flowrun_head", "flowrun_agent"), ("flowrun_agent", "flowrun_head")):
        pub, priv = graph.get(a, (set(), set()))
        check(b not in pub | priv, f"{a} does not link {b}")
    for module, header in (("head", "agent.h"), ("agent", "remote_group.h")):
        ok, detail = probe_refused(build, module, header)
        check(ok, f"a source of lib/{module} that includes flowrun/{header} does not compile with its flags", detail)
    users = socket_users(source)
    check(not users, "only lib/control includes a socket API (and " + ", ".join(sorted(SOCKET_EXCEPTIONS)) + ")",
          "; ".join(users))

    print(f"\n{checks - len(failures)} of {checks} checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
