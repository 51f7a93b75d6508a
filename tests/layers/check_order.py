#!/usr/bin/env python3
"""Checks that the flowrun binary was linked as cmake/Layout.cmake says (ctest 'order').

  check_order.py ORDER_FILE FLOWRUN [--ordered] [--release]

Always: most of the functions cmake/startup.order lists exist in the binary under those names (a list
gone stale after the code moved on orders nothing: rerun scripts/order-functions). With --release (the
Release build the list is made from, as the package phase builds it): nearly all of them (95%); a list
made from another shape of build (each source compiled on its own where the build now compiles each
module as one file) still finds most of its names but misses those the run now executes, and the code a
run maps grows (5.8 MiB peak against 4.3 for the same code, 8 workers of /bin/true). With --ordered (the
build linked with lld's --symbol-ordering-file): the listed functions the binary has lie in the list's
order (9 in 10 at least: a section holding two listed functions goes where the first one is listed) and
together (an object compiled without -ffunction-sections, libstdc++.a's, brings its other functions
along), so that a run's code is mapped in few 64 KiB windows. Reads the symbols with nm. Under a second.
"""
import subprocess
import sys

MIN_FOUND = 0.8  # of the listed functions, the share the binary must define
MIN_FOUND_RELEASE = 0.95  # the same, in the Release build the list is made from


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    ordered = "--ordered" in sys.argv[1:]
    least = MIN_FOUND_RELEASE if "--release" in sys.argv[1:] else MIN_FOUND
    if len(args) != 2:
        sys.exit(__doc__)
    order_file, binary = args
    with open(order_file) as f:
        listed = [line.strip() for line in f if line.strip() and not line.startswith("#")]
    out = subprocess.run(["nm", "--defined-only", binary], capture_output=True, text=True, check=True).stdout
    where = {}
    text = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "tTwW":
            where.setdefault(parts[2], int(parts[0], 16))
            text.append(int(parts[0], 16))
    found = [name for name in listed if name in where]
    share = len(found) / len(listed) if listed else 0
    failed = []
    print(f"  {len(found)} of the {len(listed)} listed functions are in the binary ({share:.0%})")
    if share < least:
        failed.append(f"fewer than {least:.0%} of cmake/startup.order's functions are in {binary}: the list is "
                      "stale; rerun scripts/order-functions on a Release build and commit it")
    if ordered and found:
        # Two names can share an address (an alias, identical code folded): count each address once.
        addresses = []
        for name in found:
            if where[name] not in addresses:
                addresses.append(where[name])
        out_of_order = sum(1 for a, b in zip(addresses, addresses[1:]) if b < a)
        last = max(addresses)
        listed_at, every = set(addresses), set(text)
        unlisted_before = sum(1 for a in every if a < last and a not in listed_at)
        print(f"  in the list's order: {len(addresses) - 1 - out_of_order} of {len(addresses) - 1} neighbours; "
              f"unlisted functions among them: {unlisted_before}")
        if out_of_order > 0.1 * len(addresses):
            failed.append(f"{out_of_order} listed functions lie before the one listed ahead of them: the link did not "
                          "follow cmake/startup.order (lld's --symbol-ordering-file)")
        # Some come along: an object compiled without -ffunction-sections (libstdc++.a's) is placed whole.
        if unlisted_before > 2 * len(listed_at):
            failed.append(f"{unlisted_before} functions the list does not name lie among the listed ones: the "
                          "listed ones are not together")
    for message in failed:
        print("FAIL " + message)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
