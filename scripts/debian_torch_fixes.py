"""Two fixes that let Lightning run on Debian 12's torch (python3-torch 1.13.1).

scripts/venv copies this file into the frameworks venv with a .pth line that
imports it at start-up. It changes nothing in Debian's files: each fix is a
one-line edit of a module's source, made when that module is imported, and
only when the line is exactly the one below.

1. torch/version.py says `__version__ = '1.13.0a0'`. Debian builds release
   1.13.1 from the source tree, whose version.txt holds 1.13.0a0 (upstream's
   release builds set the real version with PYTORCH_BUILD_VERSION instead).
   Lightning compares versions (lightning_fabric/utilities/imports.py:
   `_TORCH_GREATER_EQUAL_1_13 = compare_version("torch", operator.ge, "1.13.0")`),
   takes 1.13.0a0 for older than 1.13, and calls torch 1.12's hook API, which
   fails in every LightningModule: "TypeError: cannot create weak reference to
   'weakref.CallableProxyType' object". torch.__version__ becomes '1.13.1'.

2. Python 3.11 refuses a dataclass field whose default is an unhashable
   object (bpo-44674), and torch/distributed/_shard/sharded_tensor/metadata.py
   has one: `tensor_properties: TensorProperties = field(default=TensorProperties())`.
   Importing it raises "ValueError: mutable default <class '...TensorProperties'>
   for field tensor_properties is not allowed: use default_factory", and
   Lightning imports it (torch.distributed.fsdp at import time, sharded tensor
   hooks in every LightningModule). torch 2.0 fixed that line upstream
   (pytorch/pytorch#91795); this applies the same fix.
"""
import sys
from importlib.machinery import PathFinder, SourceFileLoader

FIXES = {
    "torch.version": ("__version__ = '1.13.0a0'", "__version__ = '1.13.1'"),
    "torch.distributed._shard.sharded_tensor.metadata": (
        "tensor_properties: TensorProperties = field(default=TensorProperties())",
        "tensor_properties: TensorProperties = field(default_factory=TensorProperties)"),
}
DEBIAN_TORCH = "/usr/lib/python3/dist-packages/torch/"


class _FixingLoader(SourceFileLoader):
    """Compiles the module from its source with the fix (never from a .pyc made without it)."""

    def get_code(self, fullname):
        broken, fixed = FIXES[fullname]
        source = self.get_data(self.path).decode("utf-8")
        return compile(source.replace(broken, fixed, 1), self.path, "exec", dont_inherit=True)


class _Finder:
    """A meta path finder for Debian's copies of the modules in FIXES; every other import goes on as usual."""

    @staticmethod
    def find_spec(fullname, path=None, target=None):
        if fullname not in FIXES:
            return None
        spec = PathFinder.find_spec(fullname, path, target)
        if (spec is not None and isinstance(spec.loader, SourceFileLoader)
                and spec.origin.startswith(DEBIAN_TORCH)):
            spec.loader = _FixingLoader(fullname, spec.origin)
        return spec


if not any(isinstance(f, _Finder) for f in sys.meta_path):
    sys.meta_path.insert(0, _Finder())
