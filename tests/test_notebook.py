"""``%load_ext memscope`` and ``%%memscope``, executed in a real IPython kernel.

One kernel for the module (nbclient with ipykernel, this interpreter, the
checkout's memscope first on its path, JAX on the CPU); each test adds cells
to one notebook and executes them one at a time, as a user would, then reads
the outputs the kernel sent. Ground truth is computed in the kernel from JAX's
own ``memory_analysis()`` and ``is_deleted()``. The renderers' inline forms
(``repr``, ``_repr_html_``) are tested without a kernel at the end.
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from memscope.render.html import report_fragment
from memscope.render.terminal import render_function, render_report
from memscope.report import Report
from memscope.report.units import format_bytes
from tests.support.browser import needs_driven_browser
from tests.support.records import run_report

ROOT = Path(__file__).resolve().parent.parent

SETUP = """\
import jax, jax.numpy as jnp
import memscope

def loss_fn(params, batch):
    return jnp.mean((batch @ params["w"] + params["b"]) ** 2)

def step(params, batch):
    loss, grads = jax.value_and_grad(loss_fn)(params, batch)
    return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads), loss

train_step = jax.jit(step, donate_argnums=0)
params = {"w": jnp.ones((256, 128)), "b": jnp.zeros((128,))}
batch = jnp.ones((64, 256))
"""

TRAINING = """\
%%memscope
first_w = params["w"]
losses = []
for i in range(3):
    params, loss = train_step(params, batch)
    losses.append(float(loss))
