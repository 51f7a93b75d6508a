"""Rank 2 spins in a Python loop (load_batch) before the all_reduce the
other ranks wait in. Each rank prints while it starts (importing torch and
the rendezvous may take seconds) and stops printing once past the barrier,
so that the step's stall_timeout counts from there."""
import sys
import threading

stop = threading.Event()


def heartbeat():
    while not stop.wait(0.5):
        print("starting", flush=True)


beat = threading.Thread(target=heartbeat)
beat.start()

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
    stop.set()
    beat.join()
    print(f"rank {rank}: past the barrier", file=sys.stderr, flush=True)
    if rank == 2:
        load_batch()
    dist.all_reduce(t)


main()
