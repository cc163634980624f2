"""memscope's cache of the compiles it only reads, across runs.

Every compile memscope makes only to read it (a donation variant, a checkpoint
policy, one of ``fit``'s sizes, a function compiled for a ``--target``, XLA's
dump of a program whose ``memory_analysis()`` lacks its buffer assignment)
goes through one call, :func:`memscope.compiled.compile.compile_to_read`, and
on a compile-bound program those compiles are most of what memscope costs. A
program run again (a CI job, a notebook cell, an edit elsewhere) lowers the
same programs again: their reads are kept on disk, keyed by everything the
compile depends on (:meth:`CompileCache.key`: the lowered module with its
source locations, XLA's options and flags, the compile-time JAX settings, the
JAX and jaxlib versions, the backend, its devices and the target's compiler
and description; here also the host's CPU), and a later run reads them instead
of compiling. The pieces kept are the ones the figures are read from in either
case: a compile's facts are read from a :class:`Kept` whether it was compiled
now or before, and a :class:`Kept` is stored only where its bytes read back as
itself and its figures as the compile's.

Where: ``$MEMSCOPE_CACHE_DIR``, else ``$XDG_CACHE_HOME/memscope``, else
``~/.cache/memscope``; ``MEMSCOPE_CACHE=off`` turns it off. At most
:data:`LIMIT_BYTES` are kept, the least recently used going first. A file that
cannot be read is a miss (and is removed); a cache that cannot be written is
left alone. Kept: every compile whose buffer assignment memscope has, from
``memory_analysis()`` (XLA:CPU) or from XLA's dump of the compile (XLA:GPU,
XLA:TPU, :mod:`memscope.compiled.dump`), on one device or sharded over many.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import platform
import struct
import tempfile
import threading
import types
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import jaxlib

from memscope import _compat
from memscope.compiled.dump import Built
from memscope.compiled.shardings import KeptSharding
from memscope.version import __version__

#: the cache's size, at most: the least recently used files go first
LIMIT_BYTES = 256 * 1024 * 1024
_MAGIC = b"memscope-compile-2\n"


def user_cache(name: str) -> Path:
    """The folder ``name`` in the user's cache: ``$XDG_CACHE_HOME``, else ``~/.cache``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / name


@dataclass(frozen=True)
class Kept:
    """What memscope reads of one executable, taken from it once: it stands in
    for ``jax.stages.Compiled`` where a compile is read (``memory_analysis()``,
    ``cost_analysis()``'s FLOPs, the input and output shardings), with the
    optimized module and buffer assignment beside it, whatever the target."""

    #: ``memory_analysis()``'s figures (:func:`memory_stats_fields`)
    fields: dict[str, int]
    #: the serialized buffer assignment
    assignment: bytes
    #: the optimized module, a serialized ``HloModuleProto``
    module: bytes
    #: each flat input's sharding (``None``: an input the program dropped)
    inputs: tuple[KeptSharding | None, ...]
    #: each flat output's sharding
    outputs: tuple[KeptSharding, ...]
    #: the ``flops`` of XLA's ``cost_analysis()`` (``None``: it gave none)
    flops: float | None = None
    #: XLA options the compile was made with beyond those asked for (a
    #: target's retry: :attr:`memscope.compiled.dump.Built.options`)
    options: dict[str, Any] = field(default_factory=dict)

    def memory_analysis(self) -> Any:
        return memory_stats(self.fields, self.assignment)

    def cost_analysis(self) -> dict[str, float]:
        if self.flops is None:
            raise NotImplementedError("no FLOPs were counted for this compile")
        return {"flops": self.flops}

    @property
    def input_shardings(self) -> list[KeptSharding | None]:
        return list(self.inputs)

    @property
    def output_shardings(self) -> list[KeptSharding]:
        return list(self.outputs)

    @classmethod
    def of(cls, built: Built) -> Kept | None:
        """The pieces of ``built`` (an executable, with XLA's dump of it where
        there is one) memscope reads; ``None`` where they do not make the whole
        read (no buffer assignment in ``memory_analysis()`` nor in the dump,
        several modules)."""
        try:
            executable = built.compiled
            stats = executable.memory_analysis()
            if built.assignment is not None:
                assignment: bytes | None = built.assignment
                modules = [] if built.module is None else [built.module]
            else:
                assignment = _compat.executables.buffer_assignment_bytes(stats)
                modules = ([built.module] if built.module is not None
                           else _compat.executables.optimized_hlo_module_protos(executable))
            if assignment is None or len(modules) != 1:
                return None
            return cls(memory_stats_fields(stats), assignment, modules[0],
                       _kept_inputs(executable), _kept_outputs(executable),
                       _compat.executables.flops(executable), dict(built.options))
        except Exception:  # read from the executable itself, as without the cache
            return None


