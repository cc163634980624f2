"""XLA's compilers for accelerators this machine lacks, kept apart from JAX.

``--target`` compiles with XLA:TPU (libtpu) or XLA:GPU (JAX's CUDA PJRT plugin,
with ptxas). Installed into the Python environment (JAX's own ``tpu`` and
``cuda13-local`` extras), JAX loads them into every process that uses it: on a
machine without the accelerator, every plain JAX program then prints libtpu's
errors about TPU environment variables, or the CUDA plugin's tracebacks, and
starts slower. So memscope keeps them in a folder of its own, where JAX never
looks, and loads them by path into its own process only, when a ``--target``
asks (:func:`load_compiler`).

The versions are JAX's own pins: its ``tpu`` extra's libtpu, its
``cuda13-local`` extra's ``jax-cuda13-plugin`` (whose ``jax-cuda13-pjrt`` holds
the compiler) with NVIDIA's ``nvidia-cuda-nvcc`` for ptxas (XLA finds it beside
the plugin). The first ``--target`` of a kind installs them with pip
(``pip install --target``), once per JAX version; :func:`install` says where.

Where: ``$MEMSCOPE_COMPILERS_DIR``, else ``$XDG_CACHE_HOME/memscope-compilers``,
else ``~/.cache/memscope-compilers``. Where the compiler is installed in the
environment after all (JAX's extras), that one is used, as JAX loads it anyway.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from memscope import _compat
from memscope.compiled.cache import user_cache
from memscope.compiled.targets.base import TargetSetupError, stderr_to_nowhere

#: the file an install writes last: a folder without it is a broken install
_COMPLETE = ".memscope-complete"


@dataclass(frozen=True)
class Compiler:
    """One of XLA's compilers, as memscope keeps it."""

    #: ``tpu`` or ``cuda``
    kind: str
    #: what pip installs, pinned to this JAX's own extras
    requirements: tuple[str, ...]
    #: its folder under :func:`root`
    folder: Path
    #: the PJRT library in the folder
    library: Path
    #: pip's options: ``--no-deps`` where the requirements name everything
    no_deps: bool

    @property
    def title(self) -> str:
        """What it is called in memscope's lines."""
        return "XLA:TPU's compiler (libtpu)" if self.kind == "tpu" else (
            "XLA:GPU's compiler (JAX's CUDA plugin, with ptxas)")

    @property
    def installed(self) -> bool:
        return (self.folder / _COMPLETE).is_file() and self.library.is_file()


def root() -> Path:
    """Where memscope keeps the compilers (see the module's doc)."""
    where = os.environ.get("MEMSCOPE_COMPILERS_DIR")
    return Path(where) if where else user_cache("memscope-compilers")


def _pin(extra: str, package: str) -> str:
    """This JAX's requirement of ``package`` under its ``extra``, as pip reads
    it (``libtpu==0.0.42.*``; ``<=V,>=V`` made ``==V``)."""
    for line in importlib.metadata.requires("jax") or ():
        spec, _, marker = line.partition(";")
        if f'extra == "{extra}"' not in marker:
            continue
        found = re.fullmatch(rf"\s*{re.escape(package)}(\[[^\]]*\])?\s*(.*?)\s*", spec)
        if found is None:
            continue
        bounds = found.group(2).replace(" ", "")
        same = re.fullmatch(r"<=([^,]+),>=\1|>=([^,]+),<=\2", bounds)
        if same:
            bounds = f"=={same.group(1) or same.group(2)}"
        return f"{package}{bounds}"
    raise TargetSetupError(f"this JAX ({_compat.JAX_VERSION}) names no {package} for "
                           f"its {extra!r} extra: memscope cannot tell which to use")


