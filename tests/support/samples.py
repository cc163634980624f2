"""The bundled sample programs, imported as modules by the tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

#: the checkout's root folder
ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_programs"


def sample_module(name: str, path: Path | None = None) -> ModuleType:
    """Import sample program ``name`` (or the program at ``path``) as a fresh module:
    its jits are made now, so inside a capture when called inside one; its
    ``main`` does not run. Its own folder is importable while it loads, as it
    is when python runs it."""
    path = SAMPLES / f"{name}.py" if path is None else path
    spec = importlib.util.spec_from_file_location(f"_memscope_sample_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    return module
