"""The single-node part of the page: cases (a) to (d)."""

from .render import (GOAL_FOLD_FRACTION, GOAL_LOG_FRACTION, GOAL_RSS_MIB, GOAL_STARTUP_FLOOR, GOAL_STARTUP_RATIO,
                     GOAL_TEARDOWN_MS, GOAL_TEARDOWN_RATIO, NODE_CASES, WORKERS, apart, cell, commit_option, failure_notes, machine_table, measured, med,
                     not_measured, remarks, spec_block, spread, verdict)


def table(w, title, rows, key, unit, fmt):
    """A case's table: one row per launcher, median and range of one figure, runs and command."""
    w(f"| {title} | median | min – max | runs | command |")
    w("| --- | --- | --- | --- | --- |")
    for label, row in rows:
        missing = not_measured(row)
        if missing:
            w(f"| {label} | {missing} | | | {cell(row['command'])} |")
            continue
        median, rng = spread(row["figures"][key], fmt)
        w(f"| {label} | {median} {unit} | {rng} {unit} | {row['figures']['counted']} | {cell(row['command'])} |")
    w("")


def startup(w, rec, part):
    R, F = rec["rows"], rec["figures"]
    w("## (a) Start-up and exit: 8 workers of `/bin/true`\n")
    apart(w, part, rec["case"], "node")
    w("Wall time from the launcher's fork to its exit, measured by `bench/timeit` "
      "(fork, exec, wait4 on a pidfd).\n")
    rows = [("flowrun", R["flowrun"]), ("torchrun", R["torchrun"]),
            ("floor: fork/exec 8 `/bin/true`, wait all (`bench/spawn.c`)", R["floor"])]
    if "floor_files" in R:
        rows.append(("floor keeping a run's record (`bench/spawn.c -t`)", R["floor_files"]))
    table(w, "launcher", rows, "wall_ms", "ms", "{:.2f}")
    r = F.get("torchrun_ratio")
    if r:
        w(f"- flowrun is **{r:.0f}x** faster than torchrun (goal: at least {GOAL_STARTUP_RATIO:.0f}x): "
          f"{verdict(r >= GOAL_STARTUP_RATIO)}.")
    else:
        w(f"- Ratio to torchrun: not available (goal: at least {GOAL_STARTUP_RATIO:.0f}x).")
    if F.get("floor_ratio"):
        w(f"- flowrun takes **{F['floor_ratio']:.1f}x** the floor's time (goal: at most {GOAL_STARTUP_FLOOR:.0f}x): "
          f"{verdict(F['floor_ratio'] <= GOAL_STARTUP_FLOOR)}.")
    if F.get("files_floor_ratio"):
        w(f"- Against the floor that also keeps a run's record (`spawn -t DIR`: each rank's directory and out/, its "
          f"stdout.log and stderr.log, an end.json written whole as it is reaped, and a run record written whole "
          f"at the start and the end, with a results record), flowrun takes **{F['files_floor_ratio']:.1f}x**; "
          f"keeping that record alone takes that floor {F['files_cost_ratio']:.1f}x the bare floor's time.")
    remarks(w, rec)
    w("\nThe flowrun spec (`bench/true.yaml`):\n")
    w(spec_block(rec, "yaml"))


