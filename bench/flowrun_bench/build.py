"""The programs the cases run: a release flowrun (with bench/rdzv_clients for the multi-node cases) from the
working tree or a commit's tree, and the C helpers of bench/."""

import os
import shutil
import subprocess

from .common import BENCH_SRC, BIN, HELPERS, ROOT, W, die, log, run_quiet, short


def export_commit(rev, skip_build):
    """Unpacks the tree of commit rev into build/bench/src (once per commit); returns (source dir, build dir)."""
    src = BIN / "src"
    stamp = src / ".flowrun-bench-commit"
    if not (stamp.exists() and stamp.read_text() == rev):
        if skip_build:
            die(f"build/bench/release was not built from {rev[:12]}; run without --skip-build")
        log(f"exporting commit {rev[:12]} to {short(src)}")
        shutil.rmtree(src, ignore_errors=True)
        src.mkdir(parents=True)
        archive = subprocess.Popen(["git", "-C", str(ROOT), "archive", rev], stdout=subprocess.PIPE)
        untar = subprocess.run(["tar", "-x", "-C", str(src)], stdin=archive.stdout)
        archive.stdout.close()
        if archive.wait() != 0 or untar.returncode != 0:
            die(f"could not export commit {rev}")
        stamp.write_text(rev)
    return src, BIN / "release"


def build(skip, source, release, clients=False):
    """Builds flowrun (and with `clients` bench/rdzv_clients, which links flowrun's protocol library) in
    `release` from `source`, and the C helpers of bench/ in build/bench."""
    W.flowrun = release / "flowrun"
    W.rdzv_clients = release / "bench" / "rdzv_clients"
    if not skip:
        # A tree made from other sources (another commit's export, or the working tree) is made again
        # from scratch: its build files may name files the sources no longer have.
        origin = release / ".flowrun-bench-source"
        stamp = source / ".flowrun-bench-commit"
        wanted = f"{source}\n{stamp.read_text() if stamp.exists() else 'working tree'}\n"
        if release.exists() and (not origin.exists() or origin.read_text() != wanted):
            log(f"{short(release)} was built from other sources; making it again")
            shutil.rmtree(release)
        cache = release / "CMakeCache.txt"
        if not (release / "build.ninja").exists() or (clients and "FLOWRUN_BENCH:BOOL=ON" not in cache.read_text()):
            log(f"configuring {short(release)}")
            r = run_quiet(["cmake", "-S", str(source), "-B", str(release), "-G", "Ninja",
                           "-DCMAKE_BUILD_TYPE=Release", "-DFLOWRUN_TESTS=OFF", "-DFLOWRUN_DEVELOPER=OFF"]
                          + (["-DFLOWRUN_BENCH=ON"] if clients else [])
                          + (["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"] if shutil.which("ccache") else []))
            if r.returncode != 0:
                die("cmake configure failed:\n" + r.stdout)
            origin.write_text(wanted)
        targets = ["flowrun"] + (["rdzv_clients"] if clients else [])
        log(f"building {', '.join(short(release / t) for t in targets)}")
        r = run_quiet(["cmake", "--build", str(release), "--target"] + targets + ["-j2"])
        if r.returncode != 0:
            die("building failed (a tree without bench/CMakeLists.txt has no rdzv_clients: the multi-node cases "
                "need flowrun's own protocol library):\n" + r.stdout[-3000:])
    BIN.mkdir(parents=True, exist_ok=True)
    cc = os.environ.get("CC", "cc")
    for name in HELPERS:
        src, out = BENCH_SRC / f"{name}.c", BIN / name
        if out.exists() and out.stat().st_mtime >= src.stat().st_mtime:
            continue
        r = run_quiet([cc, "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(out), str(src)])
        if r.returncode != 0:
            die(f"compiling bench/{name}.c failed:\n" + r.stdout)
    if not W.flowrun.exists():
        die(f"{W.flowrun} was not built")
    if clients and not W.rdzv_clients.exists():
        die(f"{W.rdzv_clients} was not built")