def _folder_name(requirement: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", requirement.replace("==", "-")).strip("-.")


#: each kind's package, and the extra of JAX's that pins its version
PACKAGES = {"tpu": ("libtpu", "tpu"), "cuda": ("jax-cuda13-plugin", "cuda13-local")}


def kept_compiler(kind: str) -> Compiler:
    """The compiler of ``kind`` (``tpu``, ``cuda``) this JAX pins."""
    if kind not in PACKAGES:
        raise ValueError(f"no compiler of kind {kind!r}")
    package, extra = PACKAGES[kind]
    pin = _pin(extra, package)
    folder = root() / _folder_name(pin)
    if kind == "tpu":
        return Compiler("tpu", (pin,), folder, folder / "libtpu" / "libtpu.so", True)
    return Compiler("cuda", (pin, "nvidia-cuda-nvcc>=13"), folder,
                    folder / "jax_plugins" / "xla_cuda13" / "xla_cuda_plugin.so", False)


def install_command(c: Compiler, target: Path, *, quiet: bool = True) -> list[str]:
    """The pip command that installs ``c`` into ``target``: this Python's pip,
    else uv's (an environment uv made has no pip); ``quiet``, as memscope runs
    it, else as a person would type it."""
    options = ["--target", str(target), *(["--no-deps"] if c.no_deps else []),
               *c.requirements]
    if importlib.util.find_spec("pip") is not None:
        hush = ["--quiet", "--disable-pip-version-check"] if quiet else []
        return [sys.executable, "-m", "pip", "install", *hush, *options]
    uv = shutil.which("uv")
    if uv is not None:
        return [uv, "pip", "install", *(["--quiet"] if quiet else []),
                "--python", sys.executable, *options]
    return ["pip", "install", *options]


def version(kind: str) -> str | None:
    """The version of the compiler of ``kind`` memscope would use (libtpu's,
    ``jax-cuda13-plugin``'s): the one in the environment where JAX finds one,
    else memscope's own where it is installed; ``None``: neither."""
    package = PACKAGES[kind][0]
    if in_environment(kind):
        try:
            return importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            return None
    c = kept_compiler(kind)
    if not c.installed:
        return None
    for found in importlib.metadata.distributions(path=[str(c.folder)]):
        if found.metadata["Name"].lower().replace("_", "-") == package:
            return found.version
    return None


def install(c: Compiler) -> Path:
    """Install ``c`` into its folder, once (a line on stderr says so), and
    return its library. Two processes installing at once each install into a
    folder of their own; the first to finish is kept.

    Raises:
        TargetSetupError: pip failed (no network, no package for this machine).
    """
    if c.installed:
        return c.library
    c.folder.parent.mkdir(parents=True, exist_ok=True)
    print(f"memscope: installing {c.title} for JAX {_compat.JAX_VERSION} "
          f"({', '.join(c.requirements)}) into {c.folder}, once",
          file=sys.stderr, flush=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{c.folder.name}-", dir=c.folder.parent))
    command = install_command(c, staging)
    try:
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            last = (done.stderr.strip() or done.stdout.strip()).splitlines()[-1:]
            by_hand = install_command(c, c.folder, quiet=False)
            raise TargetSetupError(
                f"memscope could not install {c.title} "
                f"({' '.join(last) or f'exit {done.returncode}'}); to install it by "
                f"hand: {' '.join(by_hand[:-len(c.requirements)])} "
                + " ".join(f'"{r}"' for r in c.requirements)
                + f" && touch {c.folder / _COMPLETE}")
        (staging / _COMPLETE).write_text(" ".join(c.requirements) + "\n")
        try:
            staging.rename(c.folder)
        except OSError:  # another process installed it first
            if not c.installed:
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if not c.installed:
        raise TargetSetupError(f"{c.title} was installed into {c.folder}, but "
                               f"{c.library} is not there")
    return c.library


def load_compiler(kind: str) -> None:
    """Load the compiler of ``kind`` into this process for ``--target``: the one
    JAX found in the environment where it found one, else memscope's own
    (installed first where it is not yet).

    Raises:
        TargetSetupError: it could not be installed or loaded.
    """
    if _compat.targets.pjrt_plugin_loaded(kind) or in_environment(kind):
        return
    library = install(kept_compiler(kind))
    if kind == "tpu":
        # libtpu locks /tmp/libtpu_lockfile for the one process that may drive
        # TPUs; compile-only devices drive none (see memscope.compiled.targets.tpu)
        os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    try:
        with stderr_to_nowhere():  # its warnings about the devices this machine lacks
            if kind == "cuda":
                _compat.targets.load_cuda_plugin(str(library))
            else:
                _compat.targets.load_tpu_plugin(str(library))
    except Exception as e:
        raise TargetSetupError(f"{kept_compiler(kind).title} at {library} could not be "
                               f"loaded ({type(e).__name__}: {e})") from None


#: the modules JAX loads each compiler from where it is installed beside JAX,
#: newest first (the CUDA plugins' packages install ``jax_plugins.xla_cudaNN``)
IN_ENVIRONMENT = {"tpu": ("libtpu",), "cuda": ("jax_plugins.xla_cuda13", "jax_plugins.xla_cuda12")}


def in_environment(kind: str) -> bool:
    """Whether JAX finds the compiler of ``kind`` in the Python environment (JAX's
    own ``tpu`` or ``cuda13-local`` extra installed): JAX then loads it itself."""
    for name in IN_ENVIRONMENT[kind]:
        try:
            if importlib.util.find_spec(name) is not None:
                return True
        except ModuleNotFoundError:
            continue
    return False


def own_ptxas() -> str | None:
    """The ptxas memscope's own CUDA compiler comes with, where it is installed."""
    try:
        c = kept_compiler("cuda")
    except TargetSetupError:
        return None
    for folder in ("cu13", "cuda_nvcc"):
        path = c.folder / "nvidia" / folder / "bin" / "ptxas"
        if c.installed and path.is_file():
            return str(path)
    return None
