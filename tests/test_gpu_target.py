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
from tests.runs_again import run_twice_on_one_cache

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


#: JAX's allocator settings, which set a GPU target's budget (``gpu.budget``): the
#: suite's own (on a GPU, its workers share the device) are not the programs'.
ALLOCATOR_SETTINGS = ("XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION",
                      "XLA_PYTHON_CLIENT_ALLOCATOR")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k != "XLA_FLAGS" and k not in ALLOCATOR_SETTINGS}
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).strip(os.pathsep)
    return env


def _python(code: str, *args: str, cwd: Path | None = None) -> dict:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], cwd=cwd,
                          env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _memscope(*args: str, cwd: Path, cache: Path | None = None
              ) -> subprocess.CompletedProcess[str]:
    """``memscope ARGS`` run in ``cwd``; with memscope's compile cache in
    ``cache`` where given (the suite runs without it: tests/conftest.py)."""
    env = _env()
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


def test_the_budget_follows_jaxs_allocator_settings() -> None:
    h100 = parse_spec("gpu:h100").model
    total = h100.memory_bytes
    assert gpu.budget(h100, {})[0] == int(total * 0.75)
    assert gpu.budget(h100, {"XLA_CLIENT_MEM_FRACTION": "0.5"})[0] == int(total * 0.5)
    assert gpu.budget(h100, {"XLA_PYTHON_CLIENT_MEM_FRACTION": ".9"})[0] == int(total * 0.9)
    assert gpu.budget(h100, {"XLA_PYTHON_CLIENT_ALLOCATOR": "platform"})[0] == total
    assert gpu.budget(h100, {"XLA_CLIENT_MEM_FRACTION": "nonsense"})[0] == int(total * 0.75)


def test_a_compiler_that_cannot_be_installed_is_one_line_naming_the_install(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No CUDA plugin in the environment and none in memscope's folder: memscope
    installs its own; where pip fails (here: a package no index has), one line
    says so and names the command to run."""
    monkeypatch.setattr(gpu, "_plugin", lambda: False)
    monkeypatch.setattr(compilers, "in_environment", lambda kind: False)
    monkeypatch.setattr(_compat, "pjrt_plugin_loaded", lambda kind: False)
    monkeypatch.setenv("MEMSCOPE_COMPILERS_DIR", str(tmp_path))
    monkeypatch.setattr(compilers, "compiler", lambda kind: compilers.Compiler(
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
    assert gpu.budget(h200, {})[0] == pytest.approx(recorded["bytes_limit"], rel=1e-5)


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
