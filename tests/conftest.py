"""Test-wide set-up: eight simulated CPU devices, as the multi-device tests need.

XLA reads the flag once, when JAX starts its CPU backend, so it is set here,
before any test imports JAX. Programs the tests start in subprocesses inherit
it. Single-device code is unaffected: arrays live on device 0 unless sharded.
"""

from __future__ import annotations

import os

DEVICES_FLAG = "--xla_force_host_platform_device_count=8"

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {DEVICES_FLAG}".strip()
