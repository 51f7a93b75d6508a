"""The worker of case (r), recovery from a lost node, for flowrun and torchrun alike: it stamps its
start (time.time() before anything is imported, its rank, its parent's pid and FLOWRUN_AGENT_ID) in
DIR/start.<pid>, then joins a gloo group and all-reduces every 50 ms, as a training step would:
a lost peer makes it fail. The ranks stop together, exit 0, once DIR/stop exists.
Usage: python3 recovery_worker.py DIR"""
import os
import sys
import time

started = time.time()
where = os.path.join(sys.argv[1], f"start.{os.getpid()}")
with open(where + ".tmp", "w") as f:
    f.write(f"{started!r} {os.environ['RANK']} {os.getppid()} {os.environ.get('FLOWRUN_AGENT_ID', '-')} "
            f"{os.environ.get('TORCHELASTIC_RESTART_COUNT', '-')}\n")
os.replace(where + ".tmp", where)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

dist.init_process_group("gloo")
stop = os.path.join(sys.argv[1], "stop")
while True:
    t = torch.tensor([1.0 if os.path.exists(stop) else 0.0])
    dist.all_reduce(t)
    if t.item() > 0:
        break
    time.sleep(0.05)
dist.destroy_process_group()
