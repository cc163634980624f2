"""Run ``memscope`` with the target compiles' XLA dumps kept in DIR (a GPU
session's look at what XLA:GPU compiled without the device):

    python -m benchmarks._keep_target_dump DIR run --target gpu:h200 prog.py

memscope's compile cache is off for the run: a compile it kept from an earlier
run (the target's compiles are kept too) would be read back, not made, and
leave no dump.
"""

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import memscope.compiled.dump as dump

FOLDER = Path(sys.argv.pop(1))
os.environ["MEMSCOPE_CACHE"] = "off"  # (every compile made, so dumped: see above)


@contextlib.contextmanager
def _kept(prefix: str = "") -> Iterator[str]:
    FOLDER.mkdir(parents=True, exist_ok=True)
    yield tempfile.mkdtemp(prefix=prefix, dir=FOLDER)


dump.tempfile = type("Kept", (), {"TemporaryDirectory": staticmethod(_kept)})  # type: ignore
if __name__ == "__main__":
    from memscope.cli import main

    sys.argv[0] = "memscope"
    main()
