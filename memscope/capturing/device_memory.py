"""Device memory over a capture, where the backend keeps statistics (GPU, TPU).

:class:`DeviceMemory` reads ``Device.memory_stats()`` of the busiest local
device: after every top-level jitted call (one sample each, up to
:data:`MAX_DEVICE_SAMPLES`), before and after a signature's first call, and
when a call runs out of memory. On CPU the statistics do not exist: asked once,
at the first call, and never again. Its reason to change: how device memory is
read and kept.
"""

from __future__ import annotations

import jax

from memscope.report import MemorySample

#: Device-memory samples kept per run (one per top-level call); later calls are
#: not sampled, and the report says the timeline was cut.
MAX_DEVICE_SAMPLES = 10_000


class DeviceMemory:
    """The samples of device memory taken in one capture."""

    def __init__(self) -> None:
        #: whether the backend keeps statistics; ``None``: not asked yet (no call ran)
        self.available: bool | None = None
        self.samples: list[MemorySample] = []
        #: whether calls went unsampled past :data:`MAX_DEVICE_SAMPLES`
        self.truncated = False

    def now(self) -> tuple[int, int] | None:
        """(bytes in use, peak bytes in use) of the busiest local device, or ``None``
        where the backend keeps no such statistics (CPU)."""
        if self.available is False:
            return None
        try:
            stats = [d.memory_stats() for d in jax.local_devices()]
            figures = (max(int(s["bytes_in_use"]) for s in stats),
                       max(int(s["peak_bytes_in_use"]) for s in stats))
        except Exception:  # None (CPU), a missing key, or no devices
            self.available = False
            return None
        self.available = True
        return figures

    def sample(self, call: int, function: str) -> None:
        """Record device memory right after top-level call number ``call`` (of
        ``function``), where it is kept."""
        if self.available is False:
            return
        if len(self.samples) >= MAX_DEVICE_SAMPLES:
            self.truncated = True
            return
        figures = self.now()
        if figures is not None:
            self.samples.append(MemorySample(call, function, *figures))


def device_limits() -> tuple[int, int | None] | None:
    """(bytes in use, the device's limit) on the busiest local device; ``None``
    where the backend keeps no statistics (CPU)."""
    try:
        stats = [d.memory_stats() for d in jax.local_devices()]
        busiest = max(stats, key=lambda s: int(s["bytes_in_use"]))
    except Exception:  # None (CPU), a missing key, or no devices
        return None
    limit = busiest.get("bytes_limit")
    return int(busiest["bytes_in_use"]), None if limit is None else int(limit)
