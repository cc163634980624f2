"""The JAX version policy: a supported series runs, a newer one runs with its
figures said to be unverified, an older one is refused in one line; a private
JAX module or attribute that is missing is said, never a crash of the program;
and a compiled program that cannot be read fails loudly (never an empty report
with exit 0).

The installed JAX is one of the supported series (CI runs this suite on each);
the other cases are exercised by giving memscope another version string, or a
stand-in for a private module, the things another installation changes for it.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import inspect
import json
import logging
import os
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import jax
import pytest
from click.testing import CliRunner, Result

from memscope import _compat, _versions
from memscope.capturing import capture, recorder
from memscope.cli import cli
from memscope.compiled import read as compiled_read
from memscope.errors import EXIT_UNREADABLE, EXIT_USAGE, MemscopeError
from memscope.variants import jaxpr_facts
from memscope.version import DISTRIBUTION

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_programs"
NEWER = "JAX 0.13.0 is newer than the series memscope is verified on (0.7 to 0.12)"


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), prog_name="memscope", catch_exceptions=False)


@pytest.fixture(autouse=True)
def unsaid(monkeypatch):
    """Each test says the unverified-JAX line afresh (once per process otherwise)."""
    monkeypatch.setattr(_versions, "_unverified_said", [])


def pretend(monkeypatch, jax_version: str) -> None:
    """This process's JAX reads as ``jax_version`` to memscope's version rules (they
    read the installed distributions' metadata, before JAX is imported)."""
    real = _versions.installed
    monkeypatch.setattr(_versions, "installed",
                        lambda name: jax_version if name == "jax" else real(name))


def test_installed_jax_is_a_verified_series():
    assert _compat.support_problem() is None
    assert _compat.unverified_line() is None, (
        f"JAX {jax.__version__} is newer than SUPPORTED_SERIES: once this suite passes "
        "on it, add its series there and to docs/versions.md")
    assert _compat.series(jax.__version__) in _compat.SUPPORTED_SERIES


def _jax_requirements(requires: list[str]) -> list[str]:
    return [r for r in requires if re.match(r"jax(lib)?\b(?!-|\[)", r)]


def test_requirements_have_no_upper_bound_on_jax():
    """Installing memscope never moves a newer JAX: ``jax>=0.7`` and nothing above,
    in pyproject.toml and, where it is this checkout that is installed, in the
    installed metadata."""
    low = _compat.SUPPORTED_SERIES[0]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert _jax_requirements(project["dependencies"]) == [
        f"jax>={low[0]}.{low[1]}", f"jaxlib>={low[0]}.{low[1]}"]
    extras = [r for rs in project["optional-dependencies"].values() for r in rs]
    assert not [r for r in extras if r.startswith("jax") and "<" in r]
    # The installed one: a checkout's own *.egg-info, on sys.path first when
    # pytest runs from it, has no direct_url.json (PEP 610); pip's dist-info has.
    by_pip = [d for d in importlib.metadata.distributions(name=DISTRIBUTION)
              if d.read_text("direct_url.json")]
    if not by_pip:
        pytest.skip(f"{DISTRIBUTION} is not installed here by an installer (no direct_url.json)")
    dist = by_pip[0]
    origin = json.loads(dist.read_text("direct_url.json") or "{}").get("url", "")
    if origin.removeprefix("file://") != str(ROOT):
        pytest.skip(f"the installed memscope is not this checkout ({origin})")
    installed = _jax_requirements(dist.requires or [])
    assert installed and not [r for r in installed if "<" in r], installed


@pytest.mark.parametrize(("jax_version", "jaxlib_version", "refused", "newer"), [
    ("0.7.0", "0.7.0", None, None), ("0.8.3", "0.8.3", None, None),
    ("0.9.2", "0.9.2", None, None), ("0.10.2", "0.10.2", None, None),
    ("0.10.0.dev20260101", "0.10.0", None, None),
    ("0.11.2", "0.11.2", None, None), ("0.12.0.1", "0.12.0.1", None, None),
    ("0.13.0", "0.13.0", None, "JAX 0.13.0"), ("0.14.1", "0.14.1", None, "JAX 0.14.1"),
    ("0.13.0.dev20261201", "0.12.0.1", None, "JAX 0.13.0.dev20261201"),
    ("0.12.0.1", "0.13.0", None, "jaxlib 0.13.0"), ("1.0.0", "1.0.0", None, "JAX 1.0.0"),
    ("0.6.2", "0.6.2", "JAX 0.6.2", None), ("0.4.38", "0.4.38", "JAX 0.4.38", None),
    ("0.7.2", "0.6.2", "jaxlib 0.6.2", None), ("0.11.0", "0.6.2", "jaxlib 0.6.2", None),
    ("unknown", "0.7.2", "JAX unknown", None),
])
def test_version_policy(jax_version, jaxlib_version, refused, newer, monkeypatch):
    monkeypatch.delenv(_compat.ALLOW_UNSUPPORTED_ENV, raising=False)
    problem = _compat.support_problem(jax_version, jaxlib_version)
    line = _compat.unverified_line(jax_version, jaxlib_version)
    note = _compat.unverified_note(jax_version, jaxlib_version)
    if refused is not None:
        assert problem is not None and "\n" not in problem
        assert problem.startswith(f"{refused} is not supported: ")
        assert "0.7 and later (verified on 0.7 to 0.12)" in problem
        assert "was not changed" in problem
        assert line is None  # not allowed: refused, not warned
    else:
        assert problem is None
    if newer is not None:
        assert line == (f"{newer} is newer than the series memscope is verified on (0.7 to "
                        "0.12); its figures are unverified: report differences to memscope's "
                        "issue tracker")
        assert note == (f"{newer} is newer than the series memscope is verified on (0.7 to "
                        "0.12): the figures are unverified")
    elif refused is None:
        assert line is None and note is None


def test_an_older_jax_allowed_is_warned_of(monkeypatch):
    monkeypatch.setenv(_compat.ALLOW_UNSUPPORTED_ENV, "1")
    assert _compat.unverified_line("0.6.2", "0.6.2") == (
        "JAX 0.6.2 is not supported; running anyway, figures unverified")
    assert _compat.unverified_note("0.6.2", "0.6.2") == (
        f"JAX 0.6.2 is not supported: the figures are unverified "
        f"({_compat.ALLOW_UNSUPPORTED_ENV} is set)")


def _writes_marker(tmp_path: Path) -> tuple[Path, Path]:
    marker = tmp_path / "ran"
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(f"""
        import jax, jax.numpy as jnp
        open({str(marker)!r}, "w").close()
        print(jax.jit(lambda x: x * 2)(jnp.ones(3)))
    """), encoding="utf-8")
    return script, marker


