"""JAX's own deviceless compile of benchmarks/short/scanned_lm.py's step for a
target, timed: what ``memscope run --target`` is held to (bench_target.py).

    python -m benchmarks._direct_compile tpu:v5e:2x2 --layers 4 --width 256

memscope is used only to find the target's compiler (libtpu, JAX's CUDA plugin
from memscope's compilers' folder) and its devices (a GPU model's description);
the compile is JAX's: ``step.trace(...).lower(lowering_platforms=...).compile()``
on arguments placed on the target's first device. Prints one JSON line: the
compile's seconds (trace, lower and compile) and its CPU seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ["JAX_PLATFORMS"] = "cpu"  # as memscope runs the program for a --target

import jax

from benchmarks.models import load_program
from benchmarks.sizes import add_size_options, parse_with_size
from memscope.compiled.targets import gpu, tpu
from memscope.compiled.targets.compilers import load

SHORT = Path(__file__).resolve().parent / "short"


def devices(spec: str) -> tuple[list, str]:
    """The target's compile-only devices, and the platform JAX lowers for."""
    from jax.experimental import topologies

    if spec.startswith("tpu:"):
        load("tpu")
        parsed = tpu.parse_spec(spec)
        return list(tpu._topology(parsed)), "tpu"
    load("cuda")
    model = gpu.parse_spec(spec)
    with gpu._no_cuda_check():
        return list(topologies.get_topology_desc(
            platform="cuda", target_config=gpu.target_config(model.model),
            topology=model.topology).devices), "cuda"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("target")
    add_size_options(parser, "target", ("layers", "width"))
    a, _ = parse_with_size(parser)
    scanned_lm = load_program(SHORT / "scanned_lm.py")

    found, platform = devices(a.target)
    place = jax.sharding.SingleDeviceSharding(found[0])
    args = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=place),
                        scanned_lm.example_arguments(a.layers, a.width))
    start, cpu = time.perf_counter(), sum(os.times()[:4])
    compiled = scanned_lm.step.trace(*args).lower(lowering_platforms=(platform,)).compile()
    print(json.dumps({"compile_s": time.perf_counter() - start,
                      "cpu_s": sum(os.times()[:4]) - cpu,
                      "temp_bytes": compiled.memory_analysis().temp_size_in_bytes}))


if __name__ == "__main__":
    main()
