"""``--target gpu:MODEL[:N]``: the captured programs compiled with XLA:GPU (the CUDA
plugin and ptxas) on a machine without a GPU, held to XLA:GPU's own compile.

The ground truth is JAX's documented deviceless compile: ``ShapeDtypeStruct``s
placed on the compile-only devices of the plugin's topology, ``jax.jit(...)
.lower(...).compile().memory_analysis()``; and, where the installed JAX is the
one that compiled on a real H100 (0.10.2, docs/performance.md), that device's
own figures. memscope's path traces the program here, on the CPU, and carries
it over to those devices; both must give XLA:GPU's very figures.

The compiling tests need the CUDA plugin matching the installed JAX and ptxas,
in memscope's own folder (``memscope install-compiler gpu``; CI installs them
for a run of their own) or in the Python environment. Each runs in a subprocess, as JAX must start with the target's devices
(and ``JAX_PLATFORMS=cpu``: the plugin is not to look for a GPU).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from memscope import _compat
from memscope.compiled.targets import compilers, gpu, parse_spec
from memscope.compiled.targets.base import TargetSetupError
from memscope.compiled.targets.gpu_devices import MODELS
from memscope.report.function import MEANINGFUL_SAVING
from tests.support.runs_again import run_twice_on_one_cache

INSTALLED = gpu.available()
needs_cuda = pytest.mark.skipif(
    not INSTALLED, reason=f"XLA:GPU's compiler is not installed ({gpu.cuda_install_line()})")

#: train_step of sample_programs/transformer_adam.py (8 layers, width 128,
#: batch 8, seq 64) compiled on a real H100 80GB HBM3 by jax and jaxlib 0.10.2
#: with jax-cuda13-plugin 0.10.2 (docs/performance.md): argument, output,
#: alias, temp, XLA's peak.
H100_TRANSFORMER_0_10_2 = (20_718_596, 20_717_736, 0, 40_343_832, 81_743_028)
FIGURES = ("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes", "xla_peak_bytes")
ROOT = Path(__file__).resolve().parent.parent


#: JAX's allocator settings, which set a GPU target's room (``gpu.room``), and the
#: rest of what jaxlib reads beside them for the CUDA plugin: the suite's own (on
#: a GPU, its workers share the device) are not the programs'.
ALLOCATOR_SETTINGS = ("XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION",
                      "XLA_PYTHON_CLIENT_ALLOCATOR", "XLA_PYTHON_CLIENT_PREALLOCATE",
                      "XLA_PYTHON_CLIENT_COLLECTIVE_MEM_SIZE_MB",
                      "XLA_PYTHON_CLIENT_ABORT_COLLECTIVES_ON_FAILURE",
                      "XLA_PYTHON_CLIENT_USE_TFRT_GPU_CLIENT")


def _env(settings: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k != "XLA_FLAGS" and k not in ALLOCATOR_SETTINGS}
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).strip(os.pathsep)
    return {**env, **(settings or {})}


def _python(code: str, *args: str, cwd: Path | None = None,
            settings: dict[str, str] | None = None) -> dict:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], cwd=cwd,
                          env=_env(settings), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _memscope(*args: str, cwd: Path, cache: Path | None = None,
              settings: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``memscope ARGS`` run in ``cwd``, with JAX's allocator ``settings``; with
    memscope's compile cache in ``cache`` where given (the suite runs without
    it: tests/conftest.py)."""
    env = _env(settings)
    if cache is not None:
        env.pop("MEMSCOPE_CACHE", None)
        env["MEMSCOPE_CACHE_DIR"] = str(cache)
    return subprocess.run([sys.executable, "-m", "memscope", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=900)


def _figures(memory: dict) -> tuple[int, ...]:
    return tuple(memory[k] for k in FIGURES)


# --- without a compiler ----------------------------------------------------------------


@pytest.mark.parametrize("text", ["gpu:h900", "gpu:h100:0", "gpu:", "gpu:h100:x", "cpu:1"])
def test_unknown_targets_name_the_forms_and_models(text: str) -> None:
    with pytest.raises(TargetSetupError) as raised:
        parse_spec(text)
    message = str(raised.value)
    assert "\n" not in message
    if text == "gpu:h100:0":
        assert "at least one device" in message
    elif text.startswith("gpu"):
        assert all(m.name in message for m in MODELS)
    else:
        assert "gpu:MODEL[:N]" in message and "tpu:GENERATION:TOPOLOGY" in message


def test_targets_are_parsed_to_their_topology() -> None:
    one, eight, hosts = (parse_spec(t) for t in ("gpu:h100", "gpu:A100-80GB:8", "gpu:b200:2x8"))
    assert (one.name, one.topology, one.devices) == ("gpu:h100:1", "1x1x1", 1)
    assert (eight.model.name, eight.topology) == ("a100-80gb", "1x1x8")
    assert (hosts.name, hosts.topology, hosts.devices) == ("gpu:b200:2x8", "1x2x8", 16)
    assert parse_spec("gpu:a100").model.name == "a100-80gb"  # an alias


#: Environments of JAX's allocator settings: defaults, each name, both names,
#: what ``float()`` takes and refuses, XLA's growable-pool spelling (no float),
#: each allocator (the installed jaxlib's list decides), preallocation's spellings.
ALLOCATOR_ENVIRONMENTS: list[dict[str, str]] = [
    {}, {"XLA_CLIENT_MEM_FRACTION": "0.9"}, {"XLA_PYTHON_CLIENT_MEM_FRACTION": ".5"},
    {"XLA_CLIENT_MEM_FRACTION": "0.9", "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.5"},
    {"XLA_CLIENT_MEM_FRACTION": "", "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.6"},
    {"XLA_CLIENT_MEM_FRACTION": " 1e-1 "}, {"XLA_CLIENT_MEM_FRACTION": "nonsense"},
    {"XLA_CLIENT_MEM_FRACTION": "0.75+"}, {"XLA_CLIENT_MEM_FRACTION": "90%"},
    {"XLA_CLIENT_MEM_FRACTION": "1.5"},
    *({"XLA_PYTHON_CLIENT_ALLOCATOR": name}
      for name in ("platform", "PLATFORM", "bfc", "cuda_async", "vmm", "address", "bogus")),
    *({"XLA_PYTHON_CLIENT_PREALLOCATE": value}
      for value in ("false", "False", "0", "FALSE", "no", "true")),
]


@pytest.mark.parametrize("settings", ALLOCATOR_ENVIRONMENTS, ids=lambda e: " ".join(
    f"{k}={v!r}" for k, v in e.items()) or "unset")
def test_the_allocator_settings_are_read_as_the_installed_jaxlib_reads_them(
        settings: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """memscope's reading of JAX's allocator settings is the installed jaxlib's own
    (``generate_pjrt_gpu_plugin_options``, what the CUDA plugin is given): the same
    options, and a refusal exactly where jaxlib raises, on whichever JAX series
    the suite runs."""
    from jaxlib import xla_client

    for name in ALLOCATOR_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    for name, value in settings.items():
        monkeypatch.setenv(name, value)
    try:
        options = xla_client.generate_pjrt_gpu_plugin_options()
    except ValueError:
        with pytest.raises(gpu.AllocatorSettingError) as raised:
            gpu.allocator_settings(os.environ)
        assert "\n" not in str(raised.value)
        return
    ours = gpu.allocator_settings(os.environ)
    assert (ours.allocator, ours.memory_fraction, ours.preallocate) == (
        options["allocator"], options.get("memory_fraction"), options.get("preallocate"))


@pytest.mark.parametrize("text", ["0", "-0.5", "nan", "inf"])
def test_a_fraction_that_leaves_no_memory_is_refused_where_jaxlib_passes_it_on(
        text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """jaxlib hands any float on to the plugin; XLA's allocator takes ``total *
    fraction``, which is no memory (or no number) for these: one line instead."""
    from jaxlib import xla_client

    for name in ALLOCATOR_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XLA_CLIENT_MEM_FRACTION", text)
    given = xla_client.generate_pjrt_gpu_plugin_options()["memory_fraction"]
    assert str(given) == str(float(text))
    with pytest.raises(gpu.AllocatorSettingError, match=f"XLA_CLIENT_MEM_FRACTION={text} "
                       "leaves a program no memory"):
        gpu.allocator_settings(os.environ)


def _float32(value: float) -> float:
    """``value`` as the plugin's 32-bit float option carries it."""
    import numpy as np

    return float(np.float32(value))


def test_the_room_is_the_fraction_of_the_devices_memory_with_its_rule() -> None:
    """What a program may hold, and the rule said: XLA's allocator takes ``total *
    memory_fraction`` (75% unless set: XLA's ``GpuAllocatorConfig``, JAX's
    docs/gpu_memory_allocation.rst), the fraction as the plugin's 32-bit float
    option carries it; the platform allocator allocates as asked."""
    h100 = parse_spec("gpu:h100").model
    total = h100.memory_bytes
    series = ".".join(_compat.JAX_VERSION.split(".")[:2])

    def room(**settings: str) -> gpu.Room:
        return gpu.room_here(h100, settings)

    assert room() == gpu.Room(int(total * 0.75), f"75% of 79.1 GiB, JAX {series}'s default; "
                              "XLA_CLIENT_MEM_FRACTION sets another", int(total * 0.75))
    assert room(XLA_CLIENT_MEM_FRACTION="0.9") == gpu.Room(
        int(total * _float32(0.9)), "90% of 79.1 GiB, as XLA_CLIENT_MEM_FRACTION=0.9 sets",
        int(total * _float32(0.9)))
    assert int(total * _float32(0.9)) != int(total * 0.9)  # (the float's 32 bits matter)
    assert room(XLA_PYTHON_CLIENT_MEM_FRACTION=".5").rule == (
        "50% of 79.1 GiB, as XLA_PYTHON_CLIENT_MEM_FRACTION=.5 sets")
    assert room(XLA_PYTHON_CLIENT_ALLOCATOR="platform") == gpu.Room(
        total, "all of its 79.1 GiB: XLA_PYTHON_CLIENT_ALLOCATOR=platform allocates as the "
        "program asks", None)
    assert room(XLA_PYTHON_CLIENT_PREALLOCATE="false").rule.endswith(
        "sets another, taken as needed (XLA_PYTHON_CLIENT_PREALLOCATE=false)")
    over = room(XLA_CLIENT_MEM_FRACTION="1.5")
    assert (over.bytes, over.device_memory_size) == (total, int(total * 1.5))
    assert over.rule == ("150% of 79.1 GiB, as XLA_CLIENT_MEM_FRACTION=1.5 sets: more than "
                         "the device has, so at most all of it")
    if "cuda_async" in _compat.GPU_ALLOCATORS:
        assert room(XLA_PYTHON_CLIENT_ALLOCATOR="cuda_async").rule.endswith(
            "sets another (XLA_PYTHON_CLIENT_ALLOCATOR=cuda_async)")
    if "address" in _compat.GPU_ALLOCATORS:
        assert room(XLA_PYTHON_CLIENT_ALLOCATOR="address").bytes is None


def test_a_compiler_that_cannot_be_installed_is_one_line_naming_the_install(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No CUDA plugin in the environment and none in memscope's folder: memscope
    installs its own; where pip fails (here: a package no index has), one line
    says so and names the command to run."""
    monkeypatch.setattr(gpu, "_plugin", lambda: False)
    monkeypatch.setattr(compilers, "in_environment", lambda kind: False)
    monkeypatch.setattr(_compat.targets, "pjrt_plugin_loaded", lambda kind: False)
    monkeypatch.setenv("MEMSCOPE_COMPILERS_DIR", str(tmp_path))
    monkeypatch.setattr(compilers, "kept_compiler", lambda kind: compilers.Compiler(
        "cuda", ("memscope-no-such-package==0.0.1",), tmp_path / "c",
        tmp_path / "c" / "xla_cuda_plugin.so", True))
    with pytest.raises(TargetSetupError) as raised:
        gpu.make_target(parse_spec("gpu:h100:8"))
    (line,) = str(raised.value).splitlines()
    assert line.startswith("memscope could not install XLA:GPU's compiler (JAX's CUDA plugin, "
                           "with ptxas) (")
    assert (f'--target {tmp_path / "c"} --no-deps "memscope-no-such-package==0.0.1"'
            f' && touch {tmp_path / "c" / ".memscope-complete"}') in line
    assert not (tmp_path / "c").exists() and not list(tmp_path.glob(".c-*"))  # nothing half made


def test_a_missing_compiler_is_one_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "p.py").write_text("import jax\nprint(jax.jit(lambda x: x)(1))\n")
    env = _env()
    env["PATH"] = ""  # (no ptxas on it)
    done = subprocess.run([sys.executable, "-m", "memscope", "run", "--target", "gpu:h900",
                           "p.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "unknown target 'gpu:h900'" in done.stderr


def _text_fields(text: str) -> dict[str, str]:
    """The description's fields, as benchmarks/gpu_deviceless.py read the device's."""
    spec = importlib.util.spec_from_file_location(
        "gpu_deviceless", ROOT / "benchmarks" / "gpu_deviceless.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.text_fields(text)


def test_the_h200_description_is_the_devices_own() -> None:
    """Every field memscope gives XLA:GPU for ``gpu:h200`` is what a real H200
    gave XLA:GPU (its target config, dumped beside a compile on the device;
    tests/data/gpu/h200_jax0.11.2.json), but the cuDNN version a compile
    assumes and a compute capability's minor 0, which the device leaves unset."""
    recorded = json.loads((ROOT / "tests" / "data" / "gpu" / "h200_jax0.11.2.json").read_text())
    differences = recorded["description_differences"]
    h200 = gpu.parse_spec("gpu:h200").model
    assert h200.device_kind == recorded["device_kind"] == "NVIDIA H200"
    for key, value in _text_fields(gpu.target_config(h200)).items():
        if key not in differences:  # the same on the device when recorded
            continue
        device = differences[key]["device"]
        if device is None:
            assert (key, value) in {("dnn_version_info.major", "9"),
                                    ("dnn_version_info.minor", "10"),
                                    ("gpu_device_info.cuda_compute_capability.minor", "0")}
        else:
            assert value == device, key
    # JAX's allocator took 75% of the memory the device reports, to 0.001%
    assert gpu.room_here(h200, {}).bytes == pytest.approx(recorded["bytes_limit"], rel=1e-5)


# --- with XLA:GPU's compiler -----------------------------------------------------------


@needs_cuda
def test_every_model_is_parsed_by_the_installed_plugin() -> None:
    """Each description, rendered for the plugin, makes devices of its model."""
    made = _python("""
        import json
        from memscope.compiled.targets import gpu
        from memscope.compiled.targets.gpu_devices import MODELS
        kinds = {}
        for m in MODELS:
            t = gpu.make_target(gpu.parse_spec(f"gpu:{m.name}:2"))
            kinds[m.name] = [d.device_kind for d in t.devices.values()]
        print(json.dumps(kinds))
    """)
    assert made == {m.name: [m.device_kind] * 2 for m in MODELS}


DIRECT_TRANSFORMER = """
import importlib.util, json, sys
import jax
from memscope.compiled.targets import gpu
spec = importlib.util.spec_from_file_location("ta", sys.argv[1])
ta = importlib.util.module_from_spec(spec); spec.loader.exec_module(ta)
params = ta.init_params(jax.random.key(0), 8, 128, 64)
state = (params, ta.optimizer.init(params), ta.make_batch(jax.random.key(0), 8, 64))
device = next(iter(gpu.make_target(gpu.parse_spec("gpu:h100")).devices.values()))
place = jax.sharding.SingleDeviceSharding(device)
abstract = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=place), state)
m = ta.train_step.lower(*abstract).compile().memory_analysis()
print(json.dumps([m.argument_size_in_bytes, m.output_size_in_bytes, m.alias_size_in_bytes,
                  m.temp_size_in_bytes, m.peak_memory_in_bytes]))
"""


@needs_cuda
def test_the_transformer_on_an_h100_is_xla_gpus_own_compile(tmp_path: Path) -> None:
    """``run --target gpu:h100``: train_step's figures are XLA:GPU's deviceless
    compile of it, and, on the JAX that compiled it on a real H100, the H100's."""
    sample = ROOT / "sample_programs" / "transformer_adam.py"
    started = time.perf_counter()
    done = _memscope("run", "--target", "gpu:h100", "-o", "r.json", str(sample), "--steps", "1",
                     cwd=tmp_path)
    wall = time.perf_counter() - started
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "r.json").read_text())
    target = report["target"]
    assert (target["name"], target["kind"], target["chip"]) == (
        "gpu:h100:1", "gpu", "NVIDIA H100 80GB HBM3")
    assert target["budget_bytes"] == int(target["hbm_bytes"] * 0.75)
    assert "h100_sxm.txtpb" in target["description_source"]
    overhead = report["runtime"]["overhead"]
    assert overhead["target_compiles"] >= 1 + overhead["variant_compiles"]
    # Each compile's own seconds, summed: the call's own and its advised variant's
    # run side by side (begun at the call), each within the run.
    assert 0 < overhead["target_compile_seconds"] <= overhead["target_compiles"] * wall
    (step,) = [f for f in report["functions"] if f["name"] == "train_step"]
    ours = _figures(step["memory"])
    assert ours == tuple(_python(DIRECT_TRANSFORMER, str(sample)))
    assert step["memory_here"]["temp_bytes"] != step["memory"]["temp_bytes"]  # the CPU's
    versions = _python("""
        import json, jax
        from memscope.compiled.targets import compilers
        print(json.dumps([jax.__version__, compilers.version("cuda")]))
    """)
    if versions == ["0.10.2", "0.10.2"]:
        assert ours == H100_TRANSFORMER_0_10_2
    assert "compiled for gpu:h100:1 (1 x NVIDIA H100 80GB HBM3" in " ".join(done.stdout.split())


DATA_PARALLEL = """
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

def step(w, x):
    loss, g = jax.value_and_grad(lambda w: jnp.mean(jnp.tanh(x @ w) ** 2))(w)
    return w - 0.1 * g, loss

if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("data",))
    w = jax.device_put(jnp.ones((512, 512)), NamedSharding(mesh, P()))
    x = jax.device_put(jnp.ones((1024, 512)), NamedSharding(mesh, P("data")))
    train = jax.jit(step, donate_argnums=0)
    for _ in range(2):
        w, loss = train(w, x)
    print(len(jax.devices()), float(loss))
"""

DIRECT_DATA_PARALLEL = """
import json, sys
import jax, jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P
sys.path.insert(0, sys.argv[1])
from dp import step
from memscope.compiled.targets import gpu
mesh = gpu.make_target(gpu.parse_spec("gpu:h100:8")).mesh((8,), ("data",))
w = jax.ShapeDtypeStruct((512, 512), jnp.float32, sharding=NamedSharding(mesh, P()))
x = jax.ShapeDtypeStruct((1024, 512), jnp.float32, sharding=NamedSharding(mesh, P("data")))
m = jax.jit(step, donate_argnums=0).lower(w, x).compile().memory_analysis()
print(json.dumps([m.argument_size_in_bytes, m.output_size_in_bytes, m.alias_size_in_bytes,
                  m.temp_size_in_bytes, m.peak_memory_in_bytes]))
"""


@needs_cuda
def test_eight_gpus_compile_the_sharded_step_as_xla_gpu_does(tmp_path: Path) -> None:
    """``--target gpu:h100:8`` on a data-parallel step whose mesh the program builds
    from ``jax.devices()``: the program runs on 8 CPU devices, and its step's
    figures per device are XLA:GPU's own deviceless compile for 8 H100s."""
    (tmp_path / "dp.py").write_text(DATA_PARALLEL)
    done = _memscope("run", "--target", "gpu:h100:8", "-o", "r.json", "dp.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("8 ")
    (step,) = json.loads((tmp_path / "r.json").read_text())["functions"]
    assert _figures(step["memory"]) == tuple(_python(DIRECT_DATA_PARALLEL, str(tmp_path)))
    assert step["memory"]["alias_bytes"] > 0  # the donated weights, aliased on the GPU too


@needs_cuda
def test_run_again_reads_the_targets_compiles_from_the_cache(tmp_path: Path) -> None:
    """The target's compiles of the sharded step (the function's, its variants',
    the policies') are kept in memscope's compile cache: a run again compiles
    nothing for the target, and reports the same figures."""
    (tmp_path / "dp.py").write_text(DATA_PARALLEL)
    (step,) = run_twice_on_one_cache(lambda name: _memscope(
        "run", "--target", "gpu:h100:8", "-o", name, "dp.py", cwd=tmp_path,
        cache=tmp_path / "cache"), tmp_path)
    assert step["memory"]["alias_bytes"] > 0


ABSTRACT_MODEL = """
import json, resource
import jax, jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P
import memscope

target = memscope.target("gpu:h100:8")
mesh = target.mesh((8,), ("fsdp",))
# What JAX, the plugin and XLA:GPU's first compile load is not the analysis's
# (with CUDA's libraries where a GPU is, 1.6 GB resident on an H200): the
# baseline follows a compile of 32 bytes.
tiny = jax.ShapeDtypeStruct((8,), jnp.float32, sharding=NamedSharding(mesh, P()))
jax.jit(lambda v: v * 2).lower(tiny).compile()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

def step(params, x):
    def loss(p):
        h = x
        for w in p:
            h = jnp.tanh(h @ w)
        return jnp.mean(h ** 2)
    value, grads = jax.value_and_grad(loss)(params)
    return [w - 0.1 * g for w, g in zip(params, grads)], value

shard = NamedSharding(mesh, P("fsdp", None))
params = [jax.ShapeDtypeStruct((8192, 8192), jnp.bfloat16, sharding=shard) for _ in range(8)]
x = jax.ShapeDtypeStruct((1024, 8192), jnp.bfloat16, sharding=shard)
fn = memscope.analyze(jax.jit(step), params, x, target=target)
m = jax.jit(step).lower(params, x).compile().memory_analysis()
print(json.dumps({
    "ours": [fn.memory.argument_bytes, fn.memory.output_bytes, fn.memory.alias_bytes,
             fn.memory.temp_bytes, fn.memory.xla_peak_bytes],
    "direct": [m.argument_size_in_bytes, m.output_size_in_bytes, m.alias_size_in_bytes,
               m.temp_size_in_bytes, m.peak_memory_in_bytes],
    "advice": None if fn.advice is None else [fn.advice.setting, fn.advice.peak_before,
                                              fn.advice.peak_after],
    "not_observed": fn.not_observed, "calls": fn.calls, "live": len(jax.live_arrays()),
    "rss_growth": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before,
    "budget": target.budget_bytes}))
"""


@needs_cuda
def test_analyze_compiles_a_model_too_big_for_this_machine_without_allocating_it() -> None:
    """``memscope.analyze`` on ``ShapeDtypeStruct``s sharded over 8 H100s (FSDP): 1 GiB
    of weights in bfloat16, which nothing allocates; the figures are XLA:GPU's own
    compile, and the advice is measured by compiling the donation."""
    got = _python(ABSTRACT_MODEL)
    assert got["ours"] == got["direct"]
    assert got["ours"][0] == 8 * 8192 * 8192 * 2 // 8 + 1024 * 8192 * 2 // 8  # per device
    setting, before, after = got["advice"]
    assert setting == 'donate_argnames=("params",)' and after < before
    assert got["calls"] == 0 and "compile-only" in got["not_observed"]
    assert got["live"] == 0
    # the model's 1 GiB never existed here: the process's high-water mark grew by
    # less than half of it (the compiles' own memory) from where JAX, the CUDA
    # plugin and the libraries of a first compile had left it
    assert got["rss_growth"] < 1 << 29, got["rss_growth"]
    assert got["budget"] == int(parse_spec("gpu:h100").model.memory_bytes * 0.75)


def _readme_analyze_example() -> str:
    """The README's compile-only ``analyze`` example, as written."""
    text = (Path(__file__).parents[1] / "README.md").read_text()
    after = text[text.index("**Will the model fit on 8 H100s"):]
    start = after.index("```python\n") + len("```python\n")
    return after[start:after.index("\n```", start) + 1]


README_TRUTH = """
import json
from memscope.report import peak_rule
def direct(**options):
    m = jax.jit(step, **options).lower(params, x).compile().memory_analysis()
    return peak_rule(m.argument_size_in_bytes, m.output_size_in_bytes, m.alias_size_in_bytes,
                     m.temp_size_in_bytes, m.peak_memory_in_bytes)[0]
print(json.dumps([direct(), direct(donate_argnames=("params",))]))
"""


@needs_cuda
def test_the_readmes_analyze_example_prints_what_xla_measured(tmp_path: Path) -> None:
    """The README's example, run as written: its peak is XLA:GPU's own compile's,
    and it prints the donation to write only where XLA:GPU's compile of it has
    the lower peak; otherwise what that compile measured."""
    script = tmp_path / "readme_analyze.py"
    script.write_text(_readme_analyze_example() + README_TRUTH)
    done = subprocess.run([sys.executable, str(script)], env=_env(), capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    figures, advice, truth = done.stdout.splitlines()[-3:]
    peak, budget = map(int, figures.split())
    as_written, donated = json.loads(truth)
    assert peak == as_written and budget == int(parse_spec("gpu:h100").model.memory_bytes
                                                * 0.75)
    if as_written - donated >= MEANINGFUL_SAVING * as_written:
        assert advice == 'donate_argnames=("params",)'
    else:
        assert advice.startswith('compiled with donate_argnames=("params",), the peak')


DIRECT_PLAN = """
import importlib.util, json, sys
import jax, jax.numpy as jnp
from memscope.compiled.targets import gpu
from memscope.report import peak_rule
spec = importlib.util.spec_from_file_location("mlp", sys.argv[1])
mlp = importlib.util.module_from_spec(spec); spec.loader.exec_module(mlp)
plan = json.loads(open(sys.argv[2]).read())
device = next(iter(gpu.make_target(gpu.parse_spec("gpu:h100")).devices.values()))
place = jax.sharding.SingleDeviceSharding(device)
params = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=place),
                      jax.eval_shape(mlp.init, jax.random.key(0)))
policies = jax.checkpoint_policies
POLICY = {"save_only_these_names": policies.save_only_these_names("hidden"),
          "offload_dot_with_no_batch_dims": policies.offload_dot_with_no_batch_dims(
              "device", "pinned_host"),
          "save_and_offload_only_these_names": policies.save_and_offload_only_these_names(
              names_which_can_be_saved=[], names_which_can_be_offloaded=["hidden"],
              offload_src="device", offload_dst="pinned_host")}

def peak(row, batch):
    name = row["setting"].removesuffix(" + advised donation")
    loss = mlp.loss_fn if row["kind"] in ("written", "donation") else jax.checkpoint(
        mlp.loss_fn, policy=POLICY.get(name) or getattr(policies, name))
    def step(params, x):
        value, grads = jax.value_and_grad(loss)(params, x)
        return [p - 0.1 * g for p, g in zip(params, grads)], value
    donate = ("params",) if row["kind"] in ("donation", "combined") else ()
    x = jax.ShapeDtypeStruct((batch, mlp.WIDTH), jnp.float32, sharding=place)
    lowered = jax.jit(step, donate_argnames=donate).lower(params, x)
    try:  # XLA:GPU's own compile; where its Triton GEMM tiling fails, with cuBLAS's
        m = lowered.compile(compiler_options={}).memory_analysis()
    except Exception as e:
        if gpu.NO_TILING not in str(e):
            raise
        m = lowered.compile(compiler_options=dict(gpu.NO_TRITON_GEMM)).memory_analysis()
    return peak_rule(m.argument_size_in_bytes, m.output_size_in_bytes, m.alias_size_in_bytes,
                     m.temp_size_in_bytes, m.peak_memory_in_bytes)[0]

print(json.dumps([[r["setting"], peak(r, r["largest"]), peak(r, r["largest"] + plan["step"])]
                  for r in plan["rows"] if r["largest"] is not None]))
"""


@needs_cuda
def test_fit_plan_for_a_gpu_model_holds_by_xla_gpus_own_compiles(tmp_path: Path) -> None:
    """``fit --plan --target gpu:h100``: each row's batch fits the budget by XLA:GPU's
    own compile of the step written with its setting, and one step more does not;
    the winner has the largest batch; the FLOPs rule is said."""
    program = ROOT / "tests" / "programs" / "plan_mlp.py"
    done = _memscope("fit", "--plan", "--target", "gpu:h100", "--memory", "4MiB", "--format",
                     "json", str(program), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    plan = json.loads(done.stdout)
    (tmp_path / "plan.json").write_text(done.stdout)
    assert plan["target"] == "gpu:h100:1" and "deviceless" in plan["flops_rule"]
    rows = [r for r in plan["rows"] if r["largest"] is not None]
    assert rows and plan["rows"][0]["largest"] == max(r["largest"] for r in rows)
    direct = {name: (fits, over) for name, fits, over in
              _python(DIRECT_PLAN, str(program), str(tmp_path / "plan.json"))}
    for r in rows:
        assert direct[r["setting"]] == (r["peak_bytes"], r["over_bytes"]), r["setting"]
        assert r["peak_bytes"] <= plan["budget_bytes"] < r["over_bytes"], r["setting"]


REMAT_MLP = """
import dataclasses, json, sys
import jax, jax.numpy as jnp
import memscope
from memscope.compiled.targets import gpu
from memscope.report import peak_rule

W, B, L = 1024, 4096, 8

def loss(ws, x):
    h = x
    for w in ws:
        h = jnp.tanh(h @ w)
    return jnp.mean(h ** 2)

def step(ws, x):
    value, grads = jax.value_and_grad(loss)(ws, x)
    return [w - 0.1 * g for w, g in zip(ws, grads)], value

def arguments(device):
    place = jax.sharding.SingleDeviceSharding(device)
    return ([jax.ShapeDtypeStruct((W, W), jnp.float32, sharding=place) for _ in range(L)],
            jax.ShapeDtypeStruct((B, W), jnp.float32, sharding=place))

def direct(device, **options):
    m = jax.jit(step, donate_argnums=0).lower(*arguments(device)).compile(
        compiler_options=options).memory_analysis()
    return peak_rule(m.argument_size_in_bytes, m.output_size_in_bytes, m.alias_size_in_bytes,
                     m.temp_size_in_bytes, m.peak_memory_in_bytes)[0]

target = memscope.target("gpu:h100")
h100 = next(iter(target.devices.values()))
fn = memscope.analyze(jax.jit(step, donate_argnums=0), *arguments(h100), target=target,
                      advise=False)
# XLA's own rule, with no limit given to the compile: 80% of the description's memory.
room = target.room.device_memory_size
model = dataclasses.replace(target.spec.model, memory_bytes=(room * 100 + 79) // 80)
assert model.memory_bytes * 80 // 100 == room
described = next(iter(gpu.make_target(dataclasses.replace(target.spec, model=model))
                      .devices.values()))
limit = fn.memory_limit
print(json.dumps({
    "ours": fn.memory.peak_bytes, "room": room,
    "limit": None if limit is None else [limit.limit_bytes, limit.peak_bytes,
                                         limit.unlimited_peak_bytes],
    "as_described": direct(described), "unlimited": direct(h100),
    "no_remat": direct(h100, xla_disable_hlo_passes="rematerialization")}))
"""


@needs_cuda
@pytest.mark.parametrize("fraction", ["0.0025", "0.9"])
def test_the_targets_compile_takes_the_rooms_limit_as_xla_gpu_does(fraction: str) -> None:
    """The room's limit is the device memory XLA:GPU compiles for, as on the device:
    a step whose peak crosses it (an MLP's backward pass in 0.25% of an H100) is
    rematerialized to XLA's own figures for a device whose memory x 80% (XLA's
    rule where a compile is given no limit) is the room, and its peak without the
    rematerialization is XLA's own compile without it; far below the limit (90%)
    the step is XLA's unlimited compile, and not compiled again."""
    got = _python(REMAT_MLP, settings={"XLA_CLIENT_MEM_FRACTION": fraction})
    total = parse_spec("gpu:h100").model.memory_bytes
    assert got["room"] == int(total * _float32(float(fraction)))
    assert got["ours"] == got["as_described"]
    assert got["unlimited"] == got["no_remat"]
    if fraction == "0.9":
        assert got["ours"] == got["unlimited"] and got["limit"] is None
    else:
        assert got["ours"] < got["unlimited"]  # XLA:GPU rematerialized it to fit
        assert got["limit"] == [got["room"], got["ours"], got["unlimited"]]


SUM_STEP = """import jax
import jax.numpy as jnp

WIDTH = 1024


@jax.jit
def step(w, x):
    return w * 0.9 + jnp.mean(x, axis=0), jnp.sum(x * x)


if __name__ == "__main__":
    w = jnp.ones((WIDTH,))
    for i in range(2):
        w = step(w, jnp.full((256, WIDTH), float(i)))[0]
"""


@needs_cuda
@pytest.mark.parametrize("settings", [{}, {"XLA_CLIENT_MEM_FRACTION": "0.9"}],
                         ids=["default", "fraction 0.9"])
def test_fit_without_memory_searches_the_room_and_says_its_rule(
        settings: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``fit --target gpu:h100`` with no ``--memory``: the budget is the room JAX's
    allocator gives a program under these settings (the fraction the installed
    jaxlib hands the plugin, 75% where none: XLA's default, JAX's docs, of the
    device's memory, as the plugin's 32-bit float), said with its rule; each size
    compiled fits exactly where its peak is within it."""
    from jaxlib import xla_client

    from memscope.report.units import format_bytes

    for name in ALLOCATOR_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    for name, value in settings.items():
        monkeypatch.setenv(name, value)
    fraction = xla_client.generate_pjrt_gpu_plugin_options().get("memory_fraction", 0.75)
    total = parse_spec("gpu:h100").model.memory_bytes
    room = int(total * _float32(fraction))
    series = ".".join(_compat.JAX_VERSION.split(".")[:2])
    rule = (f"75% of 79.1 GiB, JAX {series}'s default; XLA_CLIENT_MEM_FRACTION sets another"
            if not settings else "90% of 79.1 GiB, as XLA_CLIENT_MEM_FRACTION=0.9 sets")
    (tmp_path / "sum_step.py").write_text(SUM_STEP)
    done = _memscope("fit", "--target", "gpu:h100", "sum_step.py", cwd=tmp_path,
                     settings=settings)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "memscope fit: step (sum_step.py:8)"
    answer = re.fullmatch(
        re.escape(f"Largest batch that fits {format_bytes(room)} (the room on gpu:h100:1: "
                  f"{rule}): ") + r"(\d+) \(compiled: \1 -> .+, (\d+) -> .+; budget .+\)",
        lines[1])
    assert answer is not None, lines[1]
    assert lines[2] == ("batch axis: x, axis 0 (inferred: the leading axis of the arguments "
                        "that are not state; state, returned by the step: w); now 256, step 1")
    assert re.fullmatch(r"peak = .+ fixed \+ 4\.0 KiB per example \(within 1% at every "
                        r"size compiled\)", lines[3]), lines[3]
    assert lines[4] == "" and lines[5] == "     batch          peak  fits"
    rows = [re.fullmatch(r"\s+(\d+)\s+([\d,]+) B\s+(yes|no)", line) for line in lines[6:-2]]
    assert rows and all(rows), lines[6:-2]
    fits = {int(r[1]): (int(r[2].replace(",", "")), r[3] == "yes") for r in rows if r}
    assert all(ok == (peak <= room) for peak, ok in fits.values())
    assert fits[int(answer[1])][1] and not fits[int(answer[2])][1]
    assert lines[-2] == "" and re.match(r"\d+ compiles in ", lines[-1])