def teardown(w, rec, part):
    R, F = rec["rows"], rec["figures"]
    w("## (b) Teardown: rank 1 exits 3 at once, the other 7 ranks sleep 60 s\n")
    apart(w, part, rec["case"], "node")
    w("Time from rank 1's exit to the launcher's exit: rank 1 (`bench/failer.c`) writes `CLOCK_REALTIME` "
      "to a file just before `_exit(3)`; `bench/timeit` reads `CLOCK_REALTIME` as soon as its `wait4` "
      "on the launcher returns. The difference covers noticing the failure, stopping the 7 sleeping "
      "ranks, reaping them and exiting. Both launchers run 8 workers.\n")
    both = [("flowrun", R["flowrun"]), ("torchrun", R["torchrun"])]
    table(w, "launcher", both, "teardown_ms", "ms", "{:.2f}")
    table(w, "whole run, same runs", both, "wall_ms", "ms", "{:.1f}")
    codes = {n: R[n]["figures"].get("exit_codes") or "—" for n in ("flowrun", "torchrun")}
    w(f"Exit codes seen: flowrun {codes['flowrun']}, torchrun {codes['torchrun']} "
      "(the failing rank's code is 3).\n")
    fm = med(R["flowrun"], "teardown_ms")
    r = F.get("torchrun_ratio")
    if fm is not None:
        w(f"- flowrun tears down in **{fm:.2f} ms** (goal: within {GOAL_TEARDOWN_MS:.0f} ms): "
          f"{verdict(fm <= GOAL_TEARDOWN_MS)}.")
    if r:
        w(f"- flowrun is **{r:.0f}x** faster than torchrun (goal: at least {GOAL_TEARDOWN_RATIO:.0f}x): "
          f"{verdict(r >= GOAL_TEARDOWN_RATIO)}.")
    remarks(w, rec)
    w("\nThe flowrun spec (`bench/teardown.yaml`; `@BIN@` is `build/bench`, `@STAMP@` a scratch file):\n")
    w(spec_block(rec, "text"))


def memory(w, rec, part):
    R, F = rec["rows"], rec["figures"]
    w("## (c) Peak memory of the launcher process, 8 workers of `/bin/true`\n")
    apart(w, part, rec["case"], "node")
    w("`ru_maxrss` from `wait4` on the launcher's own pid, taken by its direct parent `bench/timeit` (not "
      "`RUSAGE_CHILDREN` of a shell, which would fold in every worker). Linux reports there the larger of "
      "the process's own peak and the peaks of the children it reaped; the last row shows a worker's peak, "
      "so a launcher figure above it is the launcher's own. `VmHWM`, read from `/proc/PID/status` every "
      "millisecond while the launcher runs, counts the launcher alone and is shown as a check "
      "(a lower bound: the last sample may precede the peak).\n")
    w("| process | ru_maxrss median | min – max | VmHWM sampled, median | runs | command |")
    w("| --- | --- | --- | --- | --- | --- |")
    for label, n in (("flowrun", "flowrun"), ("torchrun", "torchrun"), ("floor (`bench/spawn.c`)", "floor"),
                     ("one worker: `/bin/true`", "worker")):
        row = R[n]
        missing = not_measured(row)
        if missing:
            w(f"| {label} | {missing} | | | | |")
            continue
        median, rng = spread(row["figures"]["maxrss_mib"], "{:.1f}")
        hwm = row["figures"]["hwm_mib"]
        hwm = "—" if hwm is None else f"{hwm:.1f}"
        w(f"| {label} | {median} MiB | {rng} MiB | {hwm} MiB | {row['figures']['counted']} | {cell(row['command'])} |")
    w("")
    fm = med(R["flowrun"], "maxrss_mib")
    if fm is not None:
        r = F.get("torchrun_ratio")
        than = f"; torchrun's is {r:.0f}x larger." if r else "."
        w(f"- flowrun's peak is **{fm:.1f} MiB** (goal: at most {GOAL_RSS_MIB:.0f} MiB): "
          f"{verdict(fm <= GOAL_RSS_MIB)}{than}\n")
    remarks(w, rec, after_blank=True)


