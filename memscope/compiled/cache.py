"""memscope's cache of the compiles it only reads, across runs.

A donation variant is compiled only for what memscope reads of it (its
``memory_analysis()``, its buffer assignment, its optimized module), and on a
compile-bound program that compile is most of what memscope costs. A program
run again (a CI job, a notebook cell, an edit elsewhere) lowers the same
variants again: their reads are kept on disk, keyed by everything the compile
depends on (:func:`memscope._compat.compile_fingerprint`: the lowered module
with its source locations, XLA's options and flags, the compile-time JAX
settings, the JAX and jaxlib versions, the backend and its devices; here also
the host's CPU), and a later run reads them instead of compiling. The pieces
kept are the ones the figures are read from in either case: a variant's facts
are read from a :class:`Kept` whether it was compiled now or before. Where
``memory_analysis()`` carries no buffer assignment (XLA:GPU), the program's
own functions are compiled once more with XLA's dump to read it
(:func:`memscope.compiled.read.read_stages`): that compile is kept too.

Where: ``$MEMSCOPE_CACHE_DIR``, else ``$XDG_CACHE_HOME/memscope``, else
``~/.cache/memscope``; ``MEMSCOPE_CACHE=off`` turns it off. At most
:data:`LIMIT_BYTES` are kept, the least recently used going first. A file that
cannot be read is a miss (and is removed); a cache that cannot be written is
left alone. Kept: compiles whose buffer assignment memscope has, from
``memory_analysis()`` (XLA:CPU) or from XLA's dump of the compile (XLA:GPU,
:mod:`memscope.compiled.dump`), and whose outputs each sit on one device.
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
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax

from memscope import _compat
from memscope.compiled.dump import Built
from memscope.version import __version__

#: the cache's size, at most: the least recently used files go first
LIMIT_BYTES = 256 * 1024 * 1024
_MAGIC = b"memscope-compile-1\n"


def user_cache(name: str) -> Path:
    """The folder ``name`` in the user's cache: ``$XDG_CACHE_HOME``, else ``~/.cache``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / name


@dataclass(frozen=True)
class Kept:
    """What memscope reads of one executable, taken from it once: it stands in
    for ``jax.stages.Compiled`` where the variants are read
    (:func:`memscope.compiled.read.read_stages`)."""

    #: ``memory_analysis()``'s figures (:func:`memscope._compat.memory_stats_fields`)
    fields: dict[str, int]
    #: the serialized buffer assignment
    assignment: bytes
    #: the optimized module, a serialized ``HloModuleProto``
    module: bytes
    #: each output's device: platform, id, memory kind
    outputs: tuple[tuple[str, int, str | None], ...]
    #: the ``flops`` of XLA's ``cost_analysis()`` (``None``: it gave none, or the
    #: file was kept before memscope kept them)
    flops: float | None = None

    def memory_analysis(self) -> Any:
        return _compat.memory_stats(self.fields, self.assignment)

    @property
    def output_shardings(self) -> list[Any]:
        devices = {(d.platform, d.id): d for d in jax.devices(self.outputs[0][0])} \
            if self.outputs else {}
        return [jax.sharding.SingleDeviceSharding(devices[(p, i)], memory_kind=kind)
                for p, i, kind in self.outputs]

    @classmethod
    def of(cls, compiled: Any) -> Kept | None:
        """The pieces of ``compiled`` (an executable, or a :class:`Built`: one
        with XLA's dump of it) memscope reads; ``None`` where they do not make
        the whole read (no buffer assignment in ``memory_analysis()`` nor in the
        dump, several modules, an output on several devices)."""
        try:
            built = compiled if isinstance(compiled, Built) else None
            executable = compiled.compiled if built is not None else compiled
            stats = executable.memory_analysis()
            if built is not None:
                assignment = built.assignment
                modules = [] if built.module is None else [built.module]
            else:
                assignment = _compat.buffer_assignment_bytes(stats)
                modules = _compat.optimized_hlo_module_protos(executable)
            if assignment is None or len(modules) != 1:
                return None
            outputs = []
            for sharding in jax.tree_util.tree_leaves(executable.output_shardings):
                if not isinstance(sharding, jax.sharding.SingleDeviceSharding):
                    return None
                device: Any = next(iter(sharding.device_set))
                outputs.append((str(device.platform), int(device.id), sharding.memory_kind))
            return cls(_compat.memory_stats_fields(stats), assignment, modules[0],
                       tuple(outputs), _compat.flops(executable))
        except Exception:  # read from the executable itself, as without the cache
            return None


@dataclass(frozen=True)
class Fresh:
    """An executable compiled in this run, to be kept in ``cache`` under ``key`` once read."""

    compiled: Any
    key: str
    cache: CompileCache


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

    def key(self, lowered: Any, options: dict[str, Any]) -> str | None:
        """The key of compiling ``lowered`` with ``options`` here (see the module's
        doc); ``None`` where it cannot be told (the variant is then compiled, not kept)."""
        try:
            fingerprint = _compat.compile_fingerprint(lowered, options)
        except Exception:
            return None
        digest = hashlib.sha256(f"{__version__}\0{_host()}\0".encode())
        digest.update(fingerprint)
        return digest.hexdigest()

    def find(self, lowered: Any, options: dict[str, Any], *, counted: bool = True
             ) -> tuple[str | None, Kept | None]:
        """The key of compiling ``lowered`` with ``options`` (:meth:`key`), and
        what is kept under it (:meth:`load`), each ``None`` where there is none."""
        key = self.key(lowered, options)
        return key, None if key is None else self.load(key, counted=counted)

    def keep(self, key: str, compiled: Any) -> Kept | None:
        """Keep the pieces of ``compiled`` memscope reads (:meth:`Kept.of`) under
        ``key``, and return them; ``None`` where they do not make the whole read."""
        kept = Kept.of(compiled)
        if kept is not None:
            self.store(key, kept)
        return kept

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

    def store(self, key: str, kept: Kept) -> None:
        """Keep ``kept`` under ``key``; a cache that cannot be written is left as it is."""
        path = self._path(key)
        written = None
        try:
            data = _encode(kept)
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=path.parent, delete=False,
                                             suffix=".tmp") as f:
                written = Path(f.name)
                f.write(data)
            os.replace(written, path)  # (whole, for another run reading it now)
        except (OSError, TypeError, ValueError):
            if written is not None:
                _remove(written)
            return
        with self._lock:
            if self._size is None or self._size + len(data) > self.limit:
                self._size = self._trim()
            else:
                self._size += len(data)

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
    header = json.dumps({"fields": kept.fields, "outputs": kept.outputs, "flops": kept.flops,
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
                tuple((str(p), int(i), k) for p, i, k in header["outputs"]),
                None if header.get("flops") is None else float(header["flops"]))


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
