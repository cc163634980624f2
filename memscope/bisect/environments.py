"""One environment per release, built with uv and kept for the next bisect.

An environment holds the release asked for (``jax`` and ``jaxlib`` at one
version, or a framework at one version beside the user's JAX), the program's
other packages at the user's versions where they resolve beside it (where they
do not, the pins of those that require JAX are let go first, then all: which
changed is said), and memscope itself, linked from the running installation
(a ``.pth`` file naming a folder that holds only a link to it), so the
figures are this memscope's on every release.

Kept in ``$MEMSCOPE_ENVIRONMENTS_DIR``, else ``memscope-environments`` in the
user's cache folder, one folder per request (what is pinned, and the user's
versions), marked complete by ``memscope-environment.json``: a run again finds
it there and builds nothing.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from memscope.bisect.packages import Carried, normal_name
from memscope.bisect.pythons import Python, in_preference
from memscope.compiled.cache import user_cache
from memscope.errors import MemscopeError

_MARK = "memscope-environment.json"
#: JAX's own requirements: their pins are let go with the frameworks'
_JAX_NEEDS = frozenset({"numpy", "ml-dtypes", "scipy", "opt-einsum"})


class NotInstalled(MemscopeError):
    """A release no Python here can install beside the program's packages (one line)."""


@dataclass(frozen=True)
class ReleaseEnvironment:
    """A built environment: its folder, its Python, what it has installed, and
    the user's packages it holds at another version than the user's
    (``changed``: name, the user's version, its version or ``None`` where it
    could not be installed)."""

    path: Path
    python: str
    python_version: str
    installed: dict[str, str]
    changed: tuple[tuple[str, str, str | None], ...] = ()
    reused: bool = False
    seconds: float = 0.0
    log: tuple[str, ...] = field(default=(), compare=False)

    @property
    def executable(self) -> str:
        return str(self.path / "bin" / "python")


def folder() -> Path:
    """Where environments are kept (see the module's doc)."""
    where = os.environ.get("MEMSCOPE_ENVIRONMENTS_DIR")
    return Path(where) if where else user_cache("memscope-environments")


def uv() -> list[str]:
    """The command that runs uv.

    Raises:
        MemscopeError: uv is not installed.
    """
    found = shutil.which("uv")
    if found:
        return [found]
    try:
        from uv import find_uv_bin  # the uv package, a dependency of memscope
        return [find_uv_bin()]
    except Exception as e:
        raise MemscopeError("memscope bisect builds its environments with uv, which is not "
                            "installed here: pip install uv") from e


def _uv_env() -> dict[str, str]:
    env = dict(os.environ)
    env["UV_PYTHON_DOWNLOADS"] = "never"  # this machine's Pythons; none downloaded
    env.pop("VIRTUAL_ENV", None)
    # uv reads pip's index setting only when told (pip.conf is pip's own)
    if env.get("PIP_INDEX_URL") and not (env.get("UV_DEFAULT_INDEX") or env.get("UV_INDEX_URL")):
        env["UV_DEFAULT_INDEX"] = env["PIP_INDEX_URL"]
    return env


