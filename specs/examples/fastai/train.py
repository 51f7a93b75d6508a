"""A plain fastai script: a Learner fits y = 3x - 1 on synthetic data and
saves its model. Nothing in it knows flowrun. fastai reads the launcher's
WORLD_SIZE and RANK (fastai.torch_core.num_distrib, rank_distrib); this
script trains in one process, and on a machine with GPUs the same Learner
trains on every worker inside `with learn.distrib_ctx():` (docs/fastai.md).

  python3 train.py [--epochs 8] [--name line]
"""
import argparse

import torch
from fastai.data.core import DataLoaders
from fastai.learner import Learner
from fastai.losses import MSELossFlat
from fastai.optimizer import SGD
from fastai.torch_core import num_distrib, rank_distrib, set_seed
from torch.utils.data import TensorDataset


def samples(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 1, generator=g) * 2 - 1
    return TensorDataset(x, 3 * x - 1 + 0.01 * torch.randn(n, 1, generator=g))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--name", default="line")
    args = parser.parse_args()

    set_seed(0)
    dls = DataLoaders.from_dsets(samples(512, 0), samples(128, 1), bs=32, device="cpu")
    learn = Learner(dls, torch.nn.Linear(1, 1), loss_func=MSELossFlat(), opt_func=SGD, lr=0.1)
    learn.fit(args.epochs)
    print(f"rank {rank_distrib()} of {num_distrib()}: valid loss {learn.validate()[0]:.4f}", flush=True)
    learn.save(args.name)  # models/NAME.pth (fastai's model_dir), with the optimizer state


if __name__ == "__main__":
    main()
