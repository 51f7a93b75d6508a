"""The join of ddp_train.py: loads rank 0's model.pt and replays the training
in one process (the mean of every rank's gradient, as DDP's all-reduce
makes it) to check that the workers trained together, WORLD_SIZE of them.

  check_model.py MODEL WORLD [STEP:EARLIER]   the steps before STEP were trained
                                              by EARLIER workers (an elastic step
                                              that went on with fewer)"""
import sys

import torch

from ddp_train import batch


def main():
    path, want_world = sys.argv[1], int(sys.argv[2])
    until, earlier = (int(x) for x in sys.argv[3].split(":")) if len(sys.argv) > 3 else (0, want_world)
    saved = torch.load(path)
    world, steps, lr = saved["world_size"], saved["steps"], saved["lr"]
    if world != want_world:
        sys.exit(f"model.pt was trained by {world} workers, expected {want_world}")
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for step in range(steps):
        n = earlier if step < until else world
        optimizer.zero_grad()
        loss = sum(torch.nn.functional.mse_loss(model(x), y) for x, y in (batch(step, r) for r in range(n)))
        (loss / n).backward()
        optimizer.step()
    trained = saved["model"]
    if sorted(trained) != ["bias", "weight"] or trained["weight"].shape != (1, 8):
        sys.exit(f"unexpected state dict: {sorted(trained)}")
    if torch.equal(trained["weight"], initial["weight"]):
        sys.exit("model.pt holds the untrained weights")
    for name, value in model.state_dict().items():
        if not torch.allclose(trained[name], value, atol=1e-5):
            sys.exit(f"{name} differs from the replay: {trained[name]} vs {value}")
    before = f"{earlier} workers for steps 0-{until - 1}, then " if until else ""
    print(f"model.pt: {before}{world} workers, {steps} steps of SGD, matches the replay")


if __name__ == "__main__":
    main()
