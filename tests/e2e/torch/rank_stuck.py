"""Rank 2 spins in a Python loop (load_batch) before the all_reduce the
other ranks wait in. Each rank prints while it starts (importing torch and
the rendezvous may take seconds) and stops printing once past the barrier,
so that the step's stall_timeout counts from there. The printing is a child
process's: importing torch loads its libraries with the GIL held, for
seconds on a busy machine, which would keep a thread of this one silent."""
import subprocess
import sys

beat = subprocess.Popen(["/bin/sh", "-c", "while :; do echo starting; sleep 0.5; done"])

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def load_batch():
    while True:
        pass


def main():
    dist.init_process_group("gloo", init_method="env://")
    rank = dist.get_rank()
    t = torch.ones(4)
    dist.barrier()
    beat.kill()
    beat.wait()
    print(f"rank {rank}: past the barrier", file=sys.stderr, flush=True)
    if rank == 2:
        load_batch()
    dist.all_reduce(t)


main()
