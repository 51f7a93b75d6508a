"""The join after train.py: loads the checkpoint rank 0 saved with
LightningModule.load_from_checkpoint and prints the line it learned.

  python3 evaluate.py CHECKPOINT
"""
import sys

from train import Line


def main():
    model = Line.load_from_checkpoint(sys.argv[1])
    w, b = model.layer.weight.item(), model.layer.bias.item()
    print(f"model: y = {w:.2f} x + {b:.2f} (target: y = 3x - 1), lr {model.hparams.lr}", flush=True)


if __name__ == "__main__":
    main()
