"""A plain PyTorch DDP script, as it would run under torchrun.

It reads only the standard variables (RANK, LOCAL_RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT) through init_process_group(init_method="env://"),
uses cuda:LOCAL_RANK when GPUs are visible and gloo on CPU otherwise, and
saves the model where it always does. Nothing in it knows about flowrun.
"""
import argparse
import json
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

parser = argparse.ArgumentParser()
parser.add_argument("--data", default="data")
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--gpus-per-worker", type=int, default=1)
parser.add_argument("--all-ranks", action="store_true")
args = parser.parse_args()

use_cuda = torch.cuda.is_available()
local_rank = int(os.environ.get("LOCAL_RANK", 0))
if use_cuda:
    device = torch.device("cuda", local_rank * args.gpus_per_worker)
    torch.cuda.set_device(device)
else:
    device = torch.device("cpu")
dist.init_process_group("nccl" if use_cuda else "gloo", init_method="env://")
rank, world = dist.get_rank(), dist.get_world_size()

data = torch.load(os.path.join(args.data, "train.pt"))
x, y = data["x"][rank::world].to(device), data["y"][rank::world].to(device)
model = DDP(torch.nn.Linear(1, 1).to(device), device_ids=[device.index] if use_cuda else None)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(args.epochs):
    for start in range(0, len(x), 64):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x[start:start + 64]), y[start:start + 64])
        loss.backward()
        optimizer.step()
    print(f"rank {rank}/{world} epoch {epoch} loss {loss.item():.4f}", flush=True)

os.makedirs("metrics", exist_ok=True)
with open(f"metrics/rank{rank}.json", "w") as f:
    json.dump({"rank": rank, "loss": loss.item()}, f)
if rank == 0:
    torch.save(model.module.state_dict(), "model.pt")
dist.destroy_process_group()
