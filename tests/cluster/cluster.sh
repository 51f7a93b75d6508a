#!/usr/bin/env bash
# A multi-node test cluster on one Linux machine: N emulated hosts with real
# Slurm and sshd, for flowrun's multi-node end-to-end tests
# (tests/e2e/multinode/test_multinode.py).
#
#   cluster.sh [--dir DIR] up N [--debian-hostname NODE]...   start N nodes (1..9)
#   cluster.sh [--dir DIR] down                  remove everything; says what was left
#   cluster.sh [--dir DIR] exec I|head CMD...    run CMD on node I, or on the head
#   cluster.sh [--dir DIR] link I up|down        plug node I's network cable in or out
#   cluster.sh [--dir DIR] env                   print the variables that reach the cluster
#                                                (SLURM_CONF, FLOWRUN_CLUSTER_SSH_CONFIG, ...)
#   cluster.sh [--dir DIR] status                nodes, Slurm's view, ssh to each node
#
# Needs root, network namespaces and Debian's slurmctld slurmd slurm-client munge
# openssh-server openssh-client iproute2 util-linux; no systemd (every daemon is
# started here, by hand). All state lives in DIR (--dir, else $FLOWRUN_CLUSTER_DIR,
# else /run/flowrun-test-cluster); `down` removes it and everything below.
#
# What `up N` makes:
#   network  node I (1..N) is the network namespace frc-nodeI with an interface eth0
#            at 10.200.0.1I/24 (node1 = 10.200.0.11), whose peer frc-vI is a port of
#            the bridge frc-br in the machine's own namespace, which holds 10.200.0.1:
#            the head, the "login node" from which flowrun starts. Only 10.200.0.0/24
#            is reachable from the nodes.
#   hosts    each node has its own host name (nodeI, a UTS namespace), its own
#            /etc/hosts and its own /tmp (a mount namespace; a bind mount of
#            DIR/nodes/nodeI/{hosts,tmp}); everything else in the file system is
#            shared, as NFS would share it. The hosts file names head and every node.
#            --debian-hostname NODE makes NODE's own /etc/hosts map its name to
#            127.0.1.1, as Debian's installer does; the other nodes still see its
#            real address.
#   head     `exec head CMD` runs CMD in the machine's network namespace with host
#            name head and the cluster's hosts file (10.200.0.1 head); /tmp is the
#            machine's. munged and slurmctld run there.
#   slurm    munged with its own key and socket, slurmctld on 10.200.0.1:6817, one
#            slurmd per node (CPUs=2, Gres=gpu:2 backed by dummy character devices
#            made with mknod, never opened), partition debug with every node; no
#            cgroups, no accounting. Clients find it through SLURM_CONF (`env`).
#   ssh      one sshd per node on 10.200.0.1I:22, root with a generated key only;
#            `ssh -F DIR/ssh/ssh_config nodeI CMD` from the head or from any node.
#
# `exec I CMD` enters node I's namespaces with nsenter (not `ip netns exec`, which
# remounts /sys and hides /sys/fs/cgroup: slurmd then fails with "Unable to
# initialize cgroup plugin"), keeps the environment and the working directory
# (or / when that directory is not there on the node, as under its private /tmp),
# and exits with CMD's status.
#
# `up` refuses while a cluster is up (run `down` first) and, when a step fails,
# shows the daemons' logs and removes what it made. `down` is safe to run any
# time: it ends every process in the nodes' namespaces and every daemon started
# here (SIGTERM, then SIGKILL after 3 s), deletes the namespaces, links and DIR,
# then lists whatever is still there and exits 1 if anything is.
#
# Example:
#   tests/cluster/cluster.sh up 2 --debian-hostname node1
#   eval "$(tests/cluster/cluster.sh env)"
#   srun -N2 hostname                      # node1, node2
#   tests/cluster/cluster.sh exec 2 hostname -I
#   ssh -F "$FLOWRUN_CLUSTER_SSH_CONFIG" node1 cat /etc/hosts
#   tests/cluster/cluster.sh down
set -euo pipefail