def memory_stats_fields(stats: Any) -> dict[str, int]:
    """The figures of ``memory_analysis()`` (every integer field this jaxlib
    gives), without the serialized buffer assignment (:func:`memscope._compat.executables.buffer_assignment_bytes`)."""
    return {name: int(getattr(stats, name)) for name in dir(stats)
            if not name.startswith("_") and isinstance(getattr(stats, name, None), int)
            and not isinstance(getattr(stats, name), bool)}


def memory_stats(fields: dict[str, int], assignment: bytes) -> Any:
    """A stand-in for ``memory_analysis()``'s result, from
    :func:`memory_stats_fields` and :func:`memscope._compat.executables.buffer_assignment_bytes`."""
    return types.SimpleNamespace(**fields, serialized_buffer_assignment_proto=assignment)


def _kept_inputs(executable: Any) -> tuple[KeptSharding | None, ...]:
    shardings = jax.tree_util.tree_leaves(executable.input_shardings,
                                          is_leaf=lambda x: x is None)
    shapes = _shapes(lambda: executable.in_avals, len(shardings))
    return tuple(None if s is None else KeptSharding.of(s, shape)
                 for s, shape in zip(shardings, shapes, strict=True))


def _kept_outputs(executable: Any) -> tuple[KeptSharding, ...]:
    shardings = jax.tree_util.tree_leaves(executable.output_shardings)
    shapes = _shapes(lambda: executable.out_info, len(shardings))
    return tuple(KeptSharding.of(s, shape) for s, shape in zip(shardings, shapes, strict=True))


def _shapes(read: Any, count: int) -> list[tuple[int, ...] | None]:
    """The flat leaves' shapes ``read()`` gives (avals, or ``ShapeDtypeStruct``'s),
    where there are ``count`` of them; else unknown."""
    try:
        leaves = jax.tree_util.tree_leaves(read())
        if len(leaves) == count:
            return [tuple(int(d) for d in leaf.shape) for leaf in leaves]
    except Exception:
        pass
    return [None] * count


class CompileCache:
    """The cache one capture reads and writes, and what it found there."""

    def __init__(self, directory: Path, limit: int = LIMIT_BYTES) -> None:
        self.directory = directory
        self.limit = limit
        self._lock = threading.Lock()
        #: donation variants read from the cache instead of compiled
        self.hits = 0
        #: bytes in the folder as last counted, plus what this run stored since
        #: (``None``: not counted yet). The folder is counted, and trimmed, on
        #: the run's first store and whenever a store would pass the limit, not
        #: on every store: a test suite stores hundreds. Another process's
        #: stores are counted at the next count, so the limit is approximate.
        self._size: int | None = None

    @classmethod
    def from_environment(cls) -> CompileCache | None:
        """The cache the environment names (see the module's doc); ``None`` when off."""
        if os.environ.get("MEMSCOPE_CACHE", "").lower() in ("off", "0", "no", "false"):
            return None
        where = os.environ.get("MEMSCOPE_CACHE_DIR")
        return cls(Path(where) if where else user_cache("memscope"))

    def key(self, lowered: Any, options: dict[str, Any], target: str = "") -> str | None:
        """The key of compiling ``lowered`` with XLA debug ``options`` for the
        ``target`` so described (:attr:`memscope.compiled.targets.Target.identity`):
        everything the compile depends on (see the module's doc); ``None`` where
        it cannot be told (the compile is then made, not kept)."""
        try:
            facts = (compile_placement(lowered), target,
                     sorted((k, repr(v)) for k, v in options.items()),
                     _compat.stages.compile_settings(), jax.__version__, jaxlib.__version__,
                     os.environ.get("XLA_FLAGS", ""), os.environ.get("LIBTPU_INIT_ARGS", ""))
            module = _compat.stages.module_bytecode(lowered)
        except Exception:
            return None
        digest = hashlib.sha256(f"{__version__}\0{_host()}\0".encode())
        digest.update(repr(facts).encode() + b"\0" + module)
        return digest.hexdigest()

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.bin"

    def load(self, key: str, *, counted: bool = True) -> Kept | None:
        """The pieces kept under ``key``, or ``None``; a hit is counted in
        :attr:`hits` (a donation variant's) unless not ``counted``."""
        path = self._path(key)
        try:
            data = path.read_bytes()
        except OSError:
            return None
        try:
            kept = _decode(data)
        except Exception:  # a damaged or foreign file: a miss, and gone
            _remove(path)
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # (used: the last to go)
        if counted:
            with self._lock:
                self.hits += 1
        return kept

    def store(self, key: str, kept: Kept) -> bool:
        """Keep ``kept`` under ``key``, where its bytes read back as ``kept``;
        whether it was kept (a cache that cannot be written is left as it is)."""
        path = self._path(key)
        written = None
        try:
            data = _encode(kept)
            if _decode(data) != kept:  # (a figure the encoding would change)
                return False
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=path.parent, delete=False,
                                             suffix=".tmp") as f:
                written = Path(f.name)
                f.write(data)
            os.replace(written, path)  # (whole, for another run reading it now)
        except (OSError, TypeError, ValueError):
            if written is not None:
                _remove(written)
            return False
        with self._lock:
            if self._size is None or self._size + len(data) > self.limit:
                self._size = self._trim()
            else:
                self._size += len(data)
        return True

    def _trim(self) -> int | None:
        """Remove the least recently used files until the cache is within its
        limit; the bytes left (``None``: the folder could not be read)."""
        files = []
        try:
            for sub in os.scandir(self.directory):
                if sub.is_dir():
                    for entry in os.scandir(sub.path):
                        stat = entry.stat()
                        files.append((stat.st_mtime, stat.st_size, entry.path))
        except OSError:
            return None
        total = sum(size for _, size, _ in files)
        for _, size, path in sorted(files):
            if total <= self.limit:
                break
            _remove(Path(path))
            total -= size
        return total


