"""A rank that saves an emergency checkpoint when it is stopped: on SIGTERM
it takes one more batch from its DataLoader (whose worker processes share
its process group) and saves it with its step. Rank FAIL_RANK fails once
every rank has its DataLoader running (READY_DIR), which stops the others.
If the stop reached the DataLoader's workers with the main process, the
batch cannot come and the checkpoint is never written. With FAIL_STAMP set,
the failing rank writes time.time_ns() there just before it exits (the
drain case of scripts/bench times the launchers from it)."""
import os
import signal
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Numbers(Dataset):
    def __len__(self):
        return 1 << 20

    def __getitem__(self, i):
        return torch.tensor([float(i)])


stop = False


def on_term(signum, frame):
    global stop
    stop = True


signal.signal(signal.SIGTERM, on_term)
rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
ready_dir = os.environ["READY_DIR"]
loader = iter(DataLoader(Numbers(), batch_size=4, num_workers=2))
step, batch = 0, next(loader)
open(os.path.join(ready_dir, str(rank)), "w").close()
if rank == int(os.environ["FAIL_RANK"]):
    while len(os.listdir(ready_dir)) < world:
        time.sleep(0.01)  # polls for the others' files: an event, not a timing window
    if os.environ.get("FAIL_STAMP"):
        stamp = os.environ["FAIL_STAMP"]
        with open(stamp + ".tmp", "w") as f:
            f.write(str(time.time_ns()))
        os.replace(stamp + ".tmp", stamp)
    sys.exit(3)
while not stop:
    batch = next(loader)
    step += 1
    time.sleep(0.01)
batch = next(loader)  # the DataLoader's workers must still be there
torch.save({"step": step, "batch": batch}, os.path.join(os.environ["CKPT_DIR"], f"emergency-{rank}.pt"))
print(f"rank {rank}: saved an emergency checkpoint at step {step}", flush=True)
sys.exit(0)
