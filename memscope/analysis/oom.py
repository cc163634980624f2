"""Pure functions: XLA's out-of-memory text -> what it says, in figures.

No JAX here. XLA words an out-of-memory error differently per backend and per
place (the allocator, buffer assignment, the TPU compiler); each pattern below
comes from an error users met (tests/test_oom_parse.py holds them as fixtures).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from memscope.errors import first_line
from memscope.report import XlaBuffer

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}

#: Texts that mark an error as the device (or host) running out of memory.
_MARKERS = re.compile(r"RESOURCE_EXHAUSTED|Resource exhausted|[Oo]ut of memory|"
                      r"ran out of memory|Ran out of memory|Failed to allocate request")

#: The size of the allocation that failed, in exact bytes, most specific first.
_REQUESTED = (
    # XLA:GPU buffer assignment / XLA:CPU: "Out of memory while trying to allocate N bytes."
    re.compile(r"Out of memory (?:while trying to allocate|allocating) (\d+) bytes"),
    # the GPU client: "Failed to allocate request for 176.00MiB (184549376B) on device"
    re.compile(r"Failed to allocate request for [\d.]+\s*\w+ \((\d+)B\)"),
    # the BFC allocator: "ran out of memory trying to allocate 9.00GiB (rounded to 9663676416)"
    re.compile(r"ran out of memory trying to allocate [\d.]+\s*\w+ \(rounded to (\d+)\)"),
)
#: XLA:GPU's runtime, as seen on an H100 (jax 0.10.2): "Out of memory while trying to
#: allocate 128.73GiB." -- the size rounded to two decimals, resolved to exact
#: bytes by :func:`resolve_rounded` against the compiled program's allocations.
_ROUNDED = re.compile(r"Out of memory while trying to allocate ([\d.]+[KMGTPE]iB|\d+B)\b")
#: XLA:TPU's compiler: "Used 21.95G of 15.48G hbm. Exceeded hbm capacity by 6.47G."
_TPU = re.compile(r"Used ([\d.]+[KMGTP]?i?B?) of ([\d.]+[KMGTP]?i?B?) (\w+)")
#: XLA:TPU's compiler, for a program whose temporaries alone exceed the chip:
#: "the total memory required for HLO temporaries (18.19G) exceeds available HBM
#: (15.75G)" -- what it needs is at least the temporaries.
_TPU_TEMPORARIES = re.compile(r"memory required for [\w ]+? \(([\d.]+[KMGTP]?i?B?)\) exceeds "
                              r"available (\w+) \(([\d.]+[KMGTP]?i?B?)\)")
#: One buffer of XLA's "Peak buffers" / "Largest program allocations" list.
_BUFFER = re.compile(r"Size: ([\d.]+\s*[KMGTP]?i?B?)\s*\n(?P<body>.*?)(?====|\n\s*\n|\Z)",
                     re.S)
_OP = re.compile(r'op_name="([^"]*)"')
_FILE = re.compile(r'source_file="([^"]*)"')
_LINE = re.compile(r"source_line=(\d+)")
_SHAPE = re.compile(r"Shape: (\S+)")
_LABEL = re.compile(r"XLA [Ll]abel: (\S+)")


@dataclass(frozen=True)
class OutOfMemoryText:
    """What an out-of-memory error's text says. ``None`` where it does not say."""

    #: the error's first line, as XLA wrote it
    headline: str
    #: the allocation that failed
    requested_bytes: int | None = None
    #: its size as XLA printed it, where it printed it rounded (XLA:GPU: "128.73GiB")
    requested_text: str | None = None
    #: XLA:TPU's compiler: what the program needs, and the memory it has
    used_bytes: int | None = None
    capacity_bytes: int | None = None
    memory_space: str | None = None
    #: the buffers XLA lists (GPU "Peak buffers", TPU "Largest program allocations")
    buffers: tuple[XlaBuffer, ...] = ()


def is_out_of_memory(text: str) -> bool:
    """True when an error's text says memory ran out (RESOURCE_EXHAUSTED and kin)."""
    return bool(_MARKERS.search(text))


def size_bytes(text: str) -> int | None:
    """``6.00MiB``, ``2.00G``, ``512B``, ``530.00M`` -> bytes (binary units, as XLA
    prints them); ``None`` if it is not a size."""
    m = re.fullmatch(r"\s*([\d.]+)\s*([KMGTP]?)(i?B?)\s*", text)
    if m is None:
        return None
    try:
        return round(float(m.group(1)) * _UNITS[m.group(2)])
    except ValueError:
        return None


def parse(text: str) -> OutOfMemoryText | None:
    """What an out-of-memory error says; ``None`` when ``text`` is not one."""
    if not is_out_of_memory(text):
        return None
    requested = None
    for pattern in _REQUESTED:
        m = pattern.search(text)
        if m is not None:
            requested = int(m.group(1))
            break
    rounded = None
    if requested is None:
        m = _ROUNDED.search(text)
        rounded = m.group(1) if m is not None else None
    used = capacity = space = None
    tpu = _TPU.search(text)
    if tpu is not None:
        used, capacity, space = size_bytes(tpu.group(1)), size_bytes(tpu.group(2)), tpu.group(3)
    elif (temps := _TPU_TEMPORARIES.search(text)) is not None:
        used, capacity = size_bytes(temps.group(1)), size_bytes(temps.group(3))
        space = temps.group(2).lower()
    headline = first_line(text).rstrip()
    return OutOfMemoryText(headline=headline, requested_bytes=requested,
                           requested_text=rounded, used_bytes=used,
                           capacity_bytes=capacity, memory_space=space,
                           buffers=tuple(_buffers(text)))


def _buffers(text: str) -> list[XlaBuffer]:
    found = []
    for m in _BUFFER.finditer(text):
        body = m.group("body")
        op, file, line = _OP.search(body), _FILE.search(body), _LINE.search(body)
        shape, label = _SHAPE.search(body), _LABEL.search(body)
        source = None
        if file is not None:
            source = f"{file.group(1)}:{line.group(1)}" if line is not None else file.group(1)
        found.append(XlaBuffer(bytes=size_bytes(m.group(1)),
                                  shape=shape.group(1) if shape else None,
                                  op=op.group(1) if op else None, source=source,
                                  label=label.group(1) if label else None))
    return found


def human_bytes(n: int) -> str:
    """``n`` as XLA prints sizes in its errors (``tsl::strings::HumanReadableNumBytes``:
    whole kibibytes dropped at each step, then one decimal for KiB, two above):
    ``512B``, ``1.5KiB``, ``6.00MiB``, ``128.73GiB``."""
    if n < 1024:
        return f"{n}B"
    unit = 0
    while n >= 1024 * 1024:
        n //= 1024
        unit += 1
    return f"{n / 1024:.1f}KiB" if unit == 0 else f"{n / 1024:.2f}{'KMGTPE'[unit]}iB"


def resolve_rounded(text: str, sizes: Iterable[int | None]) -> int | None:
    """The one size among ``sizes`` (the compiled program's allocations) that XLA
    prints as ``text``; ``None`` where none or several distinct sizes do."""
    matches = {n for n in sizes if n is not None and human_bytes(n) == text}
    return matches.pop() if len(matches) == 1 else None