def logs(w, rec, part):
    R, F, opts = rec["rows"], rec["figures"], rec["options"]
    w(f"## (d) Log forwarding: 8 ranks write {opts['log_bytes'] / 1e9:g} GB of 100-byte lines\n")
    apart(w, part, rec["case"], "node")
    w("Each rank runs `bench/producer.c`, which writes unique 100-byte lines (`BENCH r<rank> s<seq> ` and a "
      "filler) in 65,500-byte `write`s. The launcher's stdout is a pipe into `bench/reader.c`, which checks "
      "every line: the prefix names the right rank, the line is whole (no torn or merged lines), and every "
      "rank's sequence numbers arrive complete and in order. Throughput is the producers' bytes divided by "
      "the launcher's wall time (start-up included). The floor, `bench/forward.c`, starts the same 8 "
      "producers on pipes, `poll`s them, reads 64 KiB at a time and writes whole lines to its stdout with no "
      "prefix and no log files; the goal is stated against it. flowrun also writes every rank's raw output to "
      "`<run-dir>/work/rank<R>/stdout.log` (on disk; the run directory is deleted after each run), so a second "
      "floor, `bench/forward.c -t DIR`, writes what it reads to per-rank files in the run directory too. "
      f"torchrun (`--tee 3`) gets a smaller volume, {opts['torchrun_log_bytes'] / 1e6:g} MB, because its "
      "log tailer reads the files it redirects output to line by line in Python threads.\n")
    w("| launcher | volume | GB/s median | min – max | CPU s, median | peak RSS, median | lines checked, median "
      "| torn | lost | dup | runs | command |")
    w("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for label, n in (("flowrun", "flowrun"), ("flowrun --no-fold", "flowrun_nofold"), ("torchrun --tee 3", "torchrun"),
                     ("floor (`bench/forward.c`)", "floor"),
                     ("floor with per-rank log files (`bench/forward.c -t`)", "floor_tee")):
        row = R.get(n)
        if row is None:  # a record from before the row was measured
            continue
        missing = not_measured(row)
        if missing:
            w(f"| {label} | | {missing} | | | | | | | | | {cell(row['command'])} |")
            continue
        f = row["figures"]
        median, rng = spread(f["gbps"], "{:.3f}")
        w(f"| {label} | {f['volume_mb']:g} MB | {median} | {rng} | {f['cpu_s']:.2f} | {f['rss_mib']:.1f} MiB "
          f"| {f['lines']:.0f} | {f['torn']} | {f['lost']} | {f['dup']} | {f['counted']} | {cell(row['command'])} |")
    w("")
    w("CPU s is user + system time of the launcher and the workers it reaped (the producers, the same work "
      "in every row), from `wait4`; peak RSS is `ru_maxrss` from the same `wait4`, as in case (c). Torn, lost "
      "and dup are totals over all counted runs.\n")
    if measured(R["flowrun"]):
        frac = F.get("floor_fraction")
        if frac:
            w(f"- flowrun forwards at **{frac * 100:.0f}%** of the C floor's rate (goal: at least "
              f"{GOAL_LOG_FRACTION * 100:.0f}%) with {F['damaged']} damaged or missing lines (goal: 0): "
              f"{verdict(frac >= GOAL_LOG_FRACTION and F['damaged'] == 0)}.")
        w(f"- flowrun's per-rank log files held every byte in every run: {'yes' if F['logs_whole'] else 'no'}.")
        stopped = F.get("stopped")
        if stopped and "failed" in stopped:
            w(f"- A reader that stops reading: the run failed ({cell(stopped['failed'][:300])}): **not met**.")
        elif stopped:
            whole = stopped["shown"] + stopped["counted"] == stopped["lines"]
            w(f"- A reader that stops reading (`{stopped['command']}`) does not stop the job: it ended with exit "
              f"{stopped['exit']} in {stopped['wall_s']:.2f} s, the ranks held for `--console-wait 1` and then "
              f"let go; of its {stopped['lines']:,} lines {stopped['shown']:,} were shown (what the pipe held) and "
              f"{stopped['counted']:,} counted as not shown, every line accounted for: "
              f"{verdict(stopped['exit'] == 0 and whole)}.")
        if F.get("fold_fraction"):
            w(f"- Folding like lines (the default; no line here is alike, so this is its whole cost) keeps "
              f"**{F['fold_fraction'] * 100:.0f}%** of the unfolded console's rate (`--no-fold`; goal: at least "
              f"{GOAL_FOLD_FRACTION * 100:.0f}%): {verdict(F['fold_fraction'] >= GOAL_FOLD_FRACTION)}.")
        if F.get("tee_fraction"):
            w(f"- Against the floor that also writes per-rank log files, as flowrun does, it reaches "
              f"{F['tee_fraction'] * 100:.0f}%.")
        if measured(R["torchrun"]):
            w(f"- flowrun's rate is {F['torchrun_ratio']:.0f}x torchrun's.")
            if F.get("torchrun_net_gbps"):
                w(f"- torchrun's wall time includes its start-up ({F['torchrun_startup_s']:.2f} s in case (a)); "
                  f"without it, its rate would be about {F['torchrun_net_gbps']:.3f} GB/s.")
        w("")
    remarks(w, rec, after_blank=True)
    w("The flowrun spec (`bench/logs.yaml`; `@BYTES@` is the bytes per rank):\n")
    w(spec_block(rec, "text"))


