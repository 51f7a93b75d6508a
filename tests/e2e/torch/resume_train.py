"""ddp_train.py's training, written to survive a restart as docs/recovery.md
teaches: rank 0 saves a checkpoint (model, optimizer, the next step) every
--every steps, written to a temporary file and renamed into place, and every
rank starts from it when it is there. The batches are seeded by step and rank,
so a run resumed from a checkpoint computes what an uninterrupted one does.

--hold-at S (for tests): in the first attempt (TORCHELASTIC_RESTART_COUNT 0),
once the checkpoint of step S is saved, each rank writes held.<RANK> (its
FLOWRUN_NODE_RANK and FLOWRUN_AGENT_ID) in the working directory and rank 1
stops making progress while its peers wait in the next all-reduce: a node can
be taken away at a known point."""
import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from ddp_train import batch


def save(path, state):
    tmp = f"{path}.tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--every", type=int, default=2)
    parser.add_argument("--hold-at", type=int, default=-1)
    args = parser.parse_args()

    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    start = 0
    if os.path.exists(args.checkpoint):
        saved = torch.load(args.checkpoint)
        model.module.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        start = saved["step"]
        print(f"rank {rank}: attempt {attempt} resumes at step {start}", flush=True)
    for step in range(start, args.steps):
        x, y = batch(step, rank)
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        done = step + 1
        if done % args.every == 0:
            if rank == 0:
                save(args.checkpoint, {"model": model.module.state_dict(), "optimizer": optimizer.state_dict(),
                                       "step": done})
            dist.barrier()  # every rank goes on once the checkpoint is in place
        if attempt == 0 and done == args.hold_at:
            with open(f"held.{rank}.tmp", "w") as f:
                f.write(f"{os.environ.get('FLOWRUN_NODE_RANK', '0')} {os.environ.get('FLOWRUN_AGENT_ID', '-')}\n")
            os.replace(f"held.{rank}.tmp", f"held.{rank}")
            while rank == 1:
                time.sleep(0.1)  # no progress: its node is about to be lost
    if rank == 0:
        torch.save({"model": model.module.state_dict(), "world_size": world, "steps": args.steps,
                    "lr": args.lr}, "model.pt")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
