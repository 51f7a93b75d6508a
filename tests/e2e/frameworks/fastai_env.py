"""What fastai reads from the launcher, on every rank, without training:
fastai.torch_core.num_distrib() (WORLD_SIZE) and rank_distrib() (RANK), and
that fastai.distributed (Learner.distrib_ctx) imports with this venv."""
import os

import fastai.distributed  # noqa: F401  (needs accelerate; the recipe in docs/fastai.md uses it)
from fastai.learner import Learner
from fastai.torch_core import num_distrib, rank_distrib

print(f"rank {os.environ['RANK']}: num_distrib()={num_distrib()} rank_distrib()={rank_distrib()} "
      f"WORLD_SIZE={os.environ['WORLD_SIZE']} distrib_ctx={hasattr(Learner, 'distrib_ctx')}", flush=True)