loss"""


class Kernel:
    """One notebook in one running kernel; cells are appended and executed in turn."""

    def __init__(self, client: Any, notebook: Any) -> None:
        self.client, self.notebook = client, notebook
        #: the number of the cell that defined ``step`` and ``train_step``
        self.setup_at = 0

    def run(self, source: str, *, fails: bool = False) -> list[dict[str, Any]]:
        """Execute ``source`` as the next cell; its outputs. With ``fails`` the
        cell must fail (nbclient raises, as for any failing cell) and its outputs
        are returned all the same."""
        import nbformat
        from nbclient.exceptions import CellExecutionError

        cell = nbformat.v4.new_code_cell(source)
        self.notebook.cells.append(cell)
        index = len(self.notebook.cells) - 1
        if fails:
            with pytest.raises(CellExecutionError):
                self.client.execute_cell(cell, index)
        else:
            self.client.execute_cell(cell, index)
        return [dict(o) for o in cell.outputs]

    def value(self, expression: str) -> Any:
        """``expression`` evaluated in the kernel, carried back as JSON."""
        outputs = self.run(f"import json as _json\nprint(_json.dumps({expression}))")
        return json.loads(stdout(outputs))


def stdout(outputs: list[dict[str, Any]]) -> str:
    return "".join(o["text"] for o in outputs
                   if o["output_type"] == "stream" and o["name"] == "stdout")


def reports(outputs: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The memscope reports a cell displayed: their mime bundles."""
    return [o["data"] for o in outputs if o["output_type"] == "display_data"
            and "memscope report" in o["data"].get("text/plain", "")]


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Any:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager

    folder = tmp_path_factory.mktemp("notebook")
    # ipykernel's own spec for "python3" (no kernel dirs: none installed elsewhere
    # wins), which runs this interpreter.
    manager = AsyncKernelManager(kernel_name="python3",
                                 kernel_spec_manager=KernelSpecManager(kernel_dirs=[]))
    notebook = nbformat.v4.new_notebook()
    client = nbclient.NotebookClient(notebook, km=manager, timeout=300,
                                     resources={"metadata": {"path": str(folder)}})
    env = {**os.environ, "JAX_PLATFORMS": "cpu",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    with client.setup_kernel(env=env, cleanup_kc=True):
        ran = Kernel(client, notebook)
        assert ran.value("__import__('sys').executable") == sys.executable
        assert ran.run("%load_ext memscope") == []
        assert ran.run(SETUP) == []
        ran.setup_at = notebook.cells[-1].execution_count
        yield ran


@pytest.fixture(scope="module")
def trained(kernel: Kernel) -> tuple[int, list[dict[str, Any]]]:
    """The training cell, run once under ``%%memscope``: its number and outputs."""
    outputs = kernel.run(TRAINING)
    return kernel.notebook.cells[-1].execution_count, outputs


def test_the_training_cell_displays_its_report_with_the_peak_xla_compiled(kernel, trained):
    number, outputs = trained
    (shown,) = reports(outputs)
    stats = kernel.value(
        "(lambda m: [int(m.peak_memory_in_bytes), int(m.argument_size_in_bytes "
        "+ m.output_size_in_bytes - m.alias_size_in_bytes + m.temp_size_in_bytes)])("
        "jax.jit(step, donate_argnums=0).lower(params, batch).compile().memory_analysis())")
    peak = format_bytes(max(stats))  # memscope's rule (tests.support.truth.expected_peak)
    html = shown["text/html"]
    assert re.search(rf">step</a></b>: peak {re.escape(peak)} per device", html)
    assert f"step (In[{kernel.setup_at}]:7): peak {peak} per device" in shown["text/plain"]
    assert f"memscope report: notebook cell In[{number}]" in html
    assert "<script" not in html and "<html" not in html
    assert kernel.value("memscope_report.functions[0].memory.peak_bytes") == max(stats)


def test_the_cell_runs_as_without_the_magic(kernel, trained):
    number, outputs = trained
    # Its last expression is shown, before the report, and kept in Out as ever.
    assert [o["output_type"] for o in outputs] == ["execute_result", "display_data"]
    assert outputs[0]["execution_count"] == number
    found = kernel.value(
        f"[type(memscope_report).__name__, isinstance(memscope_report, memscope.Report), "
        f"Out[{number}] is loss, _{number} is loss, len(losses), first_w.is_deleted(), "
        f"params['w'].is_deleted(), sorted(params), i]")
    assert found == ["Report", True, True, True, 3, True, False, ["b", "w"], 2]
    # The donated buffers: deleted exactly as the same calls delete them without memscope.
    again = kernel.run("before = params['w']\nparams, loss = train_step(params, batch)\n"
                       "print(before.is_deleted(), params['w'].is_deleted())")
    assert stdout(again) == "True False\n"


def test_the_report_is_in_the_kernel_as_a_report(kernel, trained):
    number, _ = trained
    found = kernel.value(
        "[memscope_report.run.command, memscope_report.run.outcome, "
        "[(f.name, f.source, f.calls) for f in memscope_report.functions], "
        "memscope_report.functions[0].inputs[0].fate, "
        "memscope_report._repr_html_().startswith('<div class=\"memscope-report\">'), "
        "repr(memscope_report).startswith('memscope report')]")
    assert found == [f"notebook cell In[{number}]", "completed",
                     [["step", f"In[{kernel.setup_at}]:7", 3]], "aliased", True, True]


def test_the_line_magic_reports_one_statement(kernel):
    outputs = kernel.run("%memscope -r one params, loss = train_step(params, batch)")
    (shown,) = reports(outputs)
    assert ">step</a></b>: peak" in shown["text/html"]
    assert kernel.value("[one.functions[0].calls, one.run.cell, float(loss) > 0]") == [
        1, True, True]
    quiet = kernel.run("%memscope -q -r two -- jax.jit(loss_fn)(params, batch);")
    assert quiet == []  # no report (-q) and no value (the statement ends in ';')
    assert kernel.value("two.functions[0].name") == "loss_fn"


def test_an_exception_shows_the_report_of_what_ran_then_fails_the_cell(kernel):
    outputs = kernel.run("%%memscope -r failed\n"
                         "params, loss = train_step(params, batch)\n"
                         "raise ValueError('diverged')", fails=True)
    assert [o["output_type"] for o in outputs] == ["display_data", "error"]
    (shown,) = reports(outputs)
    assert "failed (exit code 1): ValueError: diverged" in shown["text/plain"]
    assert ">step</a></b>: peak" in shown["text/html"]
    error = outputs[1]
    assert (error["ename"], error["evalue"]) == ("ValueError", "diverged")
    trace = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(error["traceback"]))
    number = kernel.notebook.cells[-1].execution_count
    assert f"In[{number}], line 2" in trace and "memscope" not in trace
    # As after any failing cell: %tb and sys.last_value see the exception; what ran stays.
    assert kernel.value("[type(__import__('sys').last_value).__name__, failed.run.outcome, "
                        "failed.functions[0].calls]") == ["ValueError", "failed", 1]


