"""Writes a small synthetic regression data set: y = 3x - 1 + noise."""
import argparse
import os

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--out", default="data")
parser.add_argument("--samples", type=int, default=4096)
args = parser.parse_args()

os.makedirs(args.out, exist_ok=True)
generator = torch.Generator().manual_seed(0)
x = torch.randn(args.samples, 1, generator=generator)
y = 3 * x - 1 + 0.05 * torch.randn(args.samples, 1, generator=generator)
torch.save({"x": x, "y": y}, os.path.join(args.out, "train.pt"))
print(f"wrote {args.samples} samples to {args.out}/train.pt")
