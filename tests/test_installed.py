"""An installed flowrun works as a user finds it: the .deb installed with apt-get (prefix /usr)
or the wheel installed into a venv (prefix: the venv). One module checks both; scripts/test's
package and wheel phases install, run it, then remove.

  python3 -m pytest tests/test_installed.py --installed PREFIX --package FILE [-k NAME]

--package is the .deb or the .whl that was installed: its kind selects the checks marked `deb`
or `wheel` (the others are for both) and its version is the one `flowrun --version` must say.
Without --installed every test is skipped (the run exits 125). A check that fails names the
file or command and what it found."""
import os
import re
import shutil
import subprocess
import zipfile
from dataclasses import dataclass

import pytest

from flowrun_testlib import clean_env, tables

pytestmark = pytest.mark.installed

# What the wheel's binary may need at run time: glibc (libc, libm, the dynamic loader, the
# kernel's vDSO) and libstdc++ with libgcc_s. Everything else is linked in
# (FLOWRUN_STATIC_DEPS, cmake/Dependencies.cmake) or dlopened.
WHEEL_ALLOWED_LIBS = re.compile(r"linux-vdso\.so\.1|libc\.so\.6|libm\.so\.6|libstdc\+\+\.so\.6|libgcc_s\.so\.1"
                                r"|/lib[0-9]*/ld-linux[-a-z0-9_]*\.so\.[0-9]+|ld-linux[-a-z0-9_]*\.so\.[0-9]+")


@dataclass
class Install:
    prefix: str  # /usr for the .deb, the venv for the wheel
    kind: str  # "deb" or "wheel"
    version: str  # the package's, as its file says

    @property
    def flowrun(self):
        return os.path.join(self.prefix, "bin", "flowrun")

    def env(self):
        """The environment of a user with PREFIX/bin first in PATH (the venv activated, for the
        wheel), without what steers flowrun (clean_env) and without MANPATH, so that man-db
        looks in share/man beside each bin/ of PATH."""
        env = clean_env(PATH=os.path.join(self.prefix, "bin") + os.pathsep + os.environ.get("PATH", ""))
        del env["FLOWRUN_HOSTNAME"]  # the host's own name, as for a user
        env.pop("MANPATH", None)
        if self.kind == "wheel":
            env["VIRTUAL_ENV"] = self.prefix
        return env

    def share(self, *parts):
        return os.path.join(self.prefix, "share", *parts)


