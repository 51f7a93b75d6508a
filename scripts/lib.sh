# Shared helpers for the scripts in this directory. Source it; do not run it.
# shellcheck shell=bash

# Repository root: the parent of the directory holding this file.
FLOWRUN_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export FLOWRUN_ROOT

# Debian packages needed to build flowrun itself (scripts/demo; python3 makes
# the manual page and completions, scripts/cli-docs) ...
FLOWRUN_BUILD_PACKAGES=(
  # lld links an optimized build with the functions a run executes together (cmake/Layout.cmake).
  g++ cmake ninja-build pkg-config python3 lld
  libcli11-dev libyaml-cpp-dev libfmt-dev libboost-dev libssl-dev nlohmann-json3-dev
)
# The test cluster of scripts/test's cluster phase (tests/cluster/cluster.sh):
# real Slurm and sshd in network namespaces; it starts every daemon itself.
FLOWRUN_CLUSTER_PACKAGES=(
  slurmctld slurmd slurm-client munge openssh-server openssh-client iproute2 util-linux
)
# ... and to build, test, fuzz and format-check it (scripts/test).
# python3-torch is Debian's CPU PyTorch for the end-to-end torch tests; it is
# imported with /usr/bin/python3, whatever python3 comes first in PATH.
FLOWRUN_PACKAGES=(
  "${FLOWRUN_BUILD_PACKAGES[@]}"
  catch2 python3 python3-torch
  # The end-to-end tests run under pytest (tests/conftest.py), each with a time limit.
  python3-pytest python3-pytest-timeout
  # tests/test_schema.py checks every example spec against specs/schema; it and the pods'
  # manifests (tests/pods/kube.py) are read with PyYAML.
  python3-jsonschema python3-yaml
  # scripts/test's package phase: cpack's Depends (dpkg-shlibdeps); `man -w` in
  # tests/test_installed.py; tests/test_install.py runs the zsh and fish completions.
  dpkg-dev man-db zsh fish
  # tests/e2e/helpers/fake_agent.py seals its frames (AES-256-GCM) as the agents do.
  python3-cryptography
  # tests/e2e/test_run_report.py opens flowrun report's pages in headless chromium.
  chromium
  clang clang-14 libclang-rt-14-dev clang-format
  "${FLOWRUN_CLUSTER_PACKAGES[@]}"
  # scripts/venv: the Lightning and fastai venv on top of Debian's torch.
  python3-venv python3-torchvision
  # scripts/test's package and wheel trees compile each source once for both.
  ccache
)

log() { printf '%s\n' "$*"; }
warn() { printf 'warning: %s\n' "$*" >&2; }
die() {
  printf 'error: %s\n' "$*" >&2
  exit 1
}

# Parallel jobs for builds and tests (default 2; override with FLOWRUN_JOBS).
flowrun_jobs() { printf '%s\n' "${FLOWRUN_JOBS:-2}"; }

# Runs "$@" up to 3 times, 10 s apart, for network steps that can fail once.
retry() {
  local attempt
  for attempt in 1 2 3; do
    "$@" && return 0
    ((attempt < 3)) || break
    warn "attempt $attempt failed: $*; retrying in 10 s"
    sleep 10
  done
  return 1
}

# Prints the packages from "$@" that dpkg does not report as installed.
missing_packages() {
  local pkg status
  for pkg in "$@"; do
    status="$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)"
    [[ "$status" == installed ]] || printf '%s\n' "$pkg"
  done
}

# Installs with apt-get whichever of "$@" (default: FLOWRUN_PACKAGES) is
# missing. Does nothing, and needs no privileges, when all are present.
ensure_packages() {
  local -a want=("$@")
  ((${#want[@]})) || want=("${FLOWRUN_PACKAGES[@]}")
  command -v dpkg-query >/dev/null 2>&1 ||
    die "dpkg-query not found: this script installs dependencies on Debian/Ubuntu only; install these yourself: ${want[*]}"

  local -a missing
  mapfile -t missing < <(missing_packages "${want[@]}")
  if ((${#missing[@]} == 0)); then
    log "all ${#want[@]} packages present: ${want[*]}"
    return 0
  fi
  log "missing packages: ${missing[*]}"

  local -a sudo=()
  if ((EUID != 0)); then
    command -v sudo >/dev/null 2>&1 || die "not root and no sudo: install as root: apt-get install ${missing[*]}"
    sudo=(sudo)
  fi
  retry "${sudo[@]}" apt-get -q update
  retry "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get -q install -y --no-install-recommends "${missing[@]}" </dev/null

  mapfile -t missing < <(missing_packages "${want[@]}")
  ((${#missing[@]} == 0)) || die "still missing after apt-get install: ${missing[*]}"
}
