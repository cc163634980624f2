"""check_dists.py DIST_FOLDER SOURCE: the sdist and the wheel hold what they should.

The wheel: the memscope package, every module of it in the checkout SOURCE (git's
files), its type marker, its metadata (name, Pythons, license, entry points), and
nothing else (no tests, benchmarks, sample programs or reports). The sdist: every
file git tracks (what builds and tests memscope), and nothing that git ignores.
Prints one line per problem and exits 1 if there is any.
"""

from __future__ import annotations

import email
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

NAME = "jax-memscope"
PYTHONS = ("3.11", "3.12", "3.13")


def tracked(source: Path) -> set[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=source, check=True,
                         capture_output=True, text=True).stdout
    return {p for p in out.split("\0") if p}


def check_wheel(wheel: Path, files: set[str]) -> list[str]:
    problems = []
    names = set(zipfile.ZipFile(wheel).namelist())
    info = next((n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA")), None)
    if info is None:
        return [f"{wheel.name}: no METADATA"]
    stray = sorted(n for n in names if not n.startswith(("memscope/", info + "/")))
    problems += [f"{wheel.name} holds {n}, which is not memscope's" for n in stray]
    modules = {f for f in files if f.startswith("memscope/") and f.endswith(".py")}
    problems += [f"{wheel.name} lacks {m}" for m in sorted(modules - names)]
    if "memscope/py.typed" not in names:
        problems.append(f"{wheel.name} lacks memscope/py.typed")
    extra = sorted(n for n in names if n.startswith("memscope/") and n not in files)
    problems += [f"{wheel.name} holds {n}, which git does not track" for n in extra]
    with zipfile.ZipFile(wheel) as z:
        meta = email.message_from_bytes(z.read(f"{info}/METADATA"))
        entry = z.read(f"{info}/entry_points.txt").decode()
    problems += check_metadata(wheel.name, meta)
    for line in ("memscope = memscope.cli:main", "memscope = memscope.pytest_plugin"):
        if line not in entry:
            problems.append(f"{wheel.name}: entry_points.txt lacks '{line}'")
    return problems


def check_metadata(where: str, meta: email.message.Message) -> list[str]:
    problems = []
    expect = {"Name": NAME, "Requires-Python": ">=3.11", "License-Expression": "MIT",
              "Description-Content-Type": "text/markdown"}
    for key, value in expect.items():
        if meta.get(key) != value:
            problems.append(f"{where}: {key} is {meta.get(key)!r}, not {value!r}")
    classifiers = meta.get_all("Classifier") or []
    for v in PYTHONS:
        if f"Programming Language :: Python :: {v}" not in classifiers:
            problems.append(f"{where}: no classifier for Python {v}")
    if not meta.get("Keywords"):
        problems.append(f"{where}: no keywords")
    if "jax>=0.7" not in (meta.get_all("Requires-Dist") or []):
        problems.append(f"{where}: does not require jax>=0.7")
    if "# memscope" not in (meta.get_payload() or ""):
        problems.append(f"{where}: the long description is not the README")
    return problems


def check_sdist(sdist: Path, files: set[str]) -> list[str]:
    with tarfile.open(sdist) as tar:
        members = {m.name.split("/", 1)[1] for m in tar.getmembers()
                   if m.isfile() and "/" in m.name}
        top = tar.getmembers()[0].name.split("/")[0]
        meta = email.message_from_bytes(tar.extractfile(f"{top}/PKG-INFO").read())  # type: ignore[union-attr]
    wanted = files - {".gitignore"}
    problems = [f"{sdist.name} lacks {f}" for f in sorted(wanted - members)]
    made = {"PKG-INFO", "setup.cfg"}
    extra = sorted(m for m in members - wanted - made if ".egg-info/" not in m)
    problems += [f"{sdist.name} holds {m}, which git does not track" for m in extra]
    return problems + check_metadata(sdist.name, meta)


def main(dist: Path, source: Path) -> int:
    files = tracked(source)
    wheels, sdists = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        print(f"expected one wheel and one sdist in {dist}: {[p.name for p in dist.iterdir()]}")
        return 1
    problems = check_wheel(wheels[0], files) + check_sdist(sdists[0], files)
    for p in problems:
        print(p)
    if not problems:
        print(f"{wheels[0].name}: {len(zipfile.ZipFile(wheels[0]).namelist())} files, "
              f"{sdists[0].name}: every tracked file")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