def node_part(records):
    """The single-node part of the page (cases a to d), as Markdown."""
    main = next(iter(records.values()))
    cond, opts = main["conditions"], main["options"]
    md = []
    w = md.append
    w("# Benchmarks: flowrun and torchrun side by side\n")
    w("Generated by `scripts/bench` from one run on the machine below; rerun it to regenerate this file:\n")
    w("```sh")
    w("scripts/bench                 # all cases; builds build/release/flowrun and bench/*.c first")
    w(f"scripts/bench --only node --runs {opts['runs']} --slow-runs {opts['slow_runs']} --log-bytes "
      f"{opts['log_bytes']} --torchrun-log-bytes {opts['torchrun_log_bytes']}" + commit_option(cond)
      + "   # what made this part")
    w("scripts/bench --render-only   # this page again from the records in bench/results, measuring nothing")
    w("```\n")
    w("## Machine and versions\n")
    machine_table(w, cond)
    w(f"Every case runs {WORKERS} workers. Each iteration runs the launchers one after the other, in an order "
      "that rotates between iterations, after one uncounted warm-up iteration; figures are medians "
      "(min – max beside them). The machine has few cores and other work ran on it meanwhile (see the load "
      "average), so absolute times are noisy: the ratios, taken between runs made side by side, are the figures "
      "to compare, and a busier machine lowers them.\n")
    for case, make in (("a", startup), ("b", teardown), ("c", memory), ("d", logs)):
        if case in records:
            make(w, records[case], records)
    w("## Notes on method\n")
    w("- torchrun is Debian's `python3-torch` run by `/usr/bin/python3` (Python 3.11). Its entry point fails "
      "there (`AttributeError: 'NoneType' object has no attribute 'get'` in `to_map`), because torch 1.13's "
      "`Std.from_str` looks the number up by iterating over the `Std` flag, which on Python 3.11 skips `NONE` "
      "and `ALL`. `bench/torchrun_py311.py` replaces that one lookup in memory and then calls "
      "`torch.distributed.run.main()`, exactly what `/usr/bin/torchrun` does; no file on the system is changed. "
      "`--monitor_interval 0.1` matches the poll interval of newer torchrun releases (1.13 defaults to 5 s).")
    w("- `$TMP` in the commands is a scratch directory; launchers' stdout and stderr go to files in it, except "
      "in case (d). The flowrun run directory is given with `--run-dir`, a new one for each run. In cases (a) "
      "and (b) each run's directory stays until the bench ends, as a user's runs stay: on ext4 without a journal "
      "(this host's root disk), making a file within minutes of deleting thousands costs more the more were "
      "deleted (the inode allocator passes over each recently deleted inode), so deleting each run's directory "
      "before the next would measure that instead. In case (d), whose run directories hold 2 GB of logs, each "
      "is deleted after its run, once written back.")
    w("- Helpers are built with `cc -O2`: `bench/timeit.c` (runs one command, reports wall time, `CLOCK_REALTIME` "
      "at exit, `ru_maxrss`), `bench/spawn.c`, `bench/failer.c`, `bench/producer.c`, `bench/forward.c`, "
      "`bench/reader.c`.")
    failure_notes(w, records, NODE_CASES)
    return "\n".join(md) + "\n"
