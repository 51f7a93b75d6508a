#!/usr/bin/env python3
"""The join of a multi-node step whose ranks ran `node_worker.py env` with
collect: all: checks every rank's environment against the torchrun contract
and flowrun's multi-node contract (docs of `flowrun agent`).

  check_env.py --nodes N --per-node P --hosts H1,H2,...|slurm|any
               --address HOST=ADDR,... [--slurm | --no-slurm]

--hosts: the host of each node rank, in order; `slurm`: the order of the
job's SLURM_JOB_NODELIST; `any`: distinct hosts in any order (manual engine).
--address: every host's address as the other nodes reach it.
Reads $FLOWRUN_INPUTS/rankR/env.json. Prints one line per problem, as
"rank R: KEY: expected ..., got ...", and exits 1; or one line saying that
all is well, and exits 0.
"""
import argparse
import ipaddress
import json
import os
import re
import sys

# Slurm's step-level variables: a worker must not inherit them from its agent.
STEP_LEVEL = re.compile(r"^SLURM_(PROCID|LOCALID|NODEID|NTASKS|NPROCS|STEP_.*|STEPID|TASK_PID|GTIDS|TASKS_PER_NODE|"
                        r"NTASKS_PER_NODE|CPUS_PER_TASK|SRUN_COMM_.*|LAUNCH_NODE_IPADDR|TOPOLOGY_ADDR.*|UMASK|"
                        r"DISTRIBUTION)$")
