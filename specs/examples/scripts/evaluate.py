"""Loads the trained model and reports how close it is to y = 3x - 1."""
import argparse
import glob
import json
import os

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--model")
parser.add_argument("--all-ranks", metavar="DIR")
args = parser.parse_args()

if args.all_ranks:
    for path in sorted(glob.glob(os.path.join(args.all_ranks, "rank*", "metrics", "*.json"))):
        print(path, json.load(open(path)))
    args.model = os.path.join(args.all_ranks, "rank0", "model.pt")
state = torch.load(args.model)
weight, bias = state["weight"].item(), state["bias"].item()
print(f"model: y = {weight:.3f} x + {bias:.3f} (target: y = 3x - 1)")