def test_a_syntax_error_fails_the_cell_without_a_report(kernel):
    outputs = kernel.run("%%memscope -r nothing\nparams = (", fails=True)
    assert [(o["output_type"], o.get("ename")) for o in outputs] == [("error", "SyntaxError")]
    assert kernel.value("'nothing' in dir()") is False


def test_arrays_the_output_history_keeps_alive_are_named_by_it(kernel):
    kernel.run("shown = jnp.ones((1024, 1024)) * 3\nshown")
    shown_at = kernel.notebook.cells[-1].execution_count
    kernel.run("kept = jnp.ones((512, 1024)) * 5\nkept")  # in Out, and held by `kept`
    kept_at = kernel.notebook.cells[-1].execution_count
    kernel.run("del shown")
    outputs = kernel.run("%%memscope -r history\n"
                         "for n in range(2):\n    params, loss = train_step(params, batch)")
    groups = kernel.value("[[g.arrays, g.bytes, g.held_by] for g in "
                          "history.runtime.run_memory.high_water.groups]")
    assert [1, 4 << 20, f"`Out[{shown_at}]` (the notebook's output history; "
            f"`del Out[{shown_at}], _{shown_at}, __` or `%reset -f out` frees it)"] in groups
    assert [1, 2 << 20, "`kept`"] in groups
    assert not any(f"Out[{kept_at}]" in (held or "") for _, _, held in groups)
    (shown,) = reports(outputs)
    assert f"`Out[{shown_at}]` (the notebook&#x27;s output history" in shown["text/html"]


def test_a_jit_made_in_a_captured_cell_is_measured_in_a_later_one(kernel):
    kernel.run("%%memscope -q -r made\n"
               "evaluate = jax.jit(lambda p, b: loss_fn(p, b) * 2)\nevaluate(params, batch)")
    kernel.run("%%memscope -q -r later\nevaluate(params, batch)\n"
               "params, loss = train_step(params, batch)")
    assert kernel.value("[[f.name, f.calls] for f in later.functions]") == [
        ["<lambda>", 1], ["step", 1]]
    # Outside a capture the jits are JAX's own again, or pass through to them.
    assert kernel.value("type(train_step).__name__") != "MeasuredJit"


def test_reports_are_saved_where_asked(kernel, tmp_path):
    json_path, html_path = tmp_path / "r.json", tmp_path / "r.html"
    kernel.run(f"%%memscope -q -o {json_path} --html {html_path} --advice full\n"
               "params, loss = train_step(params, batch)")
    saved = Report.from_json(json_path.read_text(encoding="utf-8"))
    assert saved.run is not None and saved.run.cell
    assert [v.name for v in saved.functions[0].variants] != []
    assert html_path.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_stop_after_ends_the_cell_quietly(kernel):
    outputs = kernel.run("%%memscope -r stopped --stop-after 2\n"
                         "for n in range(5):\n    params, loss = train_step(params, batch)")
    assert [o["output_type"] for o in outputs] == ["display_data"]  # no error: not failed
    assert kernel.value("[stopped.run.outcome, stopped.functions[0].calls, n]") == [
        "stopped", 2, 1]
    # The second call donated params and never returned: as at any interrupted step.
    kernel.run('params = {"w": jnp.ones((256, 128)), "b": jnp.zeros((128,))}')


def test_bad_options_are_one_line(kernel):
    outputs = kernel.run("%%memscope --advice sometimes\nx = 1", fails=True)
    assert "UsageError" in json.dumps(outputs) and "sometimes" in json.dumps(outputs)
    assert kernel.value("'x' in dir()") is False  # the cell did not run


# --- without a kernel --------------------------------------------------------------


