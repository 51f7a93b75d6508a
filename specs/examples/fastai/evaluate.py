"""The join after train.py: loads the model file train.py saved with
fastai's load_model and prints the line it learned.

  python3 evaluate.py MODEL.pth
"""
import sys

import torch
from fastai.learner import load_model


def main():
    model = torch.nn.Linear(1, 1)
    load_model(sys.argv[1], model, opt=None, with_opt=False, device="cpu")
    w, b = model.weight.item(), model.bias.item()
    print(f"model: y = {w:.2f} x + {b:.2f} (target: y = 3x - 1)", flush=True)


if __name__ == "__main__":
    main()
