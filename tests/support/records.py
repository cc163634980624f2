"""Hand-built reports, as the render, check and role tests feed them: records
written out by hand, no capture and no JAX (memray's tests do the same)."""

from __future__ import annotations

import dataclasses

from memscope.report import (
    AllocationGroup,
    BufferBreakdown,
    Device,
    Environment,
    FunctionReport,
    HighWater,
    InputBuffer,
    LiveBuffer,
    Memory,
    OutputBuffer,
    Report,
    ResidentGroup,
    RunInfo,
    RunMemory,
    RunPoint,
    Runtime,
    SourceLine,
    TempBuffer,
)

#: the environment of every hand-built report
ENVIRONMENT = Environment(jax="0.10.2", jaxlib="0.10.2", backend="cpu",
                  devices=(Device(0, "cpu", "cpu"),), python="3.11.7")


def mem(peak: int, temp: int = 100, arg: int = 1000, out: int = 1000) -> Memory:
    """Compiled figures: ``peak``, ``temp``, ``arg``ument and ``out``put bytes, no aliasing."""
    return Memory(argument_bytes=arg, output_bytes=out, alias_bytes=0, temp_bytes=temp,
                  generated_code_bytes=0, peak_bytes=peak)


def report(*fns: FunctionReport, env: Environment = ENVIRONMENT, run: RunInfo | None = None) -> Report:
    """A report of ``fns``."""
    return Report(memscope_version="0.1.0", environment=env, run=run, functions=fns)


def sample_report() -> Report:
    """A failed run's report: ``train_step`` (an aliased, an unusable and a pruned
    input) and ``eval_step``, whose compiled program could not be read."""
    step = FunctionReport(
        name="train_step", source="train.py:12", calls=20,
        signature="(float32[1024,1024], float32[1024])",
        memory=Memory(argument_bytes=4198400, output_bytes=4198408, alias_bytes=4194304,
                      temp_bytes=2048, generated_code_bytes=0, peak_bytes=4204552,
                      xla_peak_bytes=4204552),
        inputs=(
            InputBuffer("params['w']", (1024, 1024), "float32", 4194304, True, "aliased",
                        output="result[0]['w']", sharding="cpu:0", parameter=0),
            InputBuffer("x", (1024,), "float32", 4096, True, "unusable", sharding="cpu:0",
                        parameter=1, in_warning=True),
            InputBuffer("step", (), "int32", 4, False, "pruned", sharding="cpu:0"),
        ),
        outputs=(
            OutputBuffer("result[0]['w']", (1024, 1024), "float32", 4194304, "reuses_input",
                         input="params['w']"),
            OutputBuffer("result[1]", (), "float32", 4, "new"),
        ),
        warnings=("Some donated buffers were not usable: float32[1024].\nSee an explanation.",),
        donate_argnums=(0, 1),
    )
    broken = FunctionReport(name="eval_step", source=None, calls=1, signature="()",
                            memory=None, error="could not read the compiled program: boom")
    return Report(
        memscope_version="0.1.0",
        environment=ENVIRONMENT,
        run=RunInfo(program="train.py", argv=("--lr", "3e-4"), outcome="failed", exit_code=3),
        functions=(step, broken))


MiB = 1 << 20


EVIL = "<script>alert(1)</script>"


POINTS = (
    RunPoint(call=1, function="train_step", seconds=0.1, device="cpu:0",
             resident_bytes=1 * MiB, peak_bytes=2 * MiB, exact=True,
             groups=(("train_step result[0] (state)", MiB),)),
    RunPoint(call=2, function="train_step", seconds=0.2, device="cpu:0",
             resident_bytes=1 * MiB, peak_bytes=2 * MiB, exact=False, from_call=1),
    RunPoint(call=3, function="eval_step", seconds=0.3, device="cpu:0",
             resident_bytes=3 * MiB, peak_bytes=4 * MiB, exact=True,
             groups=(("train_step result[0] (state)", 2 * MiB), (EVIL, MiB))),
    RunPoint(call=4, function="train_step", seconds=0.4, device="cpu:0",
             resident_bytes=2 * MiB, peak_bytes=None, exact=True),
)


HIGH = HighWater(
    call=3, function="eval_step", signature="(float32[1024,1024])", line="train.py:88",
    device="cpu:0", bytes=7 * MiB, resident_bytes=3 * MiB, call_peak_bytes=4 * MiB,
    peak_rule="sum", exact=True,
    groups=(ResidentGroup(label="train_step result[0]", kind="output", arrays=52,
                          bytes=2 * MiB, held_by="state", line="train.py:40"),
            ResidentGroup(label=EVIL, kind="outside", arrays=1, bytes=MiB)),
    more_groups=2, more_group_bytes=4096,
    buffers=(LiveBuffer("temporary", 3 * MiB, "f32[768,1024]", "f32", "fusion.3", "fusion",
                        "dot_general", source="train.py:57"),
             LiveBuffer("parameter", MiB, "f32[256,1024]", "f32", "p.0", "parameter",
                        "parameter", argument="params['w']")))


RUN = RunMemory(devices=("cpu:0",), points=POINTS, high_water=HIGH, calls=4, sampled=3,
                how="live arrays sampled before every call (3 of 4 calls)",
                sample_seconds=0.002)


def run_report(run: RunMemory | None = RUN) -> Report:
    """``sample_report()`` with device memory over the run (``RUN`` unless given)."""
    return dataclasses.replace(sample_report(), runtime=Runtime(run_memory=run))


def breakdown(**changes) -> BufferBreakdown:
    """What holds ``train_step``'s memory (3 MiB of temporaries), with ``changes``."""
    b = BufferBreakdown(
        allocations=(AllocationGroup("parameter", 2, 4198400),
                     AllocationGroup("aliased", 1, 4194304),
                     AllocationGroup("temporary", 1, 3145728),
                     AllocationGroup("thread_local", 6, 24)),
        temp_bytes=3145728,
        temp_buffers=(
            TempBuffer("fusion.3", "fusion", "f32[512,1024]", 2097152, "dot_general",
                       "jit(train_step)/dot_general", "train.py:57", 4, 0),
            TempBuffer("tanh.1", "tanh", "f32[256,1024]", 1048576, "tanh",
                       "jit(train_step)/tanh", "train.py:58", 4, 2097152),
            TempBuffer("copy.2", "copy", "f32[256,1024]", 1048576, "copy", None, None, 4, 0)),
        more_buffers=3, more_bytes=12,
        by_source=(SourceLine("train.py:57", 2097152, 1, ("dot_general",)),
                   SourceLine("train.py:58", 1048576, 2, ("tanh", "mul")),
                   SourceLine(None, 1048588, 4, ("copy",))),
        reconciled=True, timeline=None, timeline_note="XLA recorded no trace here")
    return dataclasses.replace(b, **changes)


def breakdown_report(b: BufferBreakdown | None = None) -> Report:
    """``sample_report()`` with ``b`` (else ``breakdown()``) on ``train_step``."""
    report = sample_report()
    step = dataclasses.replace(report.functions[0], buffers=b or breakdown())
    return dataclasses.replace(report, functions=(step, report.functions[1]))
