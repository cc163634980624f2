"""Read budgets and tolerances from ``[tool.memscope]`` in pyproject.toml, or a ``--config`` file.

::

    [tool.memscope]
    max_increase = "5%"                  # every figure; or {peak = "5%", temp = "20%"}
    max_increase_bytes = "16 MiB"        # the same forms

The peak is gated (growth over its tolerance fails); ``temp`` and ``io`` are
reported, and gated only where named (``{temp = "20%"}``, ``--max-increase
temp=20%``): a value for every figure sets their tolerance but gates none of
them.

    [tool.memscope.functions.train_step]
    max_peak = "2 GiB"
    forbid_unusable_donation = true
    require_aliased = ["state"]
    forbid_recompiles = true             # one signature only

    [tool.memscope]
    max_live_growth = "1 MiB"            # live arrays that keep growing over the run
    max_run_peak = "12 GiB"              # the run's high-water mark (per device)

Every key is checked; an unknown key or a malformed value is a
:class:`MemscopeError` naming the file and the key. The same parsers read the
command line's ``--max-increase [FIGURE=]PCT`` and ``--max-increase-bytes
[FIGURE=]SIZE``.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any, TypeVar

from memscope.check.records import FIGURES, Budget, Config, Tolerance, Tolerances
from memscope.errors import MemscopeError
from memscope.report.units import parse_percent, parse_size

T = TypeVar("T")

PYPROJECT = "pyproject.toml"
TOP_KEYS = ("max_increase", "max_increase_bytes", "functions", "max_live_growth",
            "max_run_peak")
FUNCTION_KEYS = ("max_peak", "forbid_unusable_donation", "require_aliased",
                 "forbid_recompiles")


def find_pyproject(start: str) -> str | None:
    """The nearest pyproject.toml in ``start`` or a folder above it, or ``None``."""
    folder = os.path.abspath(start)
    while True:
        candidate = os.path.join(folder, PYPROJECT)
        if os.path.isfile(candidate):
            return candidate
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def load_config(path: str | None = None, *, start: str = ".") -> Config:
    """The config in ``path``, or in the nearest pyproject.toml from ``start`` when ``None``.

    A ``path`` that has a ``[tool.memscope]`` table is read from there;
    otherwise its top level is the memscope table (a ``memscope.toml``). A
    pyproject.toml found by searching and without ``[tool.memscope]`` gives an
    empty config.

    Raises:
        MemscopeError: the file cannot be read or is not TOML, or a key or value
            is wrong (the message names the file and the key).
    """
    explicit = path is not None
    path = path if path is not None else find_pyproject(start)
    if path is None:
        return Config()
    data = _read_toml(path)
    tool = data.get("tool")
    table: Any
    if isinstance(tool, dict) and "memscope" in tool:
        table, where = tool["memscope"], "[tool.memscope]"
    elif explicit:
        table, where = data, "top level"
    else:
        return Config()
    shown = os.path.relpath(path) if not os.path.relpath(path).startswith(os.pardir) else path
    return parse_config(table, source=shown, where=where)


def _read_toml(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as e:
        raise MemscopeError(f"cannot read config {path}: {e.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise MemscopeError(f"{path}: not valid TOML ({e})") from None


def parse_config(table: Any, *, source: str, where: str = "[tool.memscope]") -> Config:
    """Validate a memscope table (already parsed TOML) into a :class:`Config`.

    Raises:
        MemscopeError: an unknown key or a malformed value, naming ``source`` and the key.
    """
    if not isinstance(table, dict):
        raise MemscopeError(f"{source}: {where} must be a table")
    _no_unknown_keys(table, TOP_KEYS, source, where)
    percent, named = _figure_values(table.get("max_increase"), _percent,
                                    f"{source}: {where} max_increase")
    sizes, named_bytes = _figure_values(table.get("max_increase_bytes"), _size,
                                        f"{source}: {where} max_increase_bytes")
    functions = table.get("functions", {})
    if not isinstance(functions, dict):
        raise MemscopeError(f"{source}: {where} functions must be a table of functions, "
                            "e.g. [tool.memscope.functions.train_step]")
    budgets = tuple(_budget(name, value, source, f"[tool.memscope.functions.{name}]"
                            if where == "[tool.memscope]" else f"[functions.{name}]")
                    for name, value in functions.items())
    growth = None
    if "max_live_growth" in table:
        growth = _size(table["max_live_growth"], f"{source}: {where} max_live_growth")
    run_peak = None
    if "max_run_peak" in table:
        run_peak = _size(table["max_run_peak"], f"{source}: {where} max_run_peak")
    return Config(source=source, tolerances=_tolerances(percent, sizes, named | named_bytes),
                  budgets=budgets, max_live_growth=growth, max_run_peak=run_peak)


def _budget(name: str, table: Any, source: str, where: str) -> Budget:
    if not isinstance(table, dict):
        raise MemscopeError(f"{source}: {where} must be a table (e.g. max_peak = \"2 GiB\")")
    _no_unknown_keys(table, FUNCTION_KEYS, source, where)
    max_peak = None
    if "max_peak" in table:
        max_peak = _size(table["max_peak"], f"{source}: {where} max_peak")
    forbid = table.get("forbid_unusable_donation", False)
    if not isinstance(forbid, bool):
        raise MemscopeError(f"{source}: {where} forbid_unusable_donation must be true or "
                            f"false, not {forbid!r}")
    required = table.get("require_aliased", [])
    if not isinstance(required, list) or not all(isinstance(p, str) and p for p in required):
        raise MemscopeError(f"{source}: {where} require_aliased must be a list of argument "
                            f"names or leaf paths, e.g. [\"state\"], not {required!r}")
    recompiles = table.get("forbid_recompiles", False)
    if not isinstance(recompiles, bool):
        raise MemscopeError(f"{source}: {where} forbid_recompiles must be true or false, "
                            f"not {recompiles!r}")
    return Budget(name, max_peak, forbid, tuple(required), forbid_recompiles=recompiles)


def _no_unknown_keys(table: dict[str, Any], known: Iterable[str], source: str,
                     where: str) -> None:
    unknown = [k for k in table if k not in known]
    if unknown:
        raise MemscopeError(f"{source}: {where} has an unknown key {unknown[0]!r} "
                            f"(known: {', '.join(known)})")


def _size(value: Any, where: str) -> int:
    # TOML integers are bytes; strings carry their unit.
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return _parsed(value, where, parse_size, "a size such as \"2 GiB\"")


def _percent(value: Any, where: str) -> float:
    return _parsed(value, where, parse_percent, "a percentage such as \"5%\"")


def _parsed(value: Any, where: str, parse: Callable[[str], T], example: str) -> T:
    """``value``, a string, as ``parse`` reads it; else one line that says ``where``."""
    if not isinstance(value, str):
        raise MemscopeError(f"{where}: expected {example}, not {value!r}")
    try:
        return parse(value)
    except MemscopeError as e:
        raise MemscopeError(f"{where}: {e}") from None


def _figure_values(value: Any, parse: Callable[[Any, str], Any], where: str
                   ) -> tuple[dict[str, Any], set[str]]:
    """``"5%"`` -> every figure; ``{peak = "5%"}`` -> that figure only; with the
    figures named (which gates them)."""
    if value is None:
        return {}, set()
    if not isinstance(value, dict):
        return dict.fromkeys(FIGURES, parse(value, where)), set()
    unknown = [k for k in value if k not in FIGURES]
    if unknown:
        raise MemscopeError(f"{where}: unknown figure {unknown[0]!r} "
                            f"(known: {', '.join(FIGURES)})")
    return {k: parse(v, f"{where}.{k}") for k, v in value.items()}, set(value)


def _tolerances(percent: dict[str, float], sizes: dict[str, int],
                named: set[str]) -> Tolerances:
    return Tolerances(**{f: Tolerance(percent.get(f), sizes.get(f),
                                      gated=True if f in named else None)
                         for f in FIGURES})


def tolerances_from_options(percent: Iterable[str], sizes: Iterable[str]) -> Tolerances:
    """Parse ``--max-increase [FIGURE=]PCT`` and ``--max-increase-bytes [FIGURE=]SIZE``.

    A value without ``FIGURE=`` applies to every figure not given its own.

    Raises:
        MemscopeError: an unknown figure, or a malformed percentage or size.
    """
    named: set[str] = set()
    return _tolerances(_options(percent, _percent, "--max-increase", named),
                       _options(sizes, _size, "--max-increase-bytes", named), named)


def with_options(config: Config, percent: Iterable[str], sizes: Iterable[str]) -> Config:
    """``config`` with the command line's tolerances over its own, figure by figure."""
    cli = tolerances_from_options(percent, sizes)
    return replace(config, tolerances=cli.over(config.tolerances))


def _options(values: Iterable[str], parse: Callable[[Any, str], Any], option: str,
             named: set[str]) -> dict[str, Any]:
    """The values by figure; the figures given by name are added to ``named``."""
    general: dict[str, Any] = {}
    specific: dict[str, Any] = {}
    for value in values:
        figure, sep, text = value.partition("=")
        if not sep:
            general = dict.fromkeys(FIGURES, parse(value, option))
            continue
        if figure not in FIGURES:
            raise MemscopeError(f"{option} {value}: unknown figure {figure!r} "
                                f"(known: {', '.join(FIGURES)})")
        specific[figure] = parse(text, f"{option} {value}")
        named.add(figure)
    return {**general, **specific}
