"""A plain Lightning script: a LightningModule fits y = 3x - 1 on synthetic
data with DDP on CPU workers and saves a checkpoint. Nothing in it knows
flowrun: it runs the same under torchrun, and Lightning finds the launcher's
processes through TORCHELASTIC_RUN_ID (TorchElasticEnvironment).

  python3 train.py [--devices 2] [--num-nodes 1] [--epochs 10] [--root checkpoints]
"""
import argparse
import os

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset


class Line(pl.LightningModule):
    """y = w x + b, fitted by SGD on mean squared error."""

    def __init__(self, lr: float = 0.1):
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(1, 1)

    def forward(self, x):
        return self.layer(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self(x), y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def samples(n=512):
    g = torch.Generator().manual_seed(0)
    x = torch.rand(n, 1, generator=g) * 2 - 1
    return TensorDataset(x, 3 * x - 1 + 0.01 * torch.randn(n, 1, generator=g))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--num-nodes", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--root", default="checkpoints")
    args = parser.parse_args()

    pl.seed_everything(0)
    trainer = pl.Trainer(accelerator="cpu", devices=args.devices, num_nodes=args.num_nodes, strategy="ddp",
                         max_epochs=args.epochs, default_root_dir=args.root, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    model = Line()
    trainer.fit(model, DataLoader(samples(), batch_size=32))

    # Who made this process: under torchrun or flowrun, the launcher did
    # (TorchElasticEnvironment), and Lightning started no process of its own.
    env = trainer.strategy.cluster_environment
    with open(f"/proc/{os.getpid()}/task/{os.getpid()}/children") as f:
        children = len(f.read().split())
    print(f"rank {trainer.global_rank}/{trainer.world_size}: {type(env).__name__}, "
          f"creates_processes_externally={env.creates_processes_externally}, "
          f"child processes={children}, loss {trainer.callback_metrics['loss']:.4f}", flush=True)

    trainer.save_checkpoint(os.path.join(args.root, "model.ckpt"))  # rank 0 writes it


if __name__ == "__main__":
    main()
