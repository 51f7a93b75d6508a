"""torchrun from Debian's python3-torch 1.13 on Python 3.11, with one lookup fixed.

torch 1.13's Std.from_str finds the Std member for a number by iterating over
Std; on Python 3.11 iterating a Flag yields only its single-bit members, so
NONE (0) and ALL (3) are never found, from_str returns None and torchrun fails
in to_map with "'NoneType' object has no attribute 'get'". This wrapper
replaces that one lookup with Std(int(v)) in memory (no file on the system is
changed), then runs torch.distributed.run.main() exactly as /usr/bin/torchrun
does. Usage: python3 torchrun_py311.py [torchrun arguments...]
"""

import re
import sys

from torch.distributed.elastic.multiprocessing import api


def _from_str(cls, vm):
    def to_std(v):
        return cls(int(v))

    if re.match(api._VALUE_REGEX, vm):
        return to_std(vm)
    if re.match(api._MAPPING_REGEX, vm):
        return {int(i): to_std(v) for i, v in (m.split(":") for m in vm.split(","))}
    raise ValueError(f"{vm} does not match: <{api._VALUE_REGEX}> or <{api._MAPPING_REGEX}>")


api.Std.from_str = classmethod(_from_str)

if __name__ == "__main__":
    from torch.distributed.run import main

    sys.argv[0] = "torchrun"
    sys.exit(main())
