"""Rank 2 dies (os._exit(7)) right after a barrier, while the other ranks
enter an all_reduce that can never complete: the one that failed first must
be named, not a peer that fails because it left."""
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo", init_method="env://")
rank = dist.get_rank()
t = torch.ones(4)
dist.barrier()
if rank == int(os.environ.get("FAIL_RANK", "2")):
    os._exit(7)
dist.all_reduce(t)
print(f"rank {rank}: all_reduce returned {t.tolist()}", flush=True)
