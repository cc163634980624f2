"""A short language-model run: the transformer sample (4 layers, optax Adam),
three steps, as a smoke test in CI runs it. Compile-bound."""

import runpy
import sys
from pathlib import Path

sys.argv = ["transformer_adam.py", "--steps", "3", "--layers", "4", "--width", "64"]
runpy.run_path(str(Path(__file__).resolve().parents[2] / "sample_programs" /
                   "transformer_adam.py"), run_name="__main__")