def _key(pins: Sequence[tuple[str, str]], carried: Carried) -> str:
    text = json.dumps({"pins": sorted(pins), "carried": carried.versions,
                       "local": carried.local}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _name(pins: Sequence[tuple[str, str]]) -> str:
    return "-".join(f"{n}-{v}" for n, v in pins if n != "jaxlib")


def _link(env: Path, python_series: str) -> None:
    """memscope from the running installation, in ``env``: a ``.pth`` naming a
    folder that holds only a link to this memscope's package."""
    package = Path(__file__).resolve().parent.parent
    holder = folder() / "memscope-link" / hashlib.sha256(str(package).encode()).hexdigest()[:12]
    holder.mkdir(parents=True, exist_ok=True)
    link = holder / "memscope"
    if not (link.is_symlink() and link.resolve() == package):
        tmp = holder / f".memscope-{os.getpid()}"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(package, target_is_directory=True)
        os.replace(tmp, link)
    site = env / "lib" / f"python{python_series}" / "site-packages"
    (site / "_memscope_bisect.pth").write_text(f"{holder}\n")


def _run(command: list[str], log: list[str]) -> tuple[bool, str]:
    done = subprocess.run(command, capture_output=True, text=True, env=_uv_env(), check=False)
    log.append(" ".join(command))
    log.append(done.stdout + done.stderr)
    lines = [ln.strip() for ln in (done.stderr or done.stdout).splitlines() if ln.strip()]
    return done.returncode == 0, _why(lines)


def _why(lines: list[str]) -> str:
    """The line of uv's output that says why (its first ``because``, else the last)."""
    for line in lines:
        if "because" in line.lower():
            # uv's tree drawing: a cross, a corner, a line and an arrow
            return line.lstrip("\u00d7\u2570\u2500\u25b6 ").strip().removeprefix("cause: ")
    return lines[-1] if lines else "uv failed"


def _freeze(python: str) -> dict[str, str]:
    done = subprocess.run([*uv(), "pip", "list", "-p", python, "--format", "json"],
                          capture_output=True, text=True, env=_uv_env(), check=False)
    try:
        return {normal_name(p["name"]): p["version"] for p in json.loads(done.stdout)}
    except (ValueError, KeyError, TypeError):
        return {}


def _tiers(pins: Sequence[tuple[str, str]], carried: Carried) -> list[list[str]]:
    """The requirement lists tried, closest to the user's first."""
    fixed = [f"{n}=={v}" for n, v in pins]
    loose = carried.need_jax | _JAX_NEEDS | {n for n, _ in pins}
    return [fixed + [f"{n}=={v}" for n, v in carried.versions.items()],
            fixed + [f"{n}=={v}" if n not in loose else n for n, v in carried.versions.items()],
            fixed + list(carried.versions)]


def ensure(pins: Sequence[tuple[str, str]], carried: Carried, *,
           progress: Callable[[str], None] = lambda _: None,
           pythons: Sequence[Python] | None = None) -> ReleaseEnvironment:
    """The environment with ``pins`` (``[("jax", "0.9.1"), ("jaxlib", "0.9.1")]``)
    and the ``carried`` packages, built now or found from an earlier bisect.

    Raises:
        NotInstalled: no Python here installs the release with the program's
            packages; the line says uv's reason.
    """
    path = folder() / f"{_name(pins)}-{_key(pins, carried)}"
    path.parent.mkdir(parents=True, exist_ok=True)
    # One bisect at a time builds (or reads) an environment: another waits.
    with open(path.parent / f".{path.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _ensure(path, pins, carried, progress, pythons)


def _ensure(path: Path, pins: Sequence[tuple[str, str]], carried: Carried,
            progress: Callable[[str], None], pythons: Sequence[Python] | None
            ) -> ReleaseEnvironment:
    import time

    mark = path / _MARK
    if mark.is_file():
        try:
            facts = json.loads(mark.read_text())
            found = ReleaseEnvironment(path, str(path / "bin" / "python"), facts["python_version"],
                                facts["installed"], tuple(tuple(c) for c in facts["changed"]),
                                reused=True)
            if os.path.exists(found.executable):
                _link(path, ".".join(found.python_version.split(".")[:2]))
                return found
        except (OSError, ValueError, KeyError, TypeError):
            pass
    start = time.monotonic()
    log: list[str] = []
    why = "no Python 3.11 or later found on this machine"
    wanted = f"{pins[0][0]} {pins[0][1]}" + "".join(
        f" (beside {n} {v})" for n, v in pins[1:] if n != "jaxlib")
    for python in pythons if pythons is not None else in_preference():
        progress(f"building an environment for {wanted} with Python {python.series}")
        mark.unlink(missing_ok=True)
        made, why = _run([*uv(), "venv", "-q", "--clear", "-p", python.path, str(path)], log)
        if not made:
            continue
        executable = str(path / "bin" / "python")
        for requirements in _tiers(pins, carried):
            made, why = _run([*uv(), "pip", "install", "-q", "-p", executable, *requirements], log)
            if made:
                break
        if not made:
            continue
        for name, (where, editable) in carried.local.items():
            made, why = _run([*uv(), "pip", "install", "-q", "-p", executable, "--no-deps",
                              *(["-e"] if editable else []), where], log)
            if not made:
                why = f"your {name}, from {where}: {why}"
                break
        if not made:
            continue
        _link(path, python.series)
        installed = _freeze(executable)
        changed = tuple((n, v, installed.get(n)) for n, v in carried.versions.items()
                        if installed.get(n) != v)
        version = ".".join(str(x) for x in python.version)
        mark.write_text(json.dumps({"python_version": version, "installed": installed,
                                    "changed": [list(c) for c in changed],
                                    "pins": [list(p) for p in pins]}, indent=1))
        return ReleaseEnvironment(path, executable, version, installed, changed,
                           seconds=time.monotonic() - start, log=tuple(log))
    shutil.rmtree(path, ignore_errors=True)
    raise NotInstalled(f"{wanted} could not be installed: {why}")