def package_of(path):
    """(kind, version) of a .deb (its Version field) or a .whl (its file name's version)."""
    name = os.path.basename(path)
    if name.endswith(".deb"):
        r = subprocess.run(["dpkg-deb", "--field", path, "Version"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, f"dpkg-deb --field {path} Version: {r.stderr}"
        return "deb", r.stdout.strip()
    if name.endswith(".whl"):
        assert zipfile.is_zipfile(path), f"{path} is not a wheel (not a zip file)"
        return "wheel", name.split("-")[1]
    raise pytest.UsageError(f"--package {path}: not a .deb or a .whl")


@pytest.fixture(scope="module")
def installed(request):
    prefix, package = request.config.getoption("installed"), request.config.getoption("package")
    if not prefix:
        pytest.skip("no --installed PREFIX (scripts/test's package and wheel phases give it)")
    if not package:
        raise pytest.UsageError("--installed needs --package FILE: the .deb or .whl that was installed")
    return Install(os.path.abspath(prefix), *package_of(package))


@pytest.fixture(autouse=True)
def _only_for_its_kind(request, installed):
    """A test marked `deb` or `wheel` runs only for that kind of install."""
    for kind in ("deb", "wheel"):
        if request.node.get_closest_marker(kind) and installed.kind != kind:
            pytest.skip(f"only for the {kind}; this is the {installed.kind}")


def run_installed(installed, argv, cwd=None, timeout=60):
    return subprocess.run(argv, cwd=cwd, env=installed.env(), capture_output=True, text=True, timeout=timeout)


def test_first_in_path(installed):
    r = run_installed(installed, ["bash", "-c", "command -v flowrun"])
    assert r.stdout.strip() == installed.flowrun, \
        f"with {installed.prefix}/bin first in PATH, flowrun is '{r.stdout.strip()}', not {installed.flowrun}"


def test_version(installed):
    r = run_installed(installed, [installed.flowrun, "--version"])
    out = r.stdout.rstrip("\n")
    assert r.returncode == 0 and re.fullmatch(rf"flowrun {re.escape(installed.version)} \(commit .*, protocol .*\)",
                                              out), \
        f"{installed.flowrun} --version says '{out}' (exit {r.returncode}), the {installed.kind} is {installed.version}"


def test_libraries_found(installed):
    r = subprocess.run(["ldd", installed.flowrun], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"ldd {installed.flowrun} failed:\n{r.stdout}{r.stderr}"
    assert "not found" not in r.stdout, f"ldd {installed.flowrun} finds not every library:\n{r.stdout}"


@pytest.mark.wheel
def test_wheel_needs_only_glibc_and_libstdcxx(installed):
    r = subprocess.run(["ldd", installed.flowrun], capture_output=True, text=True, timeout=60)
    names = [line.split()[0] for line in r.stdout.splitlines() if line.split()]
    extra = [name for name in names if not WHEEL_ALLOWED_LIBS.fullmatch(name)]
    assert r.returncode == 0 and not extra, \
        f"the wheel's flowrun needs {' '.join(extra)} at run time; only glibc and libstdc++ may be shared " \
        f"(FLOWRUN_STATIC_DEPS in cmake/Dependencies.cmake links the rest in)\n{r.stdout}"
    needs = [r.stdout.rstrip()]
    if shutil.which("objdump"):  # what it asks of the system, for the record
        symbols = subprocess.run(["objdump", "-T", installed.flowrun], capture_output=True, text=True,
                                 timeout=60).stdout
        for lib in ("GLIBC", "GLIBCXX"):
            found = set(re.findall(rf"\b{lib}_([0-9.]+)", symbols))
            if found:
                needs.append(f"{lib}_{max(found, key=lambda v: tuple(int(x) for x in v.split('.')))}")
    tables.TABLES["what the wheel's flowrun needs (ldd, the newest symbol versions)"] = "\n".join(needs)


def test_files(installed):
    # Debian's zsh reads vendor-completions; under any other prefix, site-functions (packaging/CMakeLists.txt).
    zsh = "vendor-completions" if installed.prefix == "/usr" else "site-functions"
    files = [installed.share("man", "man1", "flowrun.1.gz"),
             installed.share("bash-completion", "completions", "flowrun"), installed.share("zsh", zsh, "_flowrun"), installed.share("fish", "vendor_completions.d", "flowrun.fish"),
             installed.share("doc", "flowrun", "README.md"),
             installed.share("doc", "flowrun", "specs", "examples", "quickstart.yaml")]
    missing = [f for f in files if not os.path.isfile(f)]
    hint = " (a path-exclude in /etc/dpkg/dpkg.cfg.d?)" if installed.kind == "deb" else ""
    assert not missing, f"the {installed.kind} did not install {' '.join(missing)}{hint}"


def test_manual_page(installed):
    if not shutil.which("man"):
        pytest.skip("no man (man-db)")
    r = run_installed(installed, ["man", "-w", "flowrun"])
    assert r.returncode == 0, f"man -w flowrun finds no manual page: {r.stderr}"
    want = installed.share("man", "man1", "flowrun.1.gz")
    assert r.stdout.strip() == want, f"man -w flowrun: {r.stdout.strip()}, not the {installed.kind}'s {want}"


def test_bash_completion(installed):
    script = (f'source {installed.share("bash-completion", "completions", "flowrun")}; '
              'COMP_WORDS=(flowrun pl); COMP_CWORD=1; _flowrun; echo "${COMPREPLY[*]}"')
    r = run_installed(installed, ["bash", "-c", script])
    assert r.stdout.strip() == "plan", \
        f"the installed bash completion of 'flowrun pl' gives '{r.stdout.strip()}', not 'plan'\n{r.stderr}"


def test_quickstart(installed, tmp_path):
    """The quickstart from the installed examples, as docs/quickstart.md runs it, on 2 CPU workers,
    in a directory of its own: the steps' python3 is the first in PATH (Debian's, or the venv's,
    which imports Debian's torch through --system-site-packages)."""
    torch = run_installed(installed, ["python3", "-c", "import torch"])
    assert torch.returncode == 0, f"the python3 first in PATH cannot import torch (python3-torch):\n{torch.stderr}"
    shutil.copytree(installed.share("doc", "flowrun", "specs", "examples"), tmp_path, dirs_exist_ok=True)
    r = run_installed(installed, ["flowrun", "--cpus", "2", "quickstart.yaml"], cwd=tmp_path, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"the quickstart failed from the installed flowrun (exit {r.returncode}, " \
                              f"in {tmp_path}):\n{out}"
    assert "succeeded: 3 steps" in out, f"the quickstart did not say it succeeded:\n{out}"