PROG=cluster.sh
NET=10.200.0
HEAD_IP=$NET.1
BRIDGE=frc-br
NS_PREFIX=frc-node
VETH_PREFIX=frc-v
CTLD_PORT=6817
MAX_NODES=9
DIR=${FLOWRUN_CLUSTER_DIR:-/run/flowrun-test-cluster}
SELF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")

die() {
  printf '%s: %s\n' "$PROG" "$*" >&2
  exit 1
}
usage() {
  sed -n '6,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}
node_ip() { printf '%s.%d\n' "$NET" $((10 + $1)); }
now() { printf '%s\n' "$EPOCHREALTIME"; }
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }'; }

# --- processes -----------------------------------------------------------------

# True if PID exists and is not a zombie.
alive() {
  local state
  state=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null) || return 1
  [[ -n "$state" && "$state" != Z ]]
}

# The pids of this script and its ancestors, which a sweep must spare.
own_pids() {
  local p=$$
  while [[ -n "$p" && "$p" != 0 ]]; do
    printf '%s\n' "$p"
    p=$(awk '{ print $4 }' "/proc/$p/stat" 2>/dev/null) || break
  done
}

# SIGTERM to every pid given, SIGKILL to those alive 3 s later; returns when all
# are gone (or 2 s after the SIGKILL).
stop_pids() {
  local p left=() spare
  spare=" $(own_pids | tr '\n' ' ') "
  for p in "$@"; do
    [[ "$p" =~ ^[0-9]+$ && "$spare" != *" $p "* ]] || continue
    alive "$p" && kill -TERM "$p" 2>/dev/null && left+=("$p")
  done
  local tries
  for tries in $(seq 50); do
    local still=()
    for p in "${left[@]}"; do alive "$p" && still+=("$p"); done
    left=("${still[@]}")
    ((${#left[@]})) || return 0
    ((tries == 30)) && kill -KILL "${left[@]}" 2>/dev/null
    sleep 0.1
  done
  return 0
}

holder_pid() {
  local f=$DIR/nodes/$1.pid
  [[ -s "$f" ]] && alive "$(cat "$f")" && cat "$f"
}

# Every process this cluster started or holds: daemons (pid files), holders,
# anything in a node's network namespace or in a holder's mount namespace.
cluster_pids() {
  local f pid ns mnts=""
  for f in "$DIR"/munge/*.pid "$DIR"/slurm/*.pid "$DIR"/ssh/*.pid "$DIR"/nodes/*.pid; do
    [[ -s "$f" ]] && cat "$f"
  done
  for ns in $(cluster_netns); do
    ip netns pids "$ns" 2>/dev/null || true
  done
  for f in "$DIR"/nodes/*.pid; do
    [[ -s "$f" ]] || continue
    pid=$(cat "$f")
    alive "$pid" && mnts+=" $(readlink "/proc/$pid/ns/mnt" 2>/dev/null)"
  done
  [[ -n "$mnts" ]] || return 0
  # One pass over /proc: "mnt:[4026532301] /proc/123/ns/mnt".
  find /proc/[0-9]*/ns/mnt -maxdepth 0 -printf '%l %p\n' 2>/dev/null |
    awk -v want="$mnts " 'index(want, " " $1 " ") { split($2, p, "/"); print p[3] }'
  return 0
}

cluster_netns() { ip netns list 2>/dev/null | awk -v p="$NS_PREFIX" 'index($1, p) == 1 { print $1 }'; }
cluster_links() { ip -o link show 2>/dev/null | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }' | grep -E "^(${BRIDGE}|${VETH_PREFIX}[0-9]+)$" || true; }

# --- exec ------------------------------------------------------------------------

cmd_exec() {
  (($# >= 2)) || die "usage: $PROG exec I|head CMD [ARG...]"
  local node=$1 name pid
  shift
  case "$node" in
    head | 0) name="head" ;;
    [1-9]) name=node$node ;;
    *) die "exec: no node '$node'; expected a node number (1..$MAX_NODES) or head" ;;
  esac
  pid=$(holder_pid "$name") || die "exec: $name is not up (no holder process in $DIR/nodes); run '$PROG up N' first"
  local -a enter=(nsenter -t "$pid" -u -m)
  [[ "$name" == head ]] || enter+=(-n)
  # cd inside the node: its /tmp is not the head's.
  # shellcheck disable=SC2016 # expanded by that sh
  exec "${enter[@]}" -- sh -c 'cd "$0" 2>/dev/null || cd /; exec "$@"' "$PWD" "$@"
}

cmd_link() {
  (($# == 2)) || die "usage: $PROG link I up|down"
  [[ "$1" =~ ^[1-9]$ ]] || die "link: no node '$1'; expected a node number"
  [[ "$2" == up || "$2" == down ]] || die "link: expected up or down, not '$2'"
  ip -n "$NS_PREFIX$1" link set eth0 "$2" || die "link: node$1 is not up"
}

cmd_env() {
  [[ -s "$DIR/cluster.env" ]] || die "env: no cluster is up in $DIR; run '$PROG up N' first"
  # shellcheck source=/dev/null
  source "$DIR/cluster.env"
  printf 'export FLOWRUN_CLUSTER_DIR=%q\n' "$DIR"
  printf 'export SLURM_CONF=%q\n' "$DIR/slurm/slurm.conf"
  printf 'export FLOWRUN_CLUSTER_SSH_CONFIG=%q\n' "$DIR/ssh/ssh_config"
  printf 'export FLOWRUN_CLUSTER_NODES=%q\n' "$CLUSTER_NODES"
  printf 'export FLOWRUN_CLUSTER_HEAD_ADDR=%q\n' "$HEAD_IP"
  local i ns="" addrs=""
  for ((i = 1; i <= CLUSTER_SIZE; i++)); do
    ns+="${ns:+ }$NS_PREFIX$i"
    addrs+="${addrs:+ }node$i=$(node_ip "$i")"
  done
  printf 'export FLOWRUN_CLUSTER_ADDRS=%q\n' "$addrs"
  printf 'export FLOWRUN_CLUSTER_NETNS=%q\n' "$ns"
}

cmd_status() {
  [[ -s "$DIR/cluster.env" ]] || die "status: no cluster is up in $DIR"
  # shellcheck source=/dev/null
  source "$DIR/cluster.env"
  local i rc=0
  export SLURM_CONF=$DIR/slurm/slurm.conf
  for ((i = 1; i <= CLUSTER_SIZE; i++)); do
    printf 'node%d %s holder=%s ssh: %s\n' "$i" "$(node_ip "$i")" "$(holder_pid "node$i" || echo none)" \
      "$(ssh -F "$DIR/ssh/ssh_config" "node$i" hostname 2>&1 || true)"
  done
  sinfo -N -o '%N %T %c %G' || rc=1
  return "$rc"
}

# --- up --------------------------------------------------------------------------

refuse_if_up() {
  local why=()
  [[ -e "$DIR" ]] && why+=("$DIR exists")
  local ns links
  ns=$(cluster_netns | tr '\n' ' ')
  [[ -n "$ns" ]] && why+=("network namespaces ${ns% }")
  links=$(cluster_links | tr '\n' ' ')
  [[ -n "$links" ]] && why+=("links ${links% }")
  ((${#why[@]} == 0)) && return 0
  local joined
  joined=$(printf '%s; ' "${why[@]}")
  die "a test cluster is already up (${joined%; }); run '$SELF down' first"
}

check_prerequisites() {
  ((EUID == 0)) || die "needs root (network namespaces, mounts, daemons); run it as root"
  local -A package=([ip]=iproute2 [nsenter]=util-linux [unshare]=util-linux [munged]=munge [mungekey]=munge
    [slurmctld]=slurmctld [slurmd]=slurmd [sinfo]=slurm-client [srun]=slurm-client [sshd]=openssh-server
    [ssh]=openssh-client [ssh-keygen]=openssh-client)
  local c missing=() pk=()
  for c in ip nsenter unshare munged mungekey slurmctld slurmd sinfo srun ssh ssh-keygen; do
    command -v "$c" >/dev/null 2>&1 || { missing+=("$c"); pk+=("${package[$c]}"); }
  done
  [[ -x /usr/sbin/sshd ]] || { missing+=(sshd); pk+=(openssh-server); }
  ((${#missing[@]} == 0)) || die "missing ${missing[*]}; install: apt-get install $(printf '%s\n' "${pk[@]}" | sort -u | tr '\n' ' ')"
  local used
  used=$(ip -o -4 addr show to "$NET.0/24" 2>/dev/null | awk '{ print $2 " " $4 }' | head -n1)
  [[ -z "$used" ]] || die "$NET.0/24 is already in use here ($used); remove it (another test cluster?) first"
  if ss -Hltn "sport = :$CTLD_PORT" 2>/dev/null | grep -q .; then
    die "port $CTLD_PORT (slurmctld) is already in use in this network namespace; stop that slurmctld first"
  fi
}

STAGE=""
UP_DONE=0
on_up_exit() {
  local rc=$?
  ((UP_DONE)) && return 0
  ((rc)) || rc=1
  set +e
  printf '%s: up failed at stage "%s" (exit %d)\n' "$PROG" "$STAGE" "$rc" >&2
  local f
  for f in "$DIR"/munge/munged.log "$DIR"/slurm/*.log "$DIR"/ssh/*.log "$DIR"/nodes/*.err; do
    [[ -s "$f" ]] || continue
    printf -- '--- %s (last 15 lines)\n' "$f" >&2
    tail -n 15 "$f" >&2
  done
  if [[ "${FLOWRUN_CLUSTER_KEEP:-0}" == 1 ]]; then
    printf '%s: FLOWRUN_CLUSTER_KEEP=1: left as it is; run %s down\n' "$PROG" "$SELF" >&2
  else
    printf '%s: removing what was made\n' "$PROG" >&2
    cmd_down >&2
  fi
  exit "$rc"
}

# Starts a process that holds a node's UTS and mount namespaces (and, for a node,
# its network namespace): `sleep infinity` with the node's host name and its
# /etc/hosts (and /tmp) bind-mounted. exec enters these namespaces.
start_holder() {
  local name=$1 netns=$2 hosts=$3 tmp=$4
  local -a enter=()
  [[ -n "$netns" ]] && enter=(nsenter "--net=/run/netns/$netns")
  # setsid: a Ctrl-C meant for whoever ran `up` must not end the cluster's hosts.
  # shellcheck disable=SC2016 # expanded by that sh
  setsid "${enter[@]}" unshare --uts --mount --propagation private sh -c '
    mount --bind "$1" /etc/hosts || exit 1
    if [ -n "$2" ]; then mount --bind "$2" /tmp || exit 1; fi
    hostname "$0" && exec sleep infinity' "$name" "$hosts" "$tmp" \
    </dev/null >/dev/null 2>"$DIR/nodes/$name.err" &
  echo $! >"$DIR/nodes/$name.pid"
}

wait_holder() {
  local name=$1 pid got tries
  pid=$(cat "$DIR/nodes/$name.pid")
  for tries in $(seq 100); do
    got=$(nsenter -t "$pid" -u hostname 2>/dev/null || true)
    [[ "$got" == "$name" ]] && grep -q " /tmp \| /etc/hosts " "/proc/$pid/mountinfo" 2>/dev/null && return 0
    alive "$pid" || break
    sleep 0.02
  done
  die "the holder of $name (pid $pid) did not start: $(cat "$DIR/nodes/$name.err" 2>/dev/null)"
}

hosts_file() { # hosts_file NODE_OR_HEAD DEBIAN(0|1)
  local me=$1 debian=$2 i
  printf '127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n'
  ((debian)) && printf '127.0.1.1 %s\n' "$me"
  printf '%s head\n' "$HEAD_IP"
  for ((i = 1; i <= N; i++)); do
    ((debian)) && [[ "node$i" == "$me" ]] && continue
    printf '%s node%d\n' "$(node_ip "$i")" "$i"
  done
}

up_network() {
  local i ns
  ip link add "$BRIDGE" type bridge
  ip addr add "$HEAD_IP/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  hosts_file head 0 >"$DIR/hosts"
  start_holder head "" "$DIR/hosts" ""
  for ((i = 1; i <= N; i++)); do
    ns=$NS_PREFIX$i
    ip netns add "$ns"
    ip link add "$VETH_PREFIX$i" type veth peer name eth0 netns "$ns"
    ip link set "$VETH_PREFIX$i" master "$BRIDGE" up
    ip -n "$ns" addr add "$(node_ip "$i")/24" dev eth0
    ip -n "$ns" link set lo up
    ip -n "$ns" link set eth0 up
    mkdir -p "$DIR/nodes/node$i/tmp"
    chmod 1777 "$DIR/nodes/node$i/tmp"
    local debian=0
    [[ " ${DEBIAN_NODES[*]} " == *" node$i "* ]] && debian=1
    hosts_file "node$i" "$debian" >"$DIR/nodes/node$i/hosts"
    start_holder "node$i" "$ns" "$DIR/nodes/node$i/hosts" "$DIR/nodes/node$i/tmp"
  done
  wait_holder head
  for ((i = 1; i <= N; i++)); do wait_holder "node$i"; done
}

up_munge() {
  local m=$DIR/munge
  mkdir -p "$m"
  chmod 0755 "$m" # munged: "execute permissions for all required" on the socket's directory
  mungekey --create --keyfile="$m/munge.key" --force
  chmod 0600 "$m/munge.key"
  "$SELF" --dir "$DIR" exec head munged --socket="$m/munge.socket" --key-file="$m/munge.key" \
    --log-file="$m/munged.log" --pid-file="$m/munged.pid" --seed-file="$m/munged.seed" \
    --origin="$HEAD_IP" </dev/null >/dev/null 2>>"$m/munged.log"
}

up_slurm() {
  local s=$DIR/slurm i
  mkdir -p "$s/dev" "$s/ctld" "$s/spool"
  chmod 0755 "$s"
  # Dummy GPUs: Slurm wants character devices in gres.conf; nothing opens them.
  mknod "$s/dev/nvidia0" c 195 0
  mknod "$s/dev/nvidia1" c 195 1
  echo "Name=gpu File=$s/dev/nvidia[0-1]" >"$s/gres.conf"
  {
    cat <<EOF
ClusterName=flowrun-test
SlurmctldHost=head($HEAD_IP)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge/munge.socket
SlurmctldPort=$CTLD_PORT
SlurmdPort=6818
StateSaveLocation=$s/ctld
SlurmdSpoolDir=$s/spool/%n
SlurmctldPidFile=$s/slurmctld.pid
SlurmdPidFile=$s/slurmd-%n.pid
SlurmctldLogFile=$s/slurmctld.log
SlurmdLogFile=$s/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
# The default batch_sched_delay (3 s) delays every sbatch job by 3 s.
SchedulerParameters=batch_sched_delay=0
# The nodes claim 2 CPUs each whatever this machine has.
SlurmdParameters=config_overrides
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
GresTypes=gpu
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=5
KillWait=5
Waittime=0
EOF
    for ((i = 1; i <= N; i++)); do
      echo "NodeName=node$i NodeHostname=node$i NodeAddr=$(node_ip "$i") CPUs=2 RealMemory=1000 Gres=gpu:2 State=UNKNOWN"
    done
    echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO"
  } >"$s/slurm.conf"
  export SLURM_CONF=$s/slurm.conf
  "$SELF" --dir "$DIR" exec head slurmctld -f "$SLURM_CONF" -i </dev/null >/dev/null 2>>"$s/slurmctld.log"
  for ((i = 1; i <= N; i++)); do
    "$SELF" --dir "$DIR" exec "$i" slurmd -f "$SLURM_CONF" -N "node$i" </dev/null >/dev/null 2>>"$s/slurmd-node$i.log"
  done
  local idle tries
  for tries in $(seq 300); do
    idle=$(sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)
    ((idle >= N)) && return 0
    sleep 0.1
  done
  sinfo -N -o '%N %T %E' >&2 || true
  die "only $idle of $N nodes became idle in Slurm within 30 s; see $s/*.log"
}

up_ssh() {
  local d=$DIR/ssh i
  mkdir -p "$d"
  chmod 0755 "$d"
  # sshd insists on its privilege separation directory.
  if [[ ! -d /run/sshd ]]; then
    mkdir -p /run/sshd
    chmod 0755 /run/sshd
    touch "$d/made-run-sshd"
  fi
  ssh-keygen -q -t ed25519 -N '' -C flowrun-test-host -f "$d/ssh_host_ed25519_key"
  ssh-keygen -q -t ed25519 -N '' -C flowrun-test-client -f "$d/id_ed25519"
  cp "$d/id_ed25519.pub" "$d/authorized_keys"
  chmod 0600 "$d/authorized_keys"
  cat >"$d/sshd_config" <<EOF
Port 22
HostKey $d/ssh_host_ed25519_key
AuthorizedKeysFile $d/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
UseDNS no
PrintMotd no
PrintLastLog no
MaxStartups 200:30:400
MaxSessions 200
Subsystem sftp internal-sftp
EOF
  {
    cat <<EOF
Host *
  User root
  IdentityFile $d/id_ed25519
  IdentitiesOnly yes
  StrictHostKeyChecking no
  UserKnownHostsFile /dev/null
  GlobalKnownHostsFile /dev/null
  LogLevel ERROR
  BatchMode yes
  ConnectTimeout 5
EOF
    for ((i = 1; i <= N; i++)); do
      printf 'Host node%d %s\n  HostName %s\n' "$i" "$(node_ip "$i")" "$(node_ip "$i")"
    done
  } >"$d/ssh_config"
  chmod 0644 "$d/ssh_config"
  for ((i = 1; i <= N; i++)); do
    "$SELF" --dir "$DIR" exec "$i" /usr/sbin/sshd -f "$d/sshd_config" -E "$d/sshd-node$i.log" \
      -o "ListenAddress=$(node_ip "$i")" -o "PidFile=$d/sshd-node$i.pid" </dev/null >/dev/null
  done
  # Every node answers, with its own host name (in parallel: ~0.2 s each).
  local pids=()
  for ((i = 1; i <= N; i++)); do
    (
      for tries in $(seq 50); do
        got=$(ssh -F "$d/ssh_config" "node$i" hostname 2>&1) && [[ "$got" == "node$i" ]] && exit 0
        sleep 0.1
      done
      echo "$PROG: ssh node$i hostname: expected node$i, got: $got" >&2
      exit 1
    ) &
    pids+=($!)
  done
  local p rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  ((rc == 0)) || die "sshd on some nodes does not answer; see $d/sshd-node*.log"
}

cmd_up() {
  (($# >= 1)) || die "usage: $PROG up N [--debian-hostname NODE]..."
  N=$1
  shift
  [[ "$N" =~ ^[1-9]$ ]] || die "up: N must be a number of nodes from 1 to $MAX_NODES, not '$N'"
  DEBIAN_NODES=()
  while (($#)); do
    case "$1" in
      --debian-hostname)
        (($# >= 2)) || die "up: --debian-hostname needs a node name (node1..node$N)"
        [[ "$2" =~ ^node[1-9]$ && ${2#node} -le $N ]] || die "up: --debian-hostname: no node '$2' among node1..node$N"
        DEBIAN_NODES+=("$2")
        shift
        ;;
      *) die "up: unknown argument '$1'" ;;
    esac
    shift
  done
  ((EUID == 0)) || die "needs root (network namespaces, mounts, daemons); run it as root"
  refuse_if_up
  check_prerequisites
  local t0 t
  t0=$(now)
  trap on_up_exit EXIT
  mkdir -p "$DIR/nodes"
  chmod 0755 "$DIR"
  local nodes="" i
  for ((i = 1; i <= N; i++)); do nodes+="${nodes:+ }node$i"; done
  printf 'CLUSTER_SIZE=%d\nCLUSTER_NODES=%q\nCLUSTER_DEBIAN=%q\n' "$N" "$nodes" "${DEBIAN_NODES[*]}" >"$DIR/cluster.env"

  STAGE=network t=$(now)
  up_network
  echo "$PROG: network: head $HEAD_IP, $N nodes in $(since "$t") s"
  STAGE=munge t=$(now)
  up_munge
  echo "$PROG: munge: $(since "$t") s"
  STAGE=slurm t=$(now)
  up_slurm
  echo "$PROG: slurm: slurmctld and $N slurmd idle in $(since "$t") s"
  STAGE=ssh t=$(now)
  up_ssh
  echo "$PROG: ssh: $N sshd answering in $(since "$t") s"
  UP_DONE=1
  for ((i = 1; i <= N; i++)); do
    local note=""
    [[ " ${DEBIAN_NODES[*]} " == *" node$i "* ]] && note=" (its /etc/hosts: node$i = 127.0.1.1)"
    echo "  node$i $(node_ip "$i")$note"
  done
  local dir_option=""
  [[ "$DIR" == /run/flowrun-test-cluster ]] || dir_option=" --dir $DIR"
  echo "$PROG: up: $N node$( ((N == 1)) || echo s) in $(since "$t0") s; state in $DIR"
  echo "$PROG: eval \"\$($SELF$dir_option env)\"   # SLURM_CONF and FLOWRUN_CLUSTER_SSH_CONFIG"
}

# --- down ------------------------------------------------------------------------

cmd_down() {
  local t0 t
  t0=$(now)
  local -a pids=() more=()
  t=$(now)
  mapfile -t pids < <(cluster_pids | sort -un)
  ((${#pids[@]})) && stop_pids "${pids[@]}"
  # A process can have started in a namespace while the others were stopping.
  mapfile -t more < <(cluster_pids | sort -un)
  ((${#more[@]})) && stop_pids "${more[@]}"
  mapfile -t pids < <(printf '%s\n' "${pids[@]}" "${more[@]}" | grep . | sort -un)
  echo "$PROG: down: ${#pids[@]} processes stopped in $(since "$t") s"
  t=$(now)
  local ns link
  for link in $(cluster_links); do
    [[ "$link" == "$BRIDGE" ]] || ip link del "$link" 2>/dev/null || true
  done
  for ns in $(cluster_netns); do ip netns del "$ns" 2>/dev/null || true; done
  ip link del "$BRIDGE" 2>/dev/null || true
  echo "$PROG: down: network removed in $(since "$t") s"
  [[ -f "$DIR/ssh/made-run-sshd" ]] && rmdir /run/sshd 2>/dev/null
  rm -rf "$DIR"

  local left=() alive_pids=() p
  for p in "${pids[@]}"; do alive "$p" && alive_pids+=("$p ($(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | cut -c1-80))"); done
  ((${#alive_pids[@]})) && left+=("processes: ${alive_pids[*]}")
  ns=$(cluster_netns | tr '\n' ' ')
  [[ -n "$ns" ]] && left+=("network namespaces: $ns")
  link=$(cluster_links | tr '\n' ' ')
  [[ -n "$link" ]] && left+=("links: $link")
  [[ -e "$DIR" ]] && left+=("directory: $DIR")
  if ((${#left[@]})); then
    printf '%s: down: LEFT after %s s:\n' "$PROG" "$(since "$t0")"
    printf '  %s\n' "${left[@]}"
    return 1
  fi
  echo "$PROG: down: nothing left, in $(since "$t0") s"
}

# --- main ------------------------------------------------------------------------

while (($#)); do
  case "$1" in
    --dir)
      (($# >= 2)) || die "--dir needs a directory"
      DIR=$2
      shift 2
      ;;
    --dir=*)
      DIR=${1#--dir=}
      shift
      ;;
    *) break ;;
  esac
done
[[ "$DIR" == /* ]] || die "the state directory must be an absolute path, not '$DIR'"
(($#)) || {
  usage >&2
  exit 2
}
command=$1
shift
case "$command" in
  up) cmd_up "$@" ;;
  down)
    ((EUID == 0)) || die "needs root; run it as root"
    (($# == 0)) || die "down takes no arguments"
    cmd_down
    ;;
  exec) cmd_exec "$@" ;;
  link) cmd_link "$@" ;;
  env) cmd_env ;;
  status) cmd_status ;;
  -h | --help | help) usage ;;
  *)
    usage >&2
    die "unknown command '$command'"
    ;;
esac