@pytest.mark.parametrize("command", [["run"], ["check", "--update-baseline", "--baseline",
                                               "b.json"]])
def test_an_older_jax_is_refused_in_one_line_before_the_target_runs(
        tmp_path, monkeypatch, command):
    pretend(monkeypatch, "0.6.2")
    monkeypatch.delenv(_compat.ALLOW_UNSUPPORTED_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    script, marker = _writes_marker(tmp_path)
    result = invoke(*command, str(script))
    assert result.exit_code == EXIT_USAGE
    assert result.stderr.splitlines() == [
        f"memscope: error: {_compat.support_problem()}"]
    assert result.stdout == ""
    assert not marker.exists()  # the target never started


def test_an_older_jax_runs_when_allowed_and_the_report_says_so(tmp_path, monkeypatch):
    pretend(monkeypatch, "0.6.2")
    monkeypatch.setenv(_compat.ALLOW_UNSUPPORTED_ENV, "1")
    script, marker = _writes_marker(tmp_path)
    result = invoke("run", "-q", "-o", str(tmp_path / "r.json"), str(script))
    assert result.exit_code == 0, result.stderr
    assert marker.exists()
    assert result.stderr.splitlines() == [
        "memscope: warning: JAX 0.6.2 is not supported; running anyway, figures unverified"]
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["notes"] == [f"JAX 0.6.2 is not supported: the figures are unverified "
                               f"({_compat.ALLOW_UNSUPPORTED_ENV} is set)"]
    assert len(report["functions"]) == 1


@pytest.mark.parametrize("command", [["run", "-q", "-o", "r.json"],
                                     ["check", "--update-baseline", "--baseline", "r.json"]])
def test_a_newer_jax_runs_with_one_line_and_the_report_says_so(tmp_path, monkeypatch,
                                                                command):
    pretend(monkeypatch, "0.13.0")
    monkeypatch.delenv(_compat.ALLOW_UNSUPPORTED_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    script, marker = _writes_marker(tmp_path)
    result = invoke(*command, str(script))
    assert result.exit_code == 0, result.stderr
    assert marker.exists()
    warning = f"memscope: warning: {NEWER}; its figures are unverified: report differences " \
              "to memscope's issue tracker"
    assert result.stderr.splitlines()[0] == warning
    assert result.stderr.count("memscope: warning:") == 1  # said by the CLI, not logged again
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["notes"] == [f"{NEWER}: the figures are unverified"]
    assert len(report["functions"]) == 1


def test_capture_on_a_newer_jax_logs_once_and_raises_no_python_warning(monkeypatch, caplog):
    """The project's own filterwarnings = error is in force here: a Python warning
    from capture() would fail this test, as it would a user's suite."""
    pretend(monkeypatch, "0.13.0")
    with caplog.at_level(logging.WARNING, logger="memscope"):
        for _ in range(2):
            with capture() as session:
                jax.jit(lambda x: x * 2)(jax.numpy.ones(3))
            assert len(session.entries) == 1
    assert [r.getMessage() for r in caplog.records if r.name == "memscope"] == [
        f"memscope: warning: {NEWER}; its figures are unverified: report differences to "
        "memscope's issue tracker"]
    assert recorder.unverified_jax_said() is not None


def test_capture_on_an_older_jax_raises_the_one_line(monkeypatch):
    pretend(monkeypatch, "0.6.2")
    monkeypatch.delenv(_compat.ALLOW_UNSUPPORTED_ENV, raising=False)
    with pytest.raises(MemscopeError, match=r"^JAX 0\.6\.2 is not supported: "), capture():
        pytest.fail("the block ran")


# ----------------------------------------------- private JAX that moved --


def test_a_private_module_that_does_not_import_is_said_where_used():
    missing = _compat._jax._private("jax._src", "no_such_module_in_any_jax")
    assert getattr(missing, "make_jit", None) is None  # getattr's default still works
    with pytest.raises(_compat.JaxInternalMissing) as e:
        missing.make_jit  # noqa: B018
    assert str(e.value).startswith(
        "memscope cannot read jax._src.no_such_module_in_any_jax.make_jit on JAX "
        f"{jax.__version__}: jax._src.no_such_module_in_any_jax did not import (")
    assert isinstance(e.value, AttributeError)
    assert _compat._jax._private("jax._src.lib.mlir", "ir") is _compat._jax.ir  # an attribute, not a file


def test_compat_imports_where_a_private_module_moved(tmp_path):
    """A JAX without ``jax._src.state.types`` (memscope reads Refs' types there):
    memscope still imports, and says what is missing where it is used."""
    code = textwrap.dedent("""
        import sys, jax, jax._src.state
        sys.modules["jax._src.state.types"] = None  # importing it now fails
        del jax._src.state.types
        from memscope import _compat, _versions
        print(_compat.hooks.capture_problem())
        try:
            _compat.values.is_ref_aval(None)
        except AttributeError as e:
            print(type(e).__name__, e)
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "None",
        f"JaxInternalMissing memscope cannot read jax._src.state.types.AbstractRef on JAX "
        f"{jax.__version__}: jax._src.state.types did not import (ModuleNotFoundError: import of "
        "jax._src.state.types halted; None in sys.modules)"]


@pytest.fixture
def no_pjit(monkeypatch):
    """A JAX that moved ``jax._src.pjit``, where memscope hooks ``jax.jit``."""
    missing = _compat._jax._Missing("jax._src.pjit",
                                    ModuleNotFoundError("No module named 'jax._src.pjit'"))
    monkeypatch.setattr(_compat._jax, "pjit", missing)
    monkeypatch.setattr(_compat.hooks, "_NEEDED_TO_CAPTURE", tuple(
        (name, missing if name == "jax._src.pjit" else module, attrs)
        for name, module, attrs in _compat.hooks._NEEDED_TO_CAPTURE))


def test_capture_refuses_in_one_line_where_what_it_hooks_is_missing(tmp_path, no_pjit):
    line = (f"memscope cannot capture on JAX {jax.__version__}: this JAX has no "
            "jax._src.pjit.make_jit, which memscope reads to see each jitted call (report it "
            "to memscope's issue tracker)")
    assert _compat.hooks.capture_problem() == line
    with pytest.raises(MemscopeError) as e, capture():
        pytest.fail("the block ran")
    assert str(e.value) == line
    # memscope run knows it only once the program imports JAX: the program runs on,
    # unmeasured and as under python, and memscope says why at the end, exit 2.
    script, marker = _writes_marker(tmp_path)
    result = invoke("run", "-o", str(tmp_path / "r.json"), str(script))
    assert result.exit_code == EXIT_USAGE
    assert result.stdout.startswith("[2. 2. 2.]\n")  # the program's own output
    assert result.stderr.splitlines()[-1] == (
        f"memscope: error: {line}; the program ran unmeasured")
    assert marker.exists()
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["functions"] == [] and report["run"]["exit_code"] == 0
    assert report["notes"] == [f"{line}; the program ran unmeasured"]


def test_a_private_module_missing_where_programs_are_read_is_that_functions_error(
        tmp_path, monkeypatch):
    """Reading the lowered module needs JAX's MLIR bindings; without them every
    function says so, and the program runs on."""
    monkeypatch.setattr(_compat._jax, "ir", _compat._jax._Missing(
        "jax._src.lib.mlir.ir", ImportError("moved")))
    script, marker = _writes_marker(tmp_path)
    result = invoke("run", "-q", "-o", str(tmp_path / "r.json"), str(script))
    assert result.exit_code == 0, result.stderr
    assert marker.exists()
    (fn,) = json.loads((tmp_path / "r.json").read_text())["functions"]
    assert fn["memory"] is None
    assert fn["error"].startswith(
        "could not read the compiled program: JaxInternalMissing: memscope cannot read "
        "jax._src.lib.mlir.ir.")
    assert f"on JAX {jax.__version__}: jax._src.lib.mlir.ir did not import " \
           "(ImportError: moved)" in fn["error"]
    assert result.stderr.startswith("memscope: could not read the compiled program of 1 "
                                    "function on JAX ")


# ------------------------------------------------ checkpoint policy names --


def test_policies_are_named_by_the_function_that_made_them():
    policies = jax.checkpoint_policies
    assert jaxpr_facts.policy_name(None) == "none"
    assert jaxpr_facts.policy_name(policies.dots_saveable) == "dots_saveable"
    assert jaxpr_facts.policy_name(policies.save_only_these_names("h")) == "save_only_these_names"
    assert jaxpr_facts.policy_name(policies.save_any_names_but_these("h")) == \
        "save_any_names_but_these"
    assert jaxpr_facts.policy_name(policies.save_and_offload_only_these_names(
        names_which_can_be_saved=[], names_which_can_be_offloaded=["h"],
        offload_src="device", offload_dst="pinned_host")) == "save_and_offload_only_these_names"
    assert jaxpr_facts.policy_name(policies.offload_dot_with_no_batch_dims(
        "device", "pinned_host")) == "offload_dot_with_no_batch_dims"

    def mine(prim, *_, **__):
        return False

    assert jaxpr_facts.policy_name(mine) == "mine"


def test_class_valued_offload_policies_of_jax_0_11_are_named_by_their_function():
    """JAX 0.11 makes ``save_and_offload_only_these_names(...)`` and
    ``offload_dot_with_no_batch_dims(...)`` return frozen dataclasses (read in its
    source, not run): stand-ins of the same names and fields, as JAX 0.11
    defines them."""
    @dataclasses.dataclass(frozen=True)
    class SaveAndOffloadOnlyTheseNames:
        names_which_can_be_saved: frozenset[str]
        names_which_can_be_offloaded: frozenset[str]
        offload_src: str
        offload_dst: str

        def __call__(self, prim, *_, **params):
            return False

    @dataclasses.dataclass(frozen=True)
    class OffloadDotWithNoBatchDims:
        offload_src: str
        offload_dst: str

        def __call__(self, prim, *_, **params):
            return False

    @dataclasses.dataclass(frozen=True)
    class MyPolicy:
        def __call__(self, prim, *_, **params):
            return False

    names = jaxpr_facts.policy_name(SaveAndOffloadOnlyTheseNames(
        frozenset(), frozenset({"h"}), "device", "pinned_host"))
    assert names == "save_and_offload_only_these_names"
    assert jaxpr_facts.policy_name(OffloadDotWithNoBatchDims("device", "pinned_host")) == \
        "offload_dot_with_no_batch_dims"
    assert jaxpr_facts.policy_name(MyPolicy()) == "MyPolicy"


@pytest.mark.skipif(not _compat._jax._TRACED_META_TYS, reason="JAX 0.7's Traced binds the call")
def test_a_donation_variant_keeps_the_traced_functions_source_info():
    """JAX's main branch after 0.11.0 adds ``fun_sourceinfo`` to ``Traced``'s
    constructor (read, not run): a subclass of this JAX's ``Traced`` with that
    constructor stands in for it."""
    traced = jax.jit(lambda x: x * 2).trace(jax.numpy.ones(3))
    base = type(traced)
    if "fun_sourceinfo" in inspect.signature(base.__init__).parameters:
        LaterTraced = base  # this JAX's own (0.11.2 has it: seen on a GPU machine)
    else:
        class LaterTraced(base):  # type: ignore[no-redef]
            __slots__ = ("_fun_sourceinfo",)

            def __init__(self, meta_tys_flat, params, in_tree, out_tree, consts,
                         fun_sourceinfo):
                super().__init__(meta_tys_flat, params, in_tree, out_tree, consts)
                self._fun_sourceinfo = fun_sourceinfo

    later = LaterTraced(traced._meta_tys_flat, traced._params, traced._in_tree,
                        traced.out_tree, traced._consts, "<lambda> at train.py:1")
    variant = _compat.stages.with_donation(later, (True,))
    assert type(variant) is LaterTraced
    assert variant._fun_sourceinfo == "<lambda> at train.py:1"
    assert variant._params["donated_invars"][-1] is True
    assert variant._params["jaxpr"] is not traced._params["jaxpr"]


@pytest.fixture
def unreadable(monkeypatch):
    """A JAX whose lowered module memscope cannot read, as jaxlib 0.7 and 0.8
    were for memscope's OpAttributeMap.get (the failure the issue reported)."""
    def broken(lowered):
        raise AttributeError("'OpAttributeMap' object has no attribute 'get'")
    monkeypatch.setattr(compiled_read, "main_signature", broken)


def test_an_unreadable_program_is_said_loudly_and_fails_strict(tmp_path, unreadable):
    script = SAMPLES / "donated.py"
    plain = invoke("run", "-o", str(tmp_path / "r.json"), str(script), "--steps", "1")
    line = ("memscope: could not read the compiled program of 1 function on JAX "
            f"{jax.__version__}: train_step (could not read the compiled program: "
            "AttributeError: 'OpAttributeMap' object has no attribute 'get'); their figures "
            "are missing from the report")
    assert plain.exit_code == 0  # the target's own exit code, as without --strict
    assert line in plain.stderr.splitlines()
    assert "could not read the compiled program: AttributeError" in plain.stdout
    report = json.loads((tmp_path / "r.json").read_text())
    (fn,) = report["functions"]
    assert fn["memory"] is None and "OpAttributeMap" in fn["error"]

    strict = invoke("run", "-q", "--strict", str(script), "--steps", "1")
    assert strict.exit_code == EXIT_UNREADABLE
    assert line in strict.stderr.splitlines()

    check = invoke("check", "--report", str(tmp_path / "r.json"), "--baseline",
                   str(tmp_path / "r.json"))
    assert check.exit_code == EXIT_UNREADABLE
    assert check.stderr.splitlines() == [f"{line}; nothing was checked"]


def test_a_failing_target_keeps_its_exit_code_under_strict(tmp_path, unreadable):
    script = tmp_path / "fails.py"
    script.write_text("import jax, jax.numpy as jnp, sys\n"
                      "jax.jit(lambda x: x + 1)(jnp.ones(2))\nsys.exit(3)\n")
    result = invoke("run", "-q", "--strict", str(script))
    assert result.exit_code == 3
