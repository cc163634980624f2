"""Shardings as memscope reads them: described in a line, and kept in the
compile cache (:class:`KeptSharding`) in place of JAX's own, whose devices a
later run (or a compile-only target) may not have."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax

from memscope import _compat


def describe_sharding(sharding: Any) -> str | None:
    """``cpu:0`` for one device, ``P('data', None) on data=8`` for a mesh."""
    if sharding is None:
        return None
    if isinstance(sharding, KeptSharding):
        return sharding.text
    if isinstance(sharding, jax.sharding.SingleDeviceSharding):
        device: Any = next(iter(sharding.device_set))
        text = f"{device.platform}:{device.id}"
    elif isinstance(sharding, jax.sharding.NamedSharding):
        axes = ",".join(f"{name}={size}" for name, size in sharding.mesh.shape.items())
        text = f"{_compat.values.partition_spec_text(sharding.spec)} on {axes}"
    else:
        text = f"{type(sharding).__name__} over {len(sharding.device_set)} devices"
    kind = getattr(sharding, "memory_kind", None)
    return text if kind in (None, "device") else f"{text} in {kind}"


@dataclass(frozen=True)
class KeptSharding:
    """What memscope reads of one leaf's sharding, kept with a compile: its
    description, memory kind, devices (by id) and the leaf's shape on each
    device. It answers the questions memscope asks of a ``jax.sharding.Sharding``
    (``memory_kind``, ``device_set``, ``shard_shape``) for the one leaf it was
    kept for."""

    text: str | None
    memory_kind: str | None
    devices: tuple[int, ...]
    #: the leaf's global shape, and its shape on each device (``None``: unknown)
    shape: tuple[int, ...] | None
    shard: tuple[int, ...] | None

    @property
    def device_set(self) -> frozenset[int]:
        return frozenset(self.devices)

    def shard_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        if self.shard is None or tuple(shape) != self.shape:
            raise ValueError("a kept sharding knows the shard shape of its own leaf only")
        return self.shard

    @classmethod
    def of(cls, sharding: Any, shape: tuple[int, ...] | None) -> KeptSharding:
        """The record of ``sharding``, the sharding of a leaf of ``shape``."""
        shard = None
        if shape is not None:
            try:
                shard = tuple(int(d) for d in sharding.shard_shape(tuple(shape)))
            except Exception:  # one that cannot say (e.g. unspecified)
                shard = None
        devices = tuple(sorted(int(d.id) for d in getattr(sharding, "device_set", ())))
        return cls(describe_sharding(sharding), getattr(sharding, "memory_kind", None),
                   devices, None if shape is None else tuple(int(d) for d in shape), shard)

    def encoded(self) -> list[Any]:
        return [self.text, self.memory_kind, list(self.devices),
                None if self.shape is None else list(self.shape),
                None if self.shard is None else list(self.shard)]

    @classmethod
    def decoded(cls, data: list[Any]) -> KeptSharding:
        text, kind, devices, shape, shard = data
        return cls(None if text is None else str(text), None if kind is None else str(kind),
                   tuple(int(i) for i in devices),
                   None if shape is None else tuple(int(d) for d in shape),
                   None if shard is None else tuple(int(d) for d in shard))
