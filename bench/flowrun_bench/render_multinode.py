"""The multi-node part of the page: cases (e) to (h) and (r), every node this host."""

from .render import (GOAL_GANG_READY_S, GOAL_GATHER_FRACTION, GOAL_SHIP_FRACTION, GOAL_RDZV_FLOOR, GOAL_RDZV_GROWTH,
                     GOAL_RDZV_HEAD_RSS_MIB, GOAL_RDZV_MS, GOAL_RECOVERY_RATIO, GOAL_SPARE_MS, MULTINODE_CASES, apart, cell,
                     commit_option, failure_notes, machine_table, measured, med, not_measured, remarks, spec_block,
                     spread, verdict)


def rendezvous(w, rec, part):
    R, F, nodes = rec["rows"], rec["figures"], rec["options"]["rdzv_nodes"]
    w(f"## (e) Rendezvous of {' and '.join(str(n) for n in nodes)} agents\n")
    apart(w, part, "e", "multinode")
    own = (", each from its own loopback address (127.1.0.1 + i, as agents on N hosts would dial; the head takes "
           "at most 1024 handshakes at once from one address)") if F.get("own_addresses") else ""
    w("`bench/rdzv_clients.cpp` opens N connections from one single-threaded process (epoll, non-blocking "
      f"sockets, `RLIMIT_NOFILE` raised){own} and speaks, on each, the protocol as `flowrun agent` does, with "
      "flowrun's own protocol library: hello (node, version, nonce, pid, GPUs), challenge → auth (HMAC proof), "
      "welcome (the head's proof checked), assign → ready (the workdir marker file read and compared, the "
      "local address, a held port from node rank 0), start → `exited` for every rank it names and `done`, "
      "bye → close. It runs no worker. The head runs one `/bin/true` rank per node (`nodes: N`, `cpus: N`). "
      "Times are from the clients' first `connect`: **joined** when the last welcome arrived (every agent "
      "connected and authenticated), **assigned** when the last assign arrived, **started** when the last "
      "start arrived (the figure the goal is about), **done** when the last bye arrived. The head writes "
      "each rank's directory and log files in its run directory before it sends start, so it runs twice: "
      "with the run directory on the root disk (ext4, as a user's workdir would be) and on tmpfs "
      "(`/dev/shm`): on this host's ext4 disk, creating a file costs from about 0.1 ms to over 1 ms "
      "depending on what was deleted on the disk shortly before (the kernel's inode allocation, "
      "`__ext4_new_inode` → `find_inode_bit` → `recently_deleted` in a profile), so the disk row varies "
      "between runs and the tmpfs row shows the head itself. The floor, `rdzv_clients --bare`, runs the same "
      "clients against a minimal server forked from the same program: one process, one epoll loop, the same "
      "messages and proofs, and nothing else (no plan, no files, no report).\n")
    w("| agents | server | joined | assigned | started, median | min – max | × floor | done | "
      "head's peak RSS | runs | command |")
    w("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for n in nodes:
        for key, label in ((f"disk-{n}", "flowrun, run dir on disk"), (f"tmpfs-{n}", "flowrun, run dir on tmpfs"),
                           (f"bare-{n}", "floor: `rdzv_clients --bare`")):
            row = R.get(key)
            if row is None:
                continue
            missing = not_measured(row)
            if missing:
                w(f"| {n} | {label} | {missing} | | | | | | | | {cell(row['command'])} |")
                continue
            f = row["figures"]
            start, rng = spread(f["start_ms"], "{:.0f}")
            times = f"{f['times_floor']:.1f}x" if f.get("times_floor") else "—"
            rss = f"{f['head_rss_mib']:.0f} MiB" if f.get("head_rss_mib") else "—"
            w(f"| {n} | {label} | {f['welcome_ms']:.0f} ms | {f['assign_ms']:.0f} ms | **{start} ms** | {rng} ms "
              f"| {times} | {f['total_ms']:.0f} ms | {rss} | {f['counted']} | {cell(row['command'])} |")
    w("")
    for n in nodes:
        goal = GOAL_RDZV_MS.get(n)
        for key, where in ((f"disk-{n}", "on disk"), (f"tmpfs-{n}", "on tmpfs")):
            m = med(R.get(key), "start_ms")
            if m is None:
                continue
            verdict_text = f" (goal: within {goal:.0f} ms): {verdict(m <= goal)}" if goal else ""
            w(f"- {n} agents, run directory {where}: the last start arrives **{m:.0f} ms** after the "
              f"first connect{verdict_text}.")
        floor = med(R.get(f"bare-{n}"), "start_ms")
        if floor:
            w(f"- {n} agents against the floor: {floor:.0f} ms.")
        gaps = [f"{R[key]['figures']['gap_ms']:.0f} ms with the run directory {where}"
                for key, where in ((f"disk-{n}", "on disk"), (f"tmpfs-{n}", "on tmpfs")) if measured(R.get(key))]
        if gaps:
            w(f"- {n} agents: from the last assign to the last start (the agents' ready, then the head "
              f"creating every rank's directory and log files and sending start): {', '.join(gaps)}.")
    scale(w, R, nodes)
    remarks(w, rec)
    w("\nThe flowrun spec (`bench/nodes.yaml`; `@NODES@` is the number of agents):\n")
    w(spec_block(rec, "text"))


def scale(w, R, nodes):
    """The curve of (e): the last start and the head's peak RSS against agents, with the scale goals."""
    rows = [("disk", "on disk"), ("tmpfs", "on tmpfs"), ("bare", "floor")]
    w("\n### Scale: time and the head's memory against agents\n")
    w("The same runs as the table above, per agent: the last start (median) and the head's peak RSS (median of "
      "`ru_maxrss`), each divided by the number of agents. Growing no faster than linearly, a figure per agent "
      "stays level or falls as the agents grow; the head's own memory at start (its code and libraries) makes "
      "the smaller runs' figure per agent larger.\n")
    w("| agents | started on disk | per agent | on tmpfs | per agent | floor | per agent | head's peak RSS, on disk "
      "| per agent | on tmpfs | per agent |")
    w("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for n in nodes:
        cells = []
        for key, _ in rows:
            m = med(R.get(f"{key}-{n}"), "start_ms")
            cells += [f"{m:.0f} ms", f"{m * 1000 / n:.1f} µs"] if m else ["—", "—"]
        for key, _ in rows[:2]:
            row = R.get(f"{key}-{n}")
            rss = row["figures"].get("head_rss_mib") if measured(row) else None
            cells += [f"{rss:.0f} MiB", f"{rss * 1024 / n:.1f} KiB"] if rss else ["—", "—"]
        w(f"| {n} | " + " | ".join(cells) + " |")
    w("")
    for n, goal in GOAL_RDZV_FLOOR.items():
        for key, where in rows[:2]:
            row = R.get(f"{key}-{n}")
            times = row["figures"].get("times_floor") if measured(row) else None
            if times:
                w(f"- {n} agents, run directory {where}: the last start at **{times:.2f}x** the floor's "
                  f"(goal: at most {goal}x): {verdict(times <= goal)}.")
            elif n in nodes:
                w(f"- {n} agents, run directory {where}: not measured (goal: at most {goal}x the floor).")
    for n, goal in GOAL_RDZV_HEAD_RSS_MIB.items():
        peaks = [R[f"{key}-{n}"]["figures"]["head_rss_mib"] for key, _ in rows[:2]
                 if measured(R.get(f"{key}-{n}")) and R[f"{key}-{n}"]["figures"].get("head_rss_mib")]
        if peaks:
            w(f"- {n} agents: the head's peak RSS **{max(peaks):.0f} MiB**, the larger of its two runs' medians "
              f"(goal: at most {goal:.0f} MiB): {verdict(max(peaks) <= goal)}.")
    floor = {(a, b): g for a, b, g in growth_pairs(R, nodes, "bare")}
    if floor:
        w(f"- The floor's last start, its growth against linear between sizes (the time's ratio over the agents' "
          f"ratio): {', '.join(f'{a} → {b}: {g:.2f}' for (a, b), g in floor.items())}. The clients are one process "
          "and the kernel's loopback is the same for both servers, so what they add beyond linear is in every row; "
          "flowrun's growth is judged over the floor's.")
    for key, where in rows[:2]:
        pairs = [(a, b, g, g / floor[(a, b)]) for a, b, g in growth_pairs(R, nodes, key) if (a, b) in floor]
        if not pairs:
            continue
        worst = max(p[3] for p in pairs)
        text = ", ".join(f"{a} → {b}: {g:.2f} ({over:.2f} over the floor's)" for a, b, g, over in pairs)
        w(f"- The last start, run directory {where}, its growth against linear: {text}; over the floor's at most "
          f"**{worst:.2f}** (goal: at most {GOAL_RDZV_GROWTH}): {verdict(worst <= GOAL_RDZV_GROWTH)}.")
    for key, where in rows[:2]:
        pairs = growth_pairs(R, nodes, key, "head_rss_mib")
        if pairs:
            worst = max(p[2] for p in pairs)
            w(f"- The head's peak RSS, run directory {where}, its growth against linear: "
              f"{', '.join(f'{a} → {b}: {g:.2f}' for a, b, g in pairs)}; at most **{worst:.2f}** "
              f"(goal: at most {GOAL_RDZV_GROWTH}): {verdict(worst <= GOAL_RDZV_GROWTH)}.")


def growth_pairs(R, nodes, key, figure="start_ms"):
    """[(n1, n2, (f(n2) / f(n1)) / (n2 / n1))] over consecutive measured sizes of a row."""
    points = []
    for n in sorted(nodes):
        row = R.get(f"{key}-{n}")
        if not measured(row):
            continue
        value = med(row, figure) if figure == "start_ms" else row["figures"].get(figure)
        if value:
            points.append((n, value))
    return [(a, b, (fb / fa) / (b / a)) for (a, fa), (b, fb) in zip(points, points[1:])]


def agents(w, rec, part):
    R, F, n_agents = rec["rows"], rec["figures"], rec["options"]["agents"]
    w(f"## (f) {n_agents} `flowrun agent` processes against one head\n")
    apart(w, part, "f", "multinode")
    w(f"The head runs `bench/nodes.yaml` with `nodes: {n_agents}`, `cpus: {n_agents}`: one `/bin/true` "
      f"rank per node. Once it prints the agent command, `bench/spawn.c` starts {n_agents} real "
      "`flowrun agent` processes with it (each with its guardian process and its worker), all on this host. "
      "**Joined** is the time from starting the head to its line `N nodes joined` (every agent started, "
      "connected and authenticated), **to success** the time to its line `step 'work' succeeded`; **head "
      "wall** is the head's whole run, from its fork to its exit (`bench/timeit`). torchrun runs 8 agents "
      "(`--nnodes 8 --nproc_per_node 1 --rdzv_backend c10d`, one `/bin/true` each), all started at "
      "once; its figure is from starting them to the last one's exit.\n")
    w("| launcher | agents | joined, median | to success, median | min – max | head wall, median "
      "| head's peak RSS | runs | command |")
    w("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for n in sorted({8, n_agents}):
        row = R[f"flowrun-{n}"]
        missing = not_measured(row)
        if missing:
            w(f"| flowrun | {n} | | {missing} | | | | | {cell(row['command'])} |")
            continue
        f = row["figures"]
        median, rng = spread(f["success_s"], "{:.3f}")
        w(f"| flowrun | {n} | {f['joined_s']:.3f} s | **{median} s** | {rng} s | {f['wall_s']:.3f} s "
          f"| {f['rss_mib']:.1f} MiB | {f['counted']} | {cell(row['command'])} |")
    row = R["torchrun-8"]
    missing = not_measured(row)
    if missing:
        w(f"| torchrun, c10d | 8 | | {missing} | | | | | {cell(row['command'])} |")
    else:
        median, rng = spread(row["figures"]["wall_s"], "{:.3f}")
        w(f"| torchrun, c10d | 8 | — | {median} s (to the last exit) | {rng} s | — | — "
          f"| {row['figures']['counted']} | {cell(row['command'])} |")
    issue = F["torchrun_issue_s"]
    w(f"| torchrun, c10d, as measured on this machine for the issue | 8 | | {issue} s | | | | | |")
    w("")
    big = med(R.get(f"flowrun-{n_agents}"), "success_s")
    eight = med(R.get("flowrun-8"), "success_s")
    tr = med(R.get("torchrun-8"), "wall_s")
    if big:
        w(f"- {n_agents} flowrun agents are started and done in **{big:.2f} s**; torchrun's c10d "
          f"rendezvous took {issue} s for 8 agents on this machine" + (f" ({tr:.2f} s in this run)" if tr else "")
          + ".")
    if eight and tr:
        w(f"- With 8 agents each, flowrun is {tr / eight:.0f}x faster than torchrun.")
    remarks(w, rec)
    w("")


def gather(w, rec, part):
    R, F, total = rec["rows"], rec["figures"], rec["options"]["gather_bytes"]
    w(f"## (g) Result gather: {total / (1 << 30):g} GiB from 4 agents to the head\n")
    apart(w, part, "g", "multinode")
    w(f"4 real agents, one rank each (`bench/gather.yaml`, `collect: all`); every rank writes "
      f"{total // 4 // (1 << 20)} MiB of zeros into `FLOWRUN_OUTPUT_DIR` and exits. Each agent "
      "then uploads its rank's file to the head in 256 KiB `upload_chunk` messages with a CRC-32C, and the "
      "head writes it under `<run-dir>/work/rank<R>/out/`, checking size and CRC-32C. **Upload** is the time "
      "from the last rank's exit to the end of the step's attempt, both from `results.json` (millisecond "
      "precision; agents and head share this host's clock): it covers reading, hashing, sending, "
      "receiving, hashing again and writing. The floor, `bench/tcpcopy.c`, copies 4 files of the same size "
      "(written just before, so in the page cache too) over 4 loopback TCP connections, one sending process "
      "each, into one receiving process that `poll`s them and writes each to its own file, on the same "
      "disk: no framing, no checksum. The head's run directory, the agents' scratch directories and the "
      "floor's files are all on the root disk (ext4).\n")
    w("| copy | time, median | min – max | GB/s, median | runs | command |")
    w("| --- | --- | --- | --- | --- | --- |")
    flow, floor = R["gather"], R["tcpcopy"]
    for label, row in (("flowrun: upload, last rank's exit → step's end", flow),
                       ("floor: `bench/tcpcopy.c`, 4 streams", floor)):
        missing = not_measured(row)
        if missing:
            w(f"| {label} | {missing} | | | | {cell(row['command'])} |")
            continue
        median, rng = spread(row["figures"]["time_s"], "{:.3f}")
        w(f"| {label} | **{median} s** | {rng} s | {row['figures']['gbps']:.2f} | {row['figures']['counted']} "
          f"| {cell(row['command'])} |")
    w("")
    if measured(flow):
        w(f"- The whole flowrun run (head start to exit, the ranks writing their files included) took "
          f"{flow['figures']['wall_s']:.2f} s; the head used {flow['figures']['head_cpu_s']:.2f} s of CPU.")
    if F.get("fraction"):
        w(f"- flowrun gathers at **{F['fraction'] * 100:.0f}%** of the plain copy's rate (goal: at least "
          f"{GOAL_GATHER_FRACTION * 100:.0f}%): {verdict(F['fraction'] >= GOAL_GATHER_FRACTION)}.")
    remarks(w, rec)
    w("\nThe flowrun spec (`bench/gather.yaml`; `@BYTES@` is the bytes per rank):\n")
    w(spec_block(rec, "text"))


def lost(w, rec, part):
    row, F = rec["rows"]["lost"], rec["figures"]
    issue = F["torchrun_issue_s"]
    w("## (h) Notice of a SIGKILLed agent\n")
    apart(w, part, "h", "multinode")
    w("2 real agents, 2 sleeping ranks each (`bench/lost.yaml`). Once all 4 workers run (seen in `/proc`), "
      "one agent gets SIGKILL. **Notice** is the time from the `kill` to the moment the head's line "
      "`node ... lost: its agent's connection closed` arrives on the pipe from its stderr (read by a thread "
      "that stamps each line as it arrives). **Head exit** is from the kill to the head's exit (code 1, "
      "the other node's ranks stopped), **workers gone** from the kill to the moment no worker of the run is "
      "left on the host (the killed node's are stopped by its agent's guardian; `/proc` polled every 5 ms "
      "after the head's exit).\n")
    w("| | median | min – max | runs |")
    w("| --- | --- | --- | --- |")
    missing = not_measured(row)
    if missing:
        w(f"| flowrun | {missing} | | |")
    else:
        for label, key in (("flowrun: kill → the head's \"lost\" line", "notice_ms"),
                           ("flowrun: kill → head exit", "exit_ms"),
                           ("flowrun: kill → every worker gone", "gone_ms")):
            median, rng = spread(row["figures"][key], "{:.1f}")
            w(f"| {label} | **{median} ms** | {rng} ms | {row['figures']['counted']} |")
    w(f"| torchrun, c10d, as measured on this machine for the issue | not noticed within {issue} s | | |")
    w("")
    if row["command"]:
        w(f"Command: {cell(row['command'])}, then `kill -9` on one agent.\n")
    if measured(row):
        held = " or ".join(str(r) for r in row["figures"]["node_ranks"])
        w(f"- flowrun notices the killed agent in **{med(row, 'notice_ms'):.1f} ms** (the lost node "
          f"it names held node rank {held}: ranks go by order of arrival); torchrun did not notice within "
          f"{issue} s.")
    remarks(w, rec)
    w("\nThe flowrun spec (`bench/lost.yaml`; `@SECONDS@` is a duration no other process on the host sleeps):\n")
    w(spec_block(rec, "text"))


def spare(w, rec, part):
    R, n = rec["rows"], rec["options"]["spare_nodes"]
    w(f"## (l) A lost agent among {n:,}: noticed, and its spare seated\n")
    apart(w, part, "l", "multinode")
    w(f"`bench/rdzv_clients.cpp` joins {n:,} agents and one spare to a real head (`bench/spare.yaml`: "
      "`spare_nodes: 1`, `forensics: off`, so the stop signals the ranks at once; by default it first takes "
      f"every rank's stack). The agents hold their ranks as running. Once all {n:,} have their start, the agent "
      f"of node rank {n // 2} closes its connection, as the kernel does for an agent killed with SIGKILL; the "
      "others then answer the head's stop as agents whose ranks ended on SIGTERM. Times from that close, as the "
      "clients see them: **noticed**, the first stop from the head; **spare seated**, the spare's assign of the "
      "lost node rank; **spare started**, its start; **restarted**, the last start of the new attempt. The head "
      "tells the spare its seat (the next attempt's assign) as soon as it notices the loss, before it stops the "
      "other nodes, so the spare's check runs while their ranks stop. Before the spare starts, the head takes "
      "every rank's exit and records the attempt (each rank's end record and empty logs are written by threads "
      "of their own, at the lowest priority); the failed attempt's files move to each rank's `attempt0/` (on "
      "other threads, while the nodes get ready), and the start waits for that and for the output directories "
      "made again.\n")
    w("| run directory | noticed | spare seated | spare started | restarted | runs |")
    w("| --- | --- | --- | --- | --- | --- |")
    for key, label in (("spare-disk", "disk"), ("spare-tmpfs", "tmpfs")):
        row = R[key]
        missing = not_measured(row)
        if missing:
            w(f"| {label} | {missing} | | | | |")
            continue
        cells = []
        for figure in ("noticed_ms", "spare_assign_ms", "spare_start_ms", "restarted_ms"):
            median, rng = spread(row["figures"][figure], "{:.1f}")
            cells.append(f"**{median} ms** ({rng})")
        w(f"| {label} | " + " | ".join(cells) + f" | {row['figures']['counted']} |")
    w("")
    if R["spare-disk"]["command"]:
        w(f"Command: {cell(R['spare-disk']['command'])}.\n")
    row = R["spare-disk"]
    if measured(row):
        noticed, seated, started = med(row, "noticed_ms"), med(row, "spare_assign_ms"), med(row, "spare_start_ms")
        worst = max(noticed, seated)
        w(f"- With the run directory on disk, the head notices the lost agent in **{noticed:.1f} ms** and "
          f"seats its spare in **{seated:.0f} ms** (goal: both within {GOAL_SPARE_MS:.0f} ms): "
          f"{verdict(worst <= GOAL_SPARE_MS)}. The spare's ranks start **{started:.0f} ms** after the close.")
    remarks(w, rec)
    w("\nThe flowrun spec (`bench/spare.yaml`):\n")
    w(spec_block(rec, "text"))


def recovery(w, rec, part):
    R, F = rec["rows"], rec["figures"]
    w("## (r) Recovery from a lost node: a hot spare against torchrun's elastic agents\n")
    apart(w, part, "r", "multinode")
    w("Two nodes of one rank each and a third waiting, all on this host; the ranks are real Python processes "
      "that import Debian's torch, join a gloo group and all-reduce every 50 ms (`bench/recovery_worker.py`). "
      "Half a second after both run, node 1 is lost: its agent and its rank get SIGKILL together. **Recovery** "
      "is the time from that kill to the moment both ranks of the new attempt have started, each read from "
      "the stamp the worker writes first thing (`time.time()` before any import: the script's own start-up "
      "is left out). flowrun: `spare_nodes: 1`, `cluster.heartbeat_timeout: 1` (`bench/recovery.yaml`), with "
      "its default forensics (every surviving rank's stack before the stop) and with `forensics: off`. "
      "torchrun: three agents, `--nnodes 2 --max_restarts 1 --monitor_interval 0.1`, c10d rendezvous; the "
      "third starts once the first two run and waits for the next round.\n")
    w("| | recovery, median | min – max | runs |")
    w("| --- | --- | --- | --- |")
    labels = (("recovery", "flowrun, spare_nodes: 1"), ("recovery-noforensics", "flowrun, spare_nodes: 1, "
              "forensics: off"), ("recovery-torchrun", "torchrun elastic, a third agent waiting"))
    for key, label in labels:
        row = R[key]
        missing = not_measured(row)
        if missing:
            w(f"| {label} | {missing} | | |")
            continue
        median, rng = spread(row["figures"]["recover_s"], "{:.2f}")
        w(f"| {label} | **{median} s** | {rng} s | {row['figures']['counted']} |")
    w("")
    for key, label in labels:
        if R[key]["command"]:
            w(f"- {label}: {cell(R[key]['command'])}")
    ratio = F.get("torchrun_ratio")
    if ratio:
        w(f"\n- flowrun with a hot spare brings every rank back **{ratio:.0f} times** faster than torchrun's "
          f"elastic agents (goal: at least {GOAL_RECOVERY_RATIO:.0f} times): {verdict(ratio >= GOAL_RECOVERY_RATIO)}. "
          "flowrun notices the loss when the agent's connection closes, at once; a node that goes silent instead "
          "is noticed within `heartbeat_timeout` (1 s here). torchrun waits for the surviving rank to fail in its "
          "collective, then for a new rendezvous round.")
    if F.get("torchrun_stranded"):
        w(f"- torchrun brought its ranks back in {R['recovery-torchrun']['figures']['counted']} of "
          f"{F['torchrun_counted']} counted runs. In {F['torchrun_stranded']} the lost node's agent was the one "
          "that hosted the c10d rendezvous store (the first to bind the endpoint), and the other agents stopped "
          "with `RendezvousConnectionError` instead of recovering (the notes below): a torchrun job cannot lose "
          "that node. flowrun's head is not on a node it can lose to a spare.")
    remarks(w, rec)
    w("\nThe flowrun spec (`bench/recovery.yaml`; `@FORENSICS@` is `{stacks: true}` or `off`):\n")
    w(spec_block(rec, "text"))


def ship(w, rec, part):
    R, F, total = rec["rows"], rec["figures"], rec["options"]["ship_bytes"]
    w(f"## (s) Shipping inputs: {total / (1 << 30):g} GiB from the head to each of 4 agents\n")
    apart(w, part, "s", "multinode")
    w("4 real agents, one rank each, and a step whose `inputs: [data/*]` are 8 files of random bytes "
      "(`bench/ship.yaml`, `cluster.shared_workdir: false`; the head runs as another host, "
      "`FLOWRUN_HOSTNAME=bench-head`, so every agent gets them). The head sends each agent every file in 256 KiB "
      "`ship_chunk` messages, sealed, with a CRC-32C per file, pacing each link on its queue; each agent writes "
      "them beneath its scratch directory, checking size and CRC-32C, and acknowledges. **Ship** is the time "
      "from the head's first `shipping ... to it` line to its `4 nodes joined` line, which it prints as it "
      "starts the ranks once every agent acknowledged. The floor, `bench/shipcopy.py`, sends the same files "
      "from one process (as the head is one) over 4 loopback TCP streams into 4 receiving processes, each "
      "writing its own file on the same disk: no framing, no checksum.\n")
    w("| copy | time, median | min – max | GB/s, median | runs | command |")
    w("| --- | --- | --- | --- | --- | --- |")
    for label, row in (("flowrun: first shipping line → every node's start", R["ship"]),
                       ("floor: `bench/shipcopy.py`, 4 streams", R["shipcopy"])):
        missing = not_measured(row)
        if missing:
            w(f"| {label} | {missing} | | | | {cell(row['command'])} |")
            continue
        median, rng = spread(row["figures"]["time_s"], "{:.3f}")
        w(f"| {label} | **{median} s** | {rng} s | {row['figures']['gbps']:.2f} | {row['figures']['counted']} "
          f"| {cell(row['command'])} |")
    w("")
    if F.get("fraction"):
        w(f"- flowrun ships at **{F['fraction'] * 100:.0f}%** of the plain copy's rate (goal: at least "
          f"{GOAL_SHIP_FRACTION * 100:.0f}%): {verdict(F['fraction'] >= GOAL_SHIP_FRACTION)}.")
    remarks(w, rec)
    w("\nThe flowrun spec (`bench/ship.yaml`; `@FILES@` files of `@BYTES@` bytes):\n")
    w(spec_block(rec, "text"))


def gang(w, rec, part):
    row = rec["rows"]["gang"]
    w(f"## (p) A gang's start: {rec['figures']['pods']} emulated pods started in a random order\n")
    apart(w, part, "p", "multinode")
    w("`flowrun manifest` writes the Kubernetes objects of `bench/gang.yaml` (a step of 4 CPU ranks on 4 nodes); "
      "`tests/pods/podsim.py` runs the Indexed Job's pods as network-namespace hosts (a mount namespace each: no "
      "shared workdir; each its hosts file with the headless Service's names, the Secret as a file), starting them "
      "in a random order, a random delay apart, each running the manifest's command verbatim: pod 0 is the head, "
      "the others dial it until it answers. **Ready** is from the last pod's start to the last rank's start "
      "(each rank prints the monotonic clock as it starts): what the gang adds once every pod is up. Needs root "
      "and network namespaces.\n")
    w("| | ready, median | min – max | runs | command |")
    w("| --- | --- | --- | --- | --- |")
    missing = not_measured(row)
    if missing:
        w(f"| flowrun | {missing} | | | {cell(row['command'])} |")
    else:
        median, rng = spread(row["figures"]["ready_s"], "{:.3f}")
        w(f"| flowrun | **{median} s** | {rng} s | {row['figures']['counted']} | {cell(row['command'])} |")
        w("")
        ready = row["figures"]["ready_s"]["median"]
        w(f"- the last rank starts **{ready:.2f} s** after the last pod (goal: at most {GOAL_GANG_READY_S:g} s): "
          f"{verdict(ready <= GOAL_GANG_READY_S)}.")
    remarks(w, rec)
    w("\nThe flowrun spec (`bench/gang.yaml`):\n")
    w(spec_block(rec, "text"))


def multinode_part(records):
    """The multi-node part of the page (cases e to h, l and r), as Markdown."""
    main = next(iter(records.values()))
    cond, opts = main["conditions"], main["options"]
    md = []
    w = md.append
    w("# Multi-node: the control plane on one host\n")
    w("Generated by `scripts/bench --only multinode` from one run on the machine below; rerun it to regenerate "
      "this part (the single-node part above is kept):\n")
    w("```sh")
    w("scripts/bench --only multinode   # cases e to h, l and r; builds build/release (flowrun, bench/rdzv_clients) "
      "first")
    w(f"scripts/bench --only multinode --mn-runs {opts['mn_runs']} --mn-slow-runs {opts['mn_slow_runs']} "
      f"--torchrun-agent-runs {opts['torchrun_agent_runs']} --rdzv-nodes "
      f"{','.join(str(n) for n in opts['rdzv_nodes'])}"
      + (f" --spare-nodes {opts['spare_nodes']}" if "spare_nodes" in opts else "") + f" --agents {opts['agents']} --gather-bytes "
      f"{opts['gather_bytes']}" + commit_option(cond) + "   # what made this part")
    w("```\n")
    w("## Machine and versions (multi-node)\n")
    machine_table(w, cond)
    w("Every node is this host. The head is a real `flowrun` running a spec with `cluster: {engine: manual, "
      "address: 127.0.0.1}`; the agents connect to it over loopback with the command and token file it prints. "
      "Head, agents and workers share the machine's cores, so each figure also pays for the other side of "
      "the connection. Each iteration runs the rows of a case one after the other, in an order that rotates "
      "between iterations, after one uncounted warm-up iteration; figures are medians (min – max beside them). "
      "Other work on the machine shows in the load average above.\n")
    for case, make in (("e", rendezvous), ("f", agents), ("g", gather), ("h", lost), ("l", spare), ("s", ship),
                       ("p", gang),
                       ("r", recovery)):
        if case in records:
            make(w, records[case], records)
    w("## Notes on method (multi-node)\n")
    w("- `$TMP` in the commands is a scratch directory on the root disk, `$SHM` one on tmpfs (`/dev/shm`), "
      "`PORT` the port the head chose and printed; "
      "`A & B` means B runs once A has printed its agent command. The head's stdout goes to `/dev/null` and "
      "its stderr to the bench, which reads it as it comes.")
    w("- `bench/rdzv_clients.cpp` is built by CMake with `-DFLOWRUN_BENCH=ON` (it links `flowrun_protocol`); "
      "`bench/tcpcopy.c` and the other C helpers with `cc -O2`.")
    w("- The torchrun figures quoted from the issue (8 agents in 6.3 s; a SIGKILLed node not noticed within "
      "90 s) were measured on this machine with torch 1.13; case (f) also measures the first one again.")
    failure_notes(w, records, MULTINODE_CASES)
    return "\n".join(md) + "\n"