SAME_EVERYWHERE = ("WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "FLOWRUN_RUN_ID", "FLOWRUN_STEP",
                   "FLOWRUN_NODES", "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "LOCAL_WORLD_SIZE")


def expand_hostlist(text):
    """Slurm's compressed host list: 'node[1-2,4],gpu7' -> ['node1', 'node2', 'node4', 'gpu7']."""
    hosts = []
    for m in re.finditer(r"([^,\[]+)(?:\[([^\]]+)\])?", text):
        prefix, ranges = m.group(1), m.group(2)
        if ranges is None:
            hosts.append(prefix)
            continue
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            for n in range(int(lo), int(hi or lo) + 1):
                hosts.append(f"{prefix}{n:0{len(lo)}d}")
    return hosts


def is_loopback(addr):
    if addr in ("localhost", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return False


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--per-node", type=int, required=True)
    parser.add_argument("--hosts", required=True)
    parser.add_argument("--address", required=True)
    parser.add_argument("--slurm", dest="slurm", action="store_true")
    parser.add_argument("--no-slurm", dest="slurm", action="store_false")
    a = parser.parse_args()
    nodes, per_node, world = a.nodes, a.per_node, a.nodes * a.per_node
    address = dict(item.split("=", 1) for item in a.address.split(","))
    problems = []

    def problem(who, key, expected, got):
        problems.append(f"{who}: {key}: expected {expected}, got {got!r}")

    inputs = os.environ.get("FLOWRUN_INPUTS", "")
    found = sorted(n for n in os.listdir(inputs) if re.fullmatch(r"rank\d+", n)) if os.path.isdir(inputs) else []
    want = [f"rank{r}" for r in range(world)]
    if sorted(found, key=lambda n: int(n[4:])) != want:
        problem("inputs", f"rank directories in $FLOWRUN_INPUTS ({inputs})", ", ".join(want), ", ".join(found))
    ranks = {}
    for r in range(world):
        path = os.path.join(inputs, f"rank{r}", "env.json")
        try:
            with open(path) as f:
                ranks[r] = json.load(f)
        except (OSError, ValueError) as e:
            problem(f"rank {r}", "env.json", "an uploaded env.json", f"{type(e).__name__}: {e}")
    if len(ranks) != world:
        return report(problems)

    env = {r: info["env"] for r, info in ranks.items()}
    first = env[0]
    for key in SAME_EVERYWHERE:
        if any(key not in e for e in env.values()):
            problem("every rank", key, "set", f"missing on ranks {[r for r, e in env.items() if key not in e]}")
            continue
        values = {e[key] for e in env.values()}
        if len(values) != 1:
            problem("every rank", key, "one value on every rank", sorted(values))
    for r, e in env.items():
        def want_int(key, value):
            if e.get(key) != str(value):
                problem(f"rank {r}", key, str(value), e.get(key))
        want_int("RANK", r)
        want_int("WORLD_SIZE", world)
        want_int("LOCAL_WORLD_SIZE", per_node)
        want_int("GROUP_RANK", r // per_node)
        want_int("LOCAL_RANK", r % per_node)
        want_int("ROLE_RANK", r)
        want_int("ROLE_WORLD_SIZE", world)
        want_int("GROUP_WORLD_SIZE", nodes)
        want_int("FLOWRUN_NODES", nodes)
        want_int("FLOWRUN_NODE_RANK", r // per_node)
        leaked = sorted(k for k in e if STEP_LEVEL.match(k))
        if leaked:
            problem(f"rank {r}", "Slurm step-level variables", "none",
                    ", ".join(f"{k}={e[k]}" for k in leaked))
        if a.slurm and "SLURM_JOB_ID" not in e:
            problem(f"rank {r}", "SLURM_JOB_ID", "the job's id (job-level variables stay)", None)
        if not a.slurm and any(k.startswith("SLURM_") for k in e):
            problem(f"rank {r}", "SLURM_*", "none outside Slurm", sorted(k for k in e if k.startswith("SLURM_")))
    if a.slurm:
        jobs = {e.get("SLURM_JOB_ID") for e in env.values()}
        if len(jobs) != 1:
            problem("every rank", "SLURM_JOB_ID", "one job", sorted(map(str, jobs)))

    # Host names: one per node rank, distinct, in the expected order.
    host_of_node = {}
    for r, info in ranks.items():
        node = r // per_node
        host_of_node.setdefault(node, set()).add(info["hostname"])
    hosts = [sorted(host_of_node.get(n, {"?"})) for n in range(nodes)]
    if any(len(h) != 1 for h in hosts):
        problem("node ranks", "host name of each node rank's ranks", "one host per node rank", hosts)
    hosts = [h[0] for h in hosts]
    if len(set(hosts)) != nodes:
        problem("node ranks", "host names", f"{nodes} distinct hosts", hosts)
    if a.hosts == "slurm":
        expected = expand_hostlist(first.get("SLURM_JOB_NODELIST", ""))
    elif a.hosts == "any":
        expected = None
    else:
        expected = a.hosts.split(",")
    if expected is not None and hosts != expected:
        problem("node ranks", "hosts in node-rank order", expected, hosts)

    # MASTER_ADDR: node 0's address as the others reach it, never loopback,
    # and reachable: the last rank connected to rank 0 there.
    master = first.get("MASTER_ADDR", "")
    if is_loopback(master):
        problem("every rank", "MASTER_ADDR", f"node 0's address ({address.get(hosts[0])}), not loopback", master)
    elif address.get(hosts[0]) != master:
        problem("every rank", "MASTER_ADDR", f"the address of node 0 ({hosts[0]}): {address.get(hosts[0])}", master)
    served, reached = ranks[0].get("serve", {}), ranks[world - 1].get("reach", {})
    token = f"rank {world - 1} of {first.get('TORCHELASTIC_RUN_ID')}"
    if served.get("got") != token:
        problem("rank 0", f"a connection on MASTER_ADDR:MASTER_PORT ({master}:{first.get('MASTER_PORT')})",
                f"one from rank {world - 1} saying {token!r}", served)
    if reached.get("reply") != f"ok {token}":
        problem(f"rank {world - 1}", f"connecting to MASTER_ADDR:MASTER_PORT ({master}:{first.get('MASTER_PORT')})",
                f"the reply 'ok {token}'", reached)
    if problems:
        return report(problems)
    print(f"env check: {world} ranks on {nodes} nodes ({', '.join(hosts)}) agree; MASTER_ADDR={master}, "
          f"reached from rank {world - 1}")
    return 0


def report(problems):
    for line in problems:
        print(line, file=sys.stderr)
    print(f"env check: {len(problems)} problems", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
