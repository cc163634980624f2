"""XLA's out-of-memory texts, as users met them, parse into figures (memscope.analysis.oom).

Each fixture is an error message quoted from a public issue (the address above
it); the figures asserted are the ones written in that text.
"""

from __future__ import annotations

from memscope.analysis.oom import (
    human_bytes,
    is_out_of_memory,
    parse,
    resolve_rounded,
    size_bytes,
)

# jax-ml/jax#13428 (XLA:GPU buffer assignment, with its "Peak buffers" list)
GPU_BUFFER_ASSIGNMENT = """\
jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 6291456 bytes.
BufferAssignment OOM Debugging.
BufferAssignment stats:
             parameter allocation:    6.00MiB
              constant allocation:         0B
        maybe_live_out allocation:    6.00MiB
     preallocated temp allocation:         0B
                 total allocation:   12.00MiB
              total fragmentation:         0B (0.00%)
Peak buffers:
        Buffer 1:
                Size: 6.00MiB
                Operator: op_name="jit(concatenate)/jit(main)/concatenate[dimension=0]" source_file="/media/gccrcv/Data/Opensources/multinerf/internal/models.py" source_line=689
                XLA Label: concatenate
                Shape: f32[4096,128,3]
                ==========================

        Buffer 2:
                Size: 384.0KiB
                Entry Parameter Subshape: f32[256,128,3]
                ==========================
"""

# google-deepmind/jax_privacy#10 (the GPU client's allocator)
GPU_FAILED_REQUEST = ("Original error: RESOURCE_EXHAUSTED: Failed to allocate request for "
                      "176.00MiB (184549376B) on device ordinal 0")

# flatironinstitute/nemos#345 (the BFC allocator's warning, then the error)
GPU_BFC = """\
jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 3199993600 bytes.
W external/xla/xla/tsl/framework/bfc_allocator.cc:310] Allocator (GPU_0_bfc) ran out of memory trying to allocate 3.37GiB with freed_by_count=0.
"""

# erfanzar/EasyDeL#166 (XLA:TPU's compiler, with its largest allocations)
TPU_COMPILE = """\
jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space hbm. Used 63.80G of 30.75G hbm. Exceeded hbm capacity by 33.05G.

Total hbm usage >= 65.05G:
    reserved          1.25G
    program          63.80G
    arguments            0B

  Largest program allocations in hbm:

  1. Size: 2.00G
     Operator: op_name="jit(casual_language_model_train_step)/jit(main)/jvp(FlaxFalconForCausalLMModule)/transformer/h/0/self_attention/dot_general" source_file="/home/air/workspace/EasyDel/src/easydel/modules/attention_module.py" source_line=1059
     Shape: f32[32,4096,4096]{1,2,0:T(8,128)}
     Unpadded size: 2.00G
     XLA label: fusion.1265.remat3 = fusion(custom-call.224, custom-call.241, custom-call.22), kind=kOutput
     Allocation type: HLO temp
     ==========================
"""

# XLA:CPU, as memscope's own tests meet it (tests/programs/oom_async.py)
CPU = "RESOURCE_EXHAUSTED: Out of memory allocating 4398046511104 bytes."


def test_gpu_buffer_assignment_text_gives_the_size_and_the_peak_buffers():
    parsed = parse(GPU_BUFFER_ASSIGNMENT)
    assert parsed is not None and parsed.requested_bytes == 6291456
    assert parsed.headline.endswith("Out of memory while trying to allocate 6291456 bytes.")
    first, second = parsed.buffers
    assert first.bytes == 6 << 20 and first.shape == "f32[4096,128,3]"
    assert first.op == "jit(concatenate)/jit(main)/concatenate[dimension=0]"
    assert first.source == "/media/gccrcv/Data/Opensources/multinerf/internal/models.py:689"
    assert first.label == "concatenate"
    assert second.bytes == 384 << 10 and second.op is None and second.source is None


def test_gpu_allocator_texts_give_the_exact_size():
    assert parse(GPU_FAILED_REQUEST).requested_bytes == 184549376
    assert parse(GPU_BFC).requested_bytes == 3199993600
    assert parse(CPU).requested_bytes == 4398046511104


def test_tpu_compile_text_gives_use_against_capacity_and_the_largest_allocations():
    parsed = parse(TPU_COMPILE)
    assert parsed.requested_bytes is None
    assert parsed.used_bytes == round(63.80 * (1 << 30))
    assert parsed.capacity_bytes == round(30.75 * (1 << 30))
    assert parsed.memory_space == "hbm"
    (largest,) = parsed.buffers
    assert largest.bytes == 2 << 30 and largest.shape == "f32[32,4096,4096]{1,2,0:T(8,128)}"
    assert largest.source.endswith("attention_module.py:1059")


def test_other_errors_are_not_out_of_memory():
    assert parse("INVALID_ARGUMENT: Shapes must be equal rank") is None
    assert not is_out_of_memory("TypeError: unsupported operand")
    assert size_bytes("6.00MiB") == 6 << 20 and size_bytes("512B") == 512
    assert size_bytes("many") is None


# XLA:GPU's runtime on an H100 (jax 0.10.2, jax-cuda13-plugin), as memscope met it:
# tests/programs/oom_async.py asking for 1 TiB, and the transformer sample at
# --batch 40000, whose temporaries are 138227127840 bytes.
GPU_RUNTIME_TIB = ("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1.00TiB. "
                   "[executable_name='jit_grow'] [tf-allocator-allocation-error='']")
GPU_RUNTIME_GIB = ("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 128.73GiB. "
                   "[executable_name='jit_train_step'] [tf-allocator-allocation-error='']")


def test_gpu_runtime_text_gives_the_rounded_size_and_it_resolves_to_the_allocation():
    tib, gib = parse(GPU_RUNTIME_TIB), parse(GPU_RUNTIME_GIB)
    assert tib.requested_bytes is None and tib.requested_text == "1.00TiB"
    assert gib.requested_bytes is None and gib.requested_text == "128.73GiB"
    # the transformer's output (20717736 B) and temporaries, as compiled there
    assert resolve_rounded(gib.requested_text, [20717736, 138227127840]) == 138227127840
    assert resolve_rounded(tib.requested_text, [1 << 40, 4]) == 1 << 40
    # two different sizes that print alike: not resolved
    assert resolve_rounded("1.00TiB", [1 << 40, (1 << 40) + 1]) is None
    assert resolve_rounded("1.00TiB", [5]) is None


def test_sizes_print_as_xla_prints_them():
    sizes = (0, 512, 1023, 1024, 1536, 6 << 20, 138227127840, 1 << 40)
    assert [human_bytes(n) for n in sizes] == [
        "0B", "512B", "1023B", "1.0KiB", "1.5KiB", "6.00MiB", "128.73GiB", "1.00TiB"]


def test_tpu_compile_text_for_temporaries_gives_the_least_needed_and_the_capacity():
    # XLA:TPU (libtpu with JAX 0.10.2) compiling the bundled transformer at batch 800
    # for tpu:v5e:1x1, as memscope fit --plan met it
    text = ("RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO "
            "temporaries (18.19G) exceeds available HBM (15.75G).")
    found = parse(text)
    assert found is not None and found.headline == text
    assert (found.used_bytes, found.capacity_bytes, found.memory_space) == (
        round(18.19 * 2**30), round(15.75 * 2**30), "hbm")
