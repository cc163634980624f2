"""NVIDIA data-center GPUs as ``--target gpu:MODEL`` names them: each device's
facts, and where they come from.

The facts are those CUDA reports of the device (``cudaDeviceProp``: SMs,
shared memory and registers per SM and per block, L2, clock, memory and its
bandwidth, compute capability), the ones XLA:GPU's compiler reads to choose
fusions, tilings and launch shapes. Each description here gives the values of
XLA's published device specification for that device (``source``: the file
in the openxla/xla repository and the commit read), written in memscope's own
form; :func:`memscope.compiled.targets.gpu.target_config` renders them as the
``GpuTargetConfigProto`` text the installed CUDA plugin parses. A description
read from a real device (``target_config`` of JAX's local topology, on a
lent GPU) says so in its ``source``. Figures compiled for a description are
only as good as it is: the report names its source.
"""

from __future__ import annotations

from dataclasses import dataclass

_XLA_SPECS = "xla/backends/gpu/target_config/specs in openxla/xla"


@dataclass(frozen=True)
class GpuModel:
    """One GPU model: what JAX calls its devices, and the facts XLA:GPU reads."""

    #: the name ``--target gpu:NAME`` takes
    name: str
    #: the device's name as CUDA and JAX (``device_kind``) give it
    device_kind: str
    #: compute capability: ``(major, minor)``, and whether the architecture's
    #: accelerated features are on (``sm_90a``, ``sm_100a``)
    compute_capability: tuple[int, int]
    accelerated: bool
    sms: int
    #: device memory, bytes
    memory_bytes: int
    #: bytes per second
    memory_bandwidth: int
    l2_cache_bytes: int
    clock_ghz: float
    shared_memory_per_sm: int
    shared_memory_per_block: int
    shared_memory_per_block_optin: int
    threads_per_sm: int
    fpus_per_sm: int
    registers_per_sm: int
    registers_per_block: int
    #: where the facts come from
    source: str
    #: other names ``--target`` accepts
    aliases: tuple[str, ...] = ()
    threads_per_block: int = 1024
    threads_per_warp: int = 32


def _spec(file: str, commit: str) -> str:
    return f"XLA's published spec {file} ({_XLA_SPECS} at {commit[:12]})"


MODELS: tuple[GpuModel, ...] = (
    GpuModel("a100-40gb", "NVIDIA A100-SXM4-40GB", (8, 0), False, 108, 42_331_013_120,
             1_555_200_000_000, 41_943_040, 1.41, 167_936, 49_152, 166_912, 2048, 64,
             65_536, 65_536, _spec("a100_sxm_40.txtpb", "4336d12e0706168f"),
             aliases=("a100-sxm-40gb",)),
    GpuModel("a100-80gb", "NVIDIA A100-SXM4-80GB", (8, 0), False, 108, 85_100_068_864,
             2_039_040_000_000, 41_943_040, 1.41, 167_936, 49_152, 166_912, 2048, 64,
             65_536, 65_536, _spec("a100_sxm_80.txtpb", "4336d12e0706168f"),
             aliases=("a100", "a100-sxm-80gb")),
    GpuModel("a100-pcie-80gb", "NVIDIA A100 80GB PCIe", (8, 0), False, 108, 79_050_250_240,
             2_039_000_000_000, 41_943_040, 1.1105, 167_936, 49_152, 166_912, 2048, 64,
             65_536, 65_536, _spec("a100_pcie_80.txtpb", "47bdd9b840d3d155"),
             aliases=("a100-pcie",)),
    GpuModel("h100", "NVIDIA H100 80GB HBM3", (9, 0), True, 132, 84_942_979_072,
             3_352_320_000_000, 52_428_800, 1.98, 233_472, 49_152, 232_448, 2048, 128,
             65_536, 65_536, _spec("h100_sxm.txtpb", "0774019d97e77dc4"),
             aliases=("h100-sxm",)),
    GpuModel("h100-pcie", "NVIDIA H100 PCIe", (9, 0), True, 114, 84_942_979_072,
             2_039_040_000_000, 52_428_800, 1.755, 233_472, 49_152, 232_448, 2048, 128,
             65_536, 65_536, _spec("h100_pcie.txtpb", "4336d12e0706168f")),
    # Read from a real H200 (driver 580.159.04, jax-cuda13-plugin 0.11.2), where
    # it differs from the published spec (device name, memory, bandwidth, L2):
    # tests/data/gpu/h200_jax0.11.2.json.
    GpuModel("h200", "NVIDIA H200", (9, 0), True, 132, 150_109_880_320,
             4_814_304_000_000, 62_914_560, 1.98, 233_472, 49_152, 232_448, 2048, 128,
             65_536, 65_536, "an NVIDIA H200's own description, read through XLA:GPU's "
             "dump of its target config (2026-11-27); the rest as XLA's published spec "
             f"h200.txtpb ({_XLA_SPECS} at 4336d12e0706)"),
    GpuModel("b200", "NVIDIA B200", (10, 0), True, 148, 191_514_411_008,
             7_672_320_000_000, 132_644_864, 1.965, 233_472, 49_152, 232_448, 2048, 128,
             65_536, 65_536, _spec("b200.txtpb", "300ec95ab85fa9f4")),
    GpuModel("gb200", "NVIDIA GB200", (10, 0), True, 152, 197_897_748_480,
             7_928_064_000_000, 135_528_448, 2.062, 233_472, 49_152, 232_448, 2048, 128,
             65_536, 65_536, _spec("gb200.txtpb", "300ec95ab85fa9f4")),
    GpuModel("b300", "NVIDIA B300", (10, 3), False, 158, 297_021_865_984,
             7_936_000_000_000, 135_528_448, 1.965, 233_472, 49_152, 232_448, 2048, 128,
             65_536, 65_536, _spec("b300.txtpb", "4336d12e0706168f")),
    GpuModel("gb300", "NVIDIA GB300", (10, 3), True, 152, 297_021_079_552,
             7_928_064_000_000, 135_528_448, 2.07, 233_472, 49_152, 232_448, 2048, 128,
             65_536, 65_536, _spec("gb300.txtpb", "4336d12e0706168f")),
    GpuModel("rtx-pro-6000", "NVIDIA RTX PRO 6000 Blackwell", (12, 0), False, 188,
             103_079_215_104, 1_792_000_000_000, 134_217_728, 2.6, 131_072, 49_152, 101_376,
             1536, 128, 65_536, 65_536, _spec("rtx6000pro.txtpb", "4336d12e0706168f")),
)