def _encode(kept: Kept) -> bytes:
    header = json.dumps({"fields": kept.fields, "flops": kept.flops, "options": kept.options,
                         "inputs": [None if s is None else s.encoded() for s in kept.inputs],
                         "outputs": [s.encoded() for s in kept.outputs],
                         "module": len(kept.module),
                         "assignment": len(kept.assignment)}).encode()
    return _MAGIC + zlib.compress(struct.pack("<I", len(header)) + header
                                  + kept.module + kept.assignment, 1)


def _decode(data: bytes) -> Kept:
    if not data.startswith(_MAGIC):
        raise ValueError("not a memscope cache file")
    body = zlib.decompress(data[len(_MAGIC):])
    (size,) = struct.unpack_from("<I", body)
    header = json.loads(body[4:4 + size])
    start = 4 + size
    module = body[start:start + header["module"]]
    assignment = body[start + header["module"]:]
    if len(module) != header["module"] or len(assignment) != header["assignment"]:
        raise ValueError("a truncated memscope cache file")
    return Kept({k: int(v) for k, v in header["fields"].items()}, assignment, module,
                tuple(None if s is None else KeptSharding.decoded(s) for s in header["inputs"]),
                tuple(KeptSharding.decoded(s) for s in header["outputs"]),
                None if header["flops"] is None else float(header["flops"]),
                dict(header["options"]))


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


@functools.cache
def _host() -> str:
    """The host's CPU as XLA:CPU compiles for it: its architecture, model and
    features (``/proc/cpuinfo`` where there is one; read once)."""
    facts = [platform.machine()]
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith(("model name", "flags", "Features")):
                facts.append(line.strip())
            if not line.strip() and len(facts) > 1:
                break
    return "\n".join(facts)


def compile_placement(lowered: Any) -> tuple[Any, ...]:
    """Where ``lowered`` compiles for: the backend's platform and version, the
    number of devices, each device its shardings name (platform, kind, id),
    and how many devices the backend has."""
    args = _compat.stages.compile_args(lowered)
    client = _compat.stages.lowering_client(lowered)
    devices: list[Any] = []
    for sharding in (*args.get("in_shardings", ()), *args.get("out_shardings", ())):
        for device in _compat.stages.sharding_devices(sharding):
            if device not in devices:
                devices.append(device)
    return (client.platform, getattr(client, "platform_version", ""), args.get("num_devices"),
            tuple((d.platform, d.device_kind, d.id) for d in devices), len(client.devices()))
