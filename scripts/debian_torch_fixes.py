"""Makes Debian 12's torch 1.13 importable in full on Python 3.11.

scripts/venv copies this file into the frameworks venv with a .pth line that
imports it at start-up. It changes nothing in Debian's files.

Python 3.11 refuses a dataclass field whose default is an unhashable object
(bpo-44674), and torch 1.13's torch/distributed/_shard/sharded_tensor/metadata.py
has one: `tensor_properties: TensorProperties = field(default=TensorProperties())`.
Importing it raises "ValueError: mutable default <class '...TensorProperties'>
for field tensor_properties is not allowed: use default_factory", and Lightning
imports it (torch.distributed.fsdp at import time, sharded tensor hooks in
every LightningModule). torch 2.0 fixed the line upstream (pytorch/pytorch#91795,
`field(default_factory=TensorProperties)`); this applies that same fix to the
source when that one module is imported, and does nothing on other versions.
"""
import sys
from importlib.machinery import PathFinder, SourceFileLoader

MODULE = "torch.distributed._shard.sharded_tensor.metadata"
BROKEN = "tensor_properties: TensorProperties = field(default=TensorProperties())"
FIXED = "tensor_properties: TensorProperties = field(default_factory=TensorProperties)"


class _FixingLoader(SourceFileLoader):
    """Compiles the module from its source with the fix (never from a .pyc made without it)."""

    def get_code(self, fullname):
        source = self.get_data(self.path).decode("utf-8")
        return compile(source.replace(BROKEN, FIXED, 1), self.path, "exec", dont_inherit=True)


class _Finder:
    """A meta path finder for MODULE alone; every other import goes on as usual."""

    @staticmethod
    def find_spec(fullname, path=None, target=None):
        if fullname != MODULE:
            return None
        spec = PathFinder.find_spec(fullname, path, target)
        if spec is not None and isinstance(spec.loader, SourceFileLoader):
            spec.loader = _FixingLoader(fullname, spec.origin)
        return spec


if sys.version_info >= (3, 11) and not any(isinstance(f, _Finder) for f in sys.meta_path):
    sys.meta_path.insert(0, _Finder())
