"""What a container runtime does inside a pod's namespaces before the container's command runs, run
by podsim.py as the first process of the pod (PID 1 of its PID namespace, in its own network, UTS and
mount namespaces):

  podinit.py POD.json

sets the host name, bind-mounts each (source, target, read-only) of the pod's mounts over the
host's file system (private to this mount namespace: /tmp, /var/tmp, /root, the working directory,
/etc/hosts, /etc/hostname, /etc/resolv.conf, the volumes), a tmpfs on /dev/shm, changes to the
working directory and execs the command with exactly the pod's environment, so that the command is
PID 1, as in a container without an init. A command that cannot run exits 128 with the runtime's
kind of message, as a container that fails to start does.
"""
import ctypes
import json
import os
import socket
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC = 1, 2, 4, 32, 4096, 16384
libc = ctypes.CDLL(None, use_errno=True)


def mount(source, target, fstype, flags, data=None):
    if libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None, flags,
                  data.encode() if data else None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target}: {os.strerror(err)}")


def main():
    with open(sys.argv[1]) as f:
        pod = json.load(f)
    try:
        socket.sethostname(pod["hostname"])
        for source, target, read_only in pod["mounts"]:
            mount(source, target, None, MS_BIND | MS_REC)
            if read_only:
                mount("none", target, None, MS_REMOUNT | MS_BIND | MS_RDONLY)
        mount("shm", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
        os.chdir(pod["cwd"])
    except OSError as e:
        print(f"podsim: failed to create the pod's sandbox: {e}", file=sys.stderr, flush=True)
        return 128
    argv, env = pod["argv"], pod["env"]
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as e:
        print(f"podsim: failed to start container: exec: {argv[0]!r}: {e.strerror} (PATH={env.get('PATH', '')})",
              file=sys.stderr, flush=True)
        return 128


if __name__ == "__main__":
    sys.exit(main())