def test_the_output_history_names_only_what_no_variable_holds():
    import jax.numpy as jnp

    from memscope.analysis.run_memory import OUTPUT_HISTORY, Holder
    from memscope.capturing.holders import OutputHistory, user_holders

    shown, kept = jnp.ones(3), jnp.zeros(3)
    out = {4: shown, 5: kept}
    namespace = {"Out": out, "_oh": out, "_4": shown, "_5": kept, "_": kept, "__": shown,
                 "kept": kept}
    hidden = {name: namespace[name] for name in ("Out", "_oh", "_4", "_5", "_", "__")}
    history = OutputHistory(namespace, out, "Out",
                            lambda name: name in hidden and hidden[name] is namespace[name])
    # No frame is looked at: the namespace is the program's globals.
    found = user_holders({id(shown), id(kept)}, history, frame=None)
    assert found[id(kept)] == Holder("kept", "", "module", 0, 0)
    assert found[id(shown)] == Holder("Out[4]", "", OUTPUT_HISTORY, 0, 0, ("_4", "__"))
    namespace["_"] = shown  # bound by the user: a variable of theirs like any
    found = user_holders({id(shown)}, history, frame=None)
    assert found[id(shown)].name == "_"




def test_a_reports_repr_is_its_terminal_report_in_plain_text():
    report = run_report()
    out = io.StringIO()
    render_report(report, out, plain=True)
    assert repr(report) == out.getvalue()
    assert "\x1b" not in repr(report) and repr(report).startswith("memscope report\n")
    fn = report.functions[0]
    out = io.StringIO()
    render_function(fn, out, plain=True)
    assert repr(fn) == out.getvalue()
    assert repr(fn).startswith("train_step (train.py:12): peak 4.0 MiB per device\n")


def test_a_reports_html_is_an_element_to_embed():
    report = run_report()
    html = report._repr_html_()
    assert html.startswith('<div class="memscope-report"><style>') and html.endswith("</div>")
    assert "<script" not in html and "<html" not in html and "<body" not in html
    assert "http" not in html  # nothing to fetch
    style = re.search(r"<style>(.*?)</style>", html, re.S).group(1)
    selectors = [sel.strip() for rule in style.split("}") if "{" in rule
                 for sel in rule.split("{")[0].split(",")]
    assert selectors and all(s.startswith(".memscope-report") for s in selectors)
    # The answer first; report strings escaped; every section closes.
    assert html.index("What to look at") < html.index("Device memory over the run")
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;" in html
    assert html.count("<details") == html.count("</details>")
    assert not re.search(r'<details class="fn"[^>]* open>', html)  # sections start closed


def test_two_embedded_reports_share_no_id():
    report = run_report()
    first, second = report_fragment(report), report_fragment(report)
    ids = [set(re.findall(r'id="([^"]+)"', html)) for html in (first, second)]
    assert ids[0] and not ids[0] & ids[1]
    for html, own in zip((first, second), ids, strict=True):
        assert set(re.findall(r'href="#([^"]+)"', html)) <= own


def test_a_function_reports_html_is_its_answer_then_its_section():
    fn = run_report().functions[0]
    html = fn._repr_html_()
    assert html.index("train_step</a></b>: peak 4.0 MiB") < html.index('<details class="fn"')
    assert '<details class="fn"' in html and " open><summary>" in html


@needs_driven_browser
def test_an_embedded_report_keeps_its_style_to_itself(browser, tmp_path):
    from selenium.webdriver.common.by import By

    page = tmp_path / "host.html"
    page.write_text('<!DOCTYPE html><html><head><style>body{font-size:20px}</style></head>'
                    '<body><h2 id="host">a notebook</h2><table id="grid"><tr><td>1</td>'
                    f"</tr></table>{report_fragment(run_report())}</body></html>",
                    encoding="utf-8")
    browser.get(page.as_uri())

    def style(element, name):
        return browser.execute_script(
            "return getComputedStyle(arguments[0])[arguments[1]]", element, name)

    host = browser.find_element(By.ID, "host")
    cell = browser.find_element(By.CSS_SELECTOR, "#grid td")
    assert style(host, "borderTopWidth") == "0px" and style(cell, "borderTopWidth") == "0px"
    report = browser.find_element(By.CSS_SELECTOR, ".memscope-report")
    assert style(report, "fontSize") == "14px"
    section = report.find_element(By.CSS_SELECTOR, "details.fn")
    assert section.get_attribute("open") is None
    section.find_element(By.TAG_NAME, "summary").click()
    assert section.get_attribute("open") is not None  # no script needed to open it
