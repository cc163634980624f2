"""memscope's cache of its variants' compiles across runs (memscope.compiled.cache).

A run again reads its donation variants from the cache instead of compiling
them, and reports exactly what the run that compiled them reported: every
variant's facts (figures, program, buffer assignment, liveness) are equal, and
equal to JAX's own compile of that donation. A change that could change the
compile (the donation, XLA's flags, the program) is a miss; a damaged file is
a miss, replaced; the cache keeps within its limit; ``MEMSCOPE_CACHE=off``
writes nothing. The rest of the suite runs with the cache off (tests/conftest.py).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from memscope import _compat
from memscope.capturing import capture
from memscope.capturing import counts as counts_module
from memscope.compiled.cache import CompileCache, Kept
from memscope.compiled.dump import Built
from memscope.compiled.shardings import describe_sharding
from memscope.compiled.targets.here import HereTarget
from memscope.variants.compile import lower_variant
from tests.support.compiles import (
    FIGURES,
    args,
    count_compiles,
    direct_figures,
    figures,
    step,
    update,
    update_arguments,
    update_direct,
    without_the_assignment,
)
from tests.support.samples import SAMPLES
from tests.support.truth import expected_peak


def sharded_step(params, x):
    """A data-parallel step: its outputs (the new parameters) on every device."""
    def loss(p):
        return jnp.mean(jnp.tanh(x @ p["w"] + p["b"]) ** 2)
    grads = jax.grad(loss)(params)
    return jax.tree.map(lambda a, g: a - 0.1 * g, params, grads)


def sharded_args():
    mesh = jax.make_mesh((8,), ("data",))
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    data = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
    return (jax.device_put({"w": jnp.ones((256, 256)), "b": jnp.zeros(256)}, replicated),
            jax.device_put(jnp.ones((64, 256)), data))


def sharded_direct(donate):
    stats = (jax.jit(sharded_step, donate_argnums=donate).lower(*sharded_args()).compile()
             .memory_analysis())
    return {**{ours: getattr(stats, theirs) for ours, theirs in FIGURES.items()},
            "peak_bytes": expected_peak(stats)}


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("MEMSCOPE_CACHE", raising=False)
    monkeypatch.setenv("MEMSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def cached_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*/*.bin")) if folder.exists() else []


def captured(program, arguments, advise):
    jax.clear_caches()  # a first call, lowered and compiled afresh, as in a new run
    session = None

    def run():
        nonlocal session
        with capture(advise=advise) as session:
            jax.jit(program)(*arguments())

    compiles = count_compiles(run)
    assert session is not None
    return session, compiles


def variants(session):
    (entry,) = session.entries
    return {v.name: v for v in entry.variants}


@pytest.mark.parametrize("program,arguments,advise,direct,donate", [
    (step, args, "full", direct_figures, (0, 1)),
    (update, update_arguments, "advised", update_direct, (0, 1, 2)),
    (sharded_step, sharded_args, "full", sharded_direct, (0,)),
], ids=["every variant", "the advised one, begun early", "sharded over 8 devices"])
def test_a_run_again_reads_its_variants_from_the_cache(cache_dir, monkeypatch, program,
                                                       arguments, advise, direct, donate):
    monkeypatch.setattr(counts_module, "EARLY_FOR_FIRST", 4)
    # Both runs from one call site: the module's source locations (so the key)
    # hold the calling frames, the same in a program run again.
    runs = [captured(program, arguments, advise) for _ in range(2)]
    (first, first_compiles), (again, again_compiles) = runs
    made = first.overhead().variant_compiles
    # (two donations JAX lowers alike, one of them unusable, are one file: the
    # second finds the file the first stored, in the first run as in any)
    looked_up = made + first.overhead().variant_cache_hits
    assert made >= 1 and 1 <= len(cached_files(cache_dir)) <= made
    assert again.overhead().variant_cache_hits == looked_up
    assert again.overhead().variant_compiles == 0
    assert again_compiles == first_compiles - made  # no XLA compile of a variant
    before, after = variants(first), variants(again)
    assert before.keys() == after.keys()
    for name, variant in after.items():
        assert variant.error is None
        # every fact alike: figures, program, buffer assignment, liveness
        assert variant.facts == before[name].facts, name
    # ... and JAX's own compile of the advised donation gives those figures
    got = figures(after["advised"].facts.memory)
    assert {k: got[k] for k in direct(donate)} == direct(donate)
    if program is sharded_step:  # outputs on every device, kept and read back as such
        (entry,) = again.entries
        outputs = after["advised"].facts.program.outputs
        # (replicated: JAX 0.7 spells it P(), later series P(None,) per dimension)
        assert all(o.sharding.endswith(" on data=8") for o in outputs)
        assert outputs == entry.facts.program.outputs


def test_the_key_changes_with_what_the_compile_depends_on(cache_dir, monkeypatch):
    cache = CompileCache(cache_dir)
    leaves = len(jax.tree.leaves(args()))
    alike, other = (False,) * leaves, (True,) * (leaves - 1) + (False,)

    # One trace, lowered at one call site: the module's source locations (so the
    # key) name where the function was traced and where it was lowered, as in a
    # program run again, where both are the same.
    traced = jax.jit(step).trace(*args())
    cases = [(alike, {}), (alike, {}), (other, {}),
             (alike, {"xla_backend_optimization_level": 0}), (alike, {})]
    keys = []
    for i, (donated, options) in enumerate(cases):
        if i == len(cases) - 1:
            monkeypatch.setenv("XLA_FLAGS",
                               f"{os.environ.get('XLA_FLAGS', '')} --xla_dump_to=/nowhere")
        keys.append(cache.key(lower_variant(traced, donated, HereTarget()).lowered,
                              options))
    assert keys[1] == keys[0]
    assert len(set(keys)) == 4  # another donation, other options, other XLA flags


def test_a_damaged_file_is_a_miss_and_is_replaced(cache_dir):
    runs = []
    for i in range(3):  # one call site (see above)
        if i == 1:
            files = cached_files(cache_dir)
            assert files
            for f in files:
                f.write_bytes(f.read_bytes()[:100])
        runs.append(captured(step, args, "full")[0])
    first, again, third = (run.overhead() for run in runs)

    def lookups(o):  # a variant compiled, or read from the cache
        return o.variant_compiles + o.variant_cache_hits

    # The damaged files were misses: compiled again. (A hit of the run's own is
    # allowed: two donations lowered alike share a file, and the second may find
    # it once the first has stored it, as in any run.)
    assert again.variant_compiles >= 1 and lookups(again) == lookups(first)
    for name, variant in variants(runs[1]).items():
        assert variant.facts == variants(runs[0])[name].facts
    # ... and replaced: the third run compiles nothing
    assert (third.variant_compiles, third.variant_cache_hits) == (0, lookups(first))


def test_the_cache_keeps_within_its_limit(cache_dir):
    compiled = jax.jit(lambda x: x * 2).lower(jnp.ones(8)).compile()
    kept = Kept.of(Built(compiled, None, None))
    assert kept is not None
    unlimited = CompileCache(cache_dir)
    keys = [f"{i:02x}" + "0" * 62 for i in range(4)]
    for age, key in zip((300, 200), keys[:2], strict=True):  # two older files
        unlimited.store(key, kept)
        path = cache_dir / key[:2] / f"{key}.bin"
        os.utime(path, (path.stat().st_atime - age, path.stat().st_mtime - age))
    size = (cache_dir / keys[0][:2] / f"{keys[0]}.bin").stat().st_size
    limited = CompileCache(cache_dir, limit=2 * size)
    limited.store(keys[2], kept)
    # the least recently used goes; the newest stays
    assert [p.stem for p in cached_files(cache_dir)] == keys[1:3]
    assert CompileCache(cache_dir).load(keys[2]) == kept
    # the same run's next store, counted rather than scanned, still trims
    os.utime(cache_dir / keys[1][:2] / f"{keys[1]}.bin", (1, 1))
    limited.store(keys[3], kept)
    assert [p.stem for p in cached_files(cache_dir)] == keys[2:]


def test_off_writes_nothing(cache_dir, monkeypatch):
    monkeypatch.setenv("MEMSCOPE_CACHE", "off")
    assert CompileCache.from_environment() is None
    session, _ = captured(step, args, "full")
    assert session.overhead().variant_compiles >= 1
    assert not cache_dir.exists()


def test_memscope_run_again_reports_the_same(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "MEMSCOPE_CACHE"}
    env.update(MEMSCOPE_CACHE_DIR=str(tmp_path / "cache"), PYTHONWARNINGS="ignore")
    reports = []
    for name in ("first.json", "again.json"):
        subprocess.run([sys.executable, "-m", "memscope", "run", "-q", "-o",
                        str(tmp_path / name), str(SAMPLES / "forgot_to_donate.py"),
                        "--steps", "3"], check=True, env=env, capture_output=True)
        reports.append(json.loads((tmp_path / name).read_text()))
    first, again = reports
    made = first["runtime"]["overhead"]["variant_compiles"]
    assert made >= 1
    assert again["runtime"]["overhead"]["variant_cache_hits"] == made
    assert again["runtime"]["overhead"]["variant_compiles"] == 0
    for report in reports:
        del report["runtime"]
        for function in report["functions"]:
            function.pop("compile_seconds", None)
    assert again == first


def test_kept_stands_in_for_the_compiled_program():
    compiled = jax.jit(lambda x: (x * 2, x + 1)).lower(jnp.ones(8)).compile()
    kept = Kept.of(Built(compiled, None, None))
    assert kept is not None
    stats = compiled.memory_analysis()
    got = kept.memory_analysis()
    for name in ("argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes",
                 "temp_size_in_bytes"):
        assert getattr(got, name) == getattr(stats, name)
    outputs = jax.tree.leaves(compiled.output_shardings)
    assert [describe_sharding(s) for s in kept.output_shardings] == [
        describe_sharding(s) for s in outputs] == ["cpu:0", "cpu:0"]
    assert [s.memory_kind for s in kept.output_shardings] == [s.memory_kind for s in outputs]
    assert [s.shard_shape((8,)) for s in kept.output_shardings] == [(8,), (8,)]
    assert kept.cost_analysis()["flops"] == _compat.executables.flops(compiled)


def test_a_cache_that_fails_never_fails_a_variant(cache_dir, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("a lowering this cache cannot key")

    monkeypatch.setattr(_compat.stages, "module_bytecode", broken)
    session, _ = captured(step, args, "full")
    assert all(v.error is None for v in variants(session).values())
    got = figures(variants(session)["advised"].facts.memory)
    assert {k: got[k] for k in direct_figures((0, 1))} == direct_figures((0, 1))
    assert session.overhead().variant_compiles >= 1 and not cached_files(cache_dir)


def test_where_memory_analysis_has_no_assignment_one_dumped_compile_each_is_kept(
        cache_dir, monkeypatch):
    monkeypatch.setenv("MEMSCOPE_CACHE", "off")
    plain, plain_compiles = captured(step, args, "full")
    monkeypatch.delenv("MEMSCOPE_CACHE")
    without_the_assignment(monkeypatch)
    (first, first_compiles), (again, again_compiles) = [
        captured(step, args, "full") for _ in range(2)]
    made = plain.overhead().variant_compiles
    # a variant is compiled once (with the dump), the function once more for its dump
    assert first.overhead().variant_compiles == made >= 1
    assert (first.overhead().dump_compiles, first.overhead().dump_cache_hits) == (1, 0)
    assert first_compiles == plain_compiles + 1
    # ... and a run again compiles neither: the program's own compiles alone
    assert (again.overhead().variant_compiles, again.overhead().dump_compiles,
            again.overhead().dump_cache_hits) == (0, 0, 1)
    assert again_compiles == plain_compiles - made
    # every fact alike, the function's and each variant's, read from the dump or
    # not; the dump's assignment holds XLA's heap-simulator trace besides
    def untraced(facts):
        assert facts.buffers is not None
        return dataclasses.replace(facts, buffers=dataclasses.replace(facts.buffers, traces=()))

    (entry,) = plain.entries
    for run in (first, again):
        (got,) = run.entries
        assert got.facts.buffers.traces and untraced(got.facts) == untraced(entry.facts)
        assert variants(run).keys() == variants(plain).keys()
        for name, variant in variants(run).items():
            assert variant.error is None
            assert untraced(variant.facts) == untraced(variants(plain)[name].facts), name
