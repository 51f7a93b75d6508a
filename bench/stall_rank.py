"""A rank of a hung step, for cases (i) and (j) of scripts/bench: rank ODD spins in a Python loop
(load_batch), the others wait for it, in a gloo all_reduce (`torch`) or on an event (`plain`, for a
machine without torch). Each rank prints while it starts (importing torch and the rendezvous take
seconds) and stops once all are past the barrier, so that the step's stall_timeout counts from there.
The start-up lines come from a child process: importing torch loads its libraries with the GIL held,
which would keep a thread of this one silent.

  stall_rank.py torch|plain ODD
"""
import os
import subprocess
import sys
import threading

mode, odd = sys.argv[1], int(sys.argv[2])
beat = subprocess.Popen(["/bin/sh", "-c", "while :; do echo starting; sleep 0.5; done"])

if mode == "torch":
    import torch
    import torch.distributed as dist


def load_batch():
    while True:
        pass


def wait_for_rank(rank):
    threading.Event().wait()


def main():
    rank = int(os.environ["RANK"])
    if mode == "torch":
        dist.init_process_group("gloo", init_method="env://")
        t = torch.ones(4)
        dist.barrier()
    beat.kill()
    beat.wait()
    print(f"rank {rank}: past the barrier", file=sys.stderr, flush=True)
    if rank == odd:
        load_batch()
    if mode == "torch":
        dist.all_reduce(t)
    else:
        wait_for_rank(odd)


main()
