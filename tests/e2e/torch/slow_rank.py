"""A DDP training loop (gloo) with one rank slowed by 30%, as a rank reading
from a slow disk is: after the first steps, which measure a step's time, rank
--slow-rank sleeps 0.3 of that time in load_batch at every step. The ranks
stop together once the file --stop exists (every rank checks it through an
all_reduce every 20 steps), or after --max-steps; rank 0 then prints the
steps, the measured step time and the loop's time."""
import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--slow-rank", type=int, default=-1)
    parser.add_argument("--slowdown", type=float, default=0.3)
    parser.add_argument("--stop", default="")
    parser.add_argument("--max-steps", type=int, default=100000)
    args = parser.parse_args()

    dist.init_process_group("gloo", init_method="env://")
    rank = dist.get_rank()
    torch.manual_seed(rank)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    extra = 0.0

    def load_batch():
        if extra > 0:
            time.sleep(extra)
        return torch.randn(64, 256), torch.randn(64, 1)

    measured_from, step = time.perf_counter(), 0
    began = measured_from
    while step < args.max_steps:
        x, y = load_batch()
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        step += 1
        if step == 50:
            per_step = (time.perf_counter() - measured_from) / 50
            if rank == args.slow_rank:
                extra = args.slowdown * per_step
        if step % 20 == 0:
            stop = torch.tensor([1.0 if args.stop and os.path.exists(args.stop) else 0.0])
            dist.all_reduce(stop)
            if stop.item() > 0:
                break
    if rank == 0:
        print(f"{step} steps, {per_step * 1000:.1f} ms a step before the slowdown, "
              f"{time.perf_counter() - began:.3f} s in all", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
