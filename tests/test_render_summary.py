"""The summary (what every renderer shows first) and the terminal view built on it:
pure functions on hand-built reports, exact text at COLUMNS=80, every leaf whole
with --leaves, user text shown literally."""

from __future__ import annotations

import dataclasses
import io
import json
import re
from pathlib import Path

import pytest

from memscope.analysis.advice import annotate
from memscope.render.terminal import render_report
from memscope.render.terminal_leaves import LeafFilter
from memscope.render.text import shorten, visible, wrap
from memscope.report import (
    Advice,
    Device,
    Environment,
    FunctionReport,
    InputBuffer,
    Memory,
    MemoryLimit,
    OutputBuffer,
    Report,
    RunInfo,
    Variant,
    save_report,
)
from memscope.report.paths import bounded, bounded_leaves, path_matches, path_steps
from memscope.views.leaves import (
    argument_signatures,
    common_prefix,
    differs_text,
    leaf_groups,
    reason_groups,
    select_leaves,
    static_arguments,
    unmatched_pattern,
)
from memscope.views.summary import summarize
from tests.support.cli import invoke

KiB = 1024


def _param_paths(root: str, layers: int) -> list[tuple[str, tuple[int, ...]]]:
    leaves = [(f"{root}['embed']", (64, 16))]
    for i in range(layers):
        leaves += [(f"{root}['layers'][{i}]['b']", (16,)), (f"{root}['layers'][{i}]['w']", (16, 16))]
    return leaves


def _in(path: str, shape: tuple[int, ...], *, donated: bool, fate: str, output: str | None = None,
        dtype: str = "float32") -> InputBuffer:
    size = 4 * max(1, int.__mul__(*shape) if len(shape) == 2 else (shape[0] if shape else 1))
    return InputBuffer(path, shape, dtype, size, donated, fate, output)  # type: ignore[arg-type]


def _out(path: str, shape: tuple[int, ...], fate: str, source: str | None = None,
         dtype: str = "float32") -> OutputBuffer:
    size = 4 * max(1, int.__mul__(*shape) if len(shape) == 2 else (shape[0] if shape else 1))
    return OutputBuffer(path, shape, dtype, size, fate, source)  # type: ignore[arg-type]


def model_step(layers: int = 6) -> FunctionReport:
    """A training step: params donated and aliased, Adam's state not donated, a batch."""
    params = _param_paths("params", layers)
    inputs = [_in(p, s, donated=True, fate="aliased", output=f"result[1]{p[6:]}")
              for p, s in params]
    inputs.append(_in("opt_state[0].count", (), donated=False, fate="not_donated", dtype="int32"))
    for moment in ("mu", "nu"):
        inputs += [_in(f"opt_state[0].{moment}{p[6:]}", s, donated=False, fate="not_donated")
                   for p, s in params]
    inputs += [_in("batch['x']", (8, 64), donated=False, fate="not_donated"),
               _in("batch['y']", (8,), donated=False, fate="not_donated", dtype="int32")]
    outputs = [_out("result[0]", (), "new")]
    outputs += [_out(f"result[1]{p[6:]}", s, "reuses_input", p) for p, s in params]
    outputs.append(_out("result[2][0].count", (), "new", dtype="int32"))
    for moment in ("mu", "nu"):
        outputs += [_out(f"result[2][0].{moment}{p[6:]}", s, "new") for p, s in params]
    annotated = annotate(inputs, outputs, same_size_donors=True)
    state = [b for b in annotated if b.candidate]
    advice = Advice('donate_argnames=("params", "opt_state")', ("opt_state",),
                    sum(b.bytes for b in state), 90 * KiB, 60 * KiB,
                    "Donate only arguments the program does not read after the call.")
    variant = Variant("all", 'donate_argnames=("params", "opt_state", "batch")',
                      Memory(peak_bytes=62 * KiB, argument_bytes=60 * KiB),
                      inputs=tuple(dataclasses.replace(b, fate="unusable")
                                   for b in annotated if b.path.startswith("batch")))
    return FunctionReport(
        name="train_step", source="train.py:40", calls=12,
        signature="(" + ", ".join(f"{b.dtype}[{','.join(map(str, b.shape))}]"
                                  for b in annotated) + ", lr=0.001)",
        memory=Memory(argument_bytes=60 * KiB, output_bytes=60 * KiB, alias_bytes=20 * KiB,
                      temp_bytes=10 * KiB, peak_bytes=90 * KiB),
        inputs=annotated, outputs=tuple(outputs), donate_argnames=("params",),
        setting='donate_argnames=("params",)', advice=advice, variants=(variant,))


def model_report(*functions: FunctionReport, argv: tuple[str, ...] = ("--steps", "3")
                 ) -> Report:
    return Report(
        memscope_version="0.1.0",
        environment=Environment(jax="0.10.2", jaxlib="0.10.2", backend="cpu",
                                devices=(Device(0, "cpu", "cpu"),)),
        run=RunInfo(program="train.py", argv=argv, outcome="completed", exit_code=0),
        functions=functions or (model_step(),))


def render(report: Report, width: int = 80, leaves: LeafFilter | None = None,
           detail: bool = False) -> list[str]:
    out = io.StringIO()
    render_report(report, out, width=width, plain=True, leaves=leaves, detail=detail)
    return [line.rstrip() for line in out.getvalue().splitlines()]


# --- the pure summary ----------------------------------------------------------------


def test_path_steps_and_prefixes():
    assert path_steps("opt_state[0].mu['w']") == ("opt_state", "[0]", ".mu", "['w']")
    assert path_steps("x") == ("x",)
    assert path_steps("a['k]]'][1]") == ("a", "['k]]']", "[1]")
    assert common_prefix(["p['a'][0]", "p['a'][1]"]) == "p['a']"
    assert path_matches("params['layers'][3]['w']", "params['layers']")
    assert not path_matches("params2['w']", "params")
    assert path_matches("params['layers'][3]['w']", "*['w']")
    assert path_matches("opt_state[0].mu['embed']", "opt_state[0].mu['e*")


def test_groups_follow_arguments_then_subtrees():
    fn = model_step()
    groups = leaf_groups(fn.inputs, {b.path for b in fn.inputs if b.candidate})
    rows = [(g.depth, g.path, g.leaves, [(f.fate, f.leaves, f.candidates) for f in g.fates])
            for g in groups]
    assert rows == [
        (0, "params", 13, [("aliased", 13, 0)]),
        (1, "params['embed']", 1, [("aliased", 1, 0)]),
        (1, "params['layers']", 12, [("aliased", 12, 0)]),
        (0, "opt_state", 27, [("not_donated", 27, 27)]),
        # the single-child opt_state[0] is passed through to its parts
        (1, "opt_state[0].count", 1, [("not_donated", 1, 1)]),
        (1, "opt_state[0].mu", 13, [("not_donated", 13, 13)]),
        (1, "opt_state[0].nu", 13, [("not_donated", 13, 13)]),
        (0, "batch", 2, [("not_donated", 2, 0)]),
    ]
    assert sum(g.bytes for g in groups if g.depth == 0) == sum(b.bytes for b in fn.inputs)


def test_identical_reasons_merge_with_a_count_per_argument():
    fn = model_step()
    groups = reason_groups(fn)
    assert [(g.group, g.fate, g.leaves) for g in groups] == [
        ("opt_state[0]", "not_donated", 27)]
    (g,) = groups
    assert g.bytes == sum(b.bytes for b in fn.inputs if b.path.startswith("opt_state"))
    own = next(b for b in fn.inputs if b.path == g.example_path)
    assert g.example == own.reason


def test_bounded_lists_end_with_a_count():
    assert bounded(["a", "b"], 5) == "a, b"
    assert bounded([str(i) for i in range(8)], 3) == "0, 1, 2 and 5 more"
    paths = [f"p[{i}]" for i in range(7)] + ["q"]
    assert bounded_leaves(paths) == "7 in p, 1 in q; e.g. p[0]"


def test_signature_per_argument_and_statics():
    fn = model_step()
    assert [(a.name, a.text) for a in argument_signatures(fn)] == [
        ("params", "13 arrays, 10.4 KiB"), ("opt_state", "27 arrays, 20.8 KiB"),
        ("batch", "{x: float32[8,64], y: int32[8]}"), ("lr", "0.001")]
    assert summarize(model_report()).functions[0].signature == (
        "params: 13 arrays, 10.4 KiB; opt_state: 27 arrays, 20.8 KiB; "
        "batch: {x: float32[8,64], y: int32[8]}; lr=0.001")
    assert static_arguments("(float32[2], #1=(1, 2), lr=0.1, name='a,b')") == [
        ("#1", "(1, 2)"), ("lr", "0.1"), ("name", "'a,b'")]


def test_what_differs_between_signatures():
    small, big = model_step(2), model_step(3)
    assert differs_text(small, [big]) == "no params['layers'][2]['b'], no params['layers'][2]['w'], " \
        "no opt_state[0].mu['layers'][2]['b'], no opt_state[0].mu['layers'][2]['w'], " \
        "no opt_state[0].nu['layers'][2]['b'] and 1 more"
    wide = dataclasses.replace(small, inputs=tuple(
        dataclasses.replace(b, shape=(16, 64)) if b.path == "batch['x']" else b
        for b in small.inputs))
    assert differs_text(wide, [small]) == "batch['x'] float32[16,64]"
    s = summarize(model_report(small, wide)).functions
    assert (s[0].variant_of, s[1].variant_of) == ((1, 2), (2, 2))
    assert any("compiled for 2 signatures" in f.text for f in s[0].findings)
    lines = render(model_report(small, wide))
    assert "| train_step 1/2 | 60.0 KiB | 60.0 KiB | 20.0 KiB | 10.0 KiB | 90.0 KiB |" in lines
    assert "  signature 2 of 2: params: 5 arrays, 6.1 KiB; opt_state: 11 arrays, 12.3 KiB;" \
        in lines
    assert "  differs from its other signatures in: batch['x'] float32[16,64]" in lines


def test_findings_come_worst_first():
    fn = model_step()
    broken = dataclasses.replace(fn, findings=("params['embed'] was not reused",),
                                 inputs=(*fn.inputs[:-1], dataclasses.replace(
                                     fn.inputs[-1], donated=True, fate="unusable")))
    kinds = [f.text.split(",")[0] if f.severity != "problem" else f.text[:20]
             for f in summarize(model_report(broken)).functions[0].findings]
    assert kinds == ["run time disagrees w", "1 leaf, 32 B, donate", "27 leaves"]


def test_a_rematerialization_to_fit_the_limit_is_said_with_both_peaks():
    """Where XLA:GPU's compile without the limit has another peak, the function's
    notes say so with both; where it has the same (or was not made), nothing."""
    fn = model_step()
    limit = MemoryLimit(limit_bytes=60 << 30, peak_bytes=round(58.1 * 2**30),
                        unlimited_peak_bytes=round(71.3 * 2**30))
    texts = [f.text for f in summarize(model_report(dataclasses.replace(
        fn, memory_limit=limit))).functions[0].findings]
    assert texts[-1] == ("XLA:GPU rematerialized to fit the 60.0 GiB limit: peak 58.1 GiB, "
                         "71.3 GiB without the limit")
    for same in (dataclasses.replace(limit, unlimited_peak_bytes=limit.peak_bytes),
                 dataclasses.replace(limit, unlimited_peak_bytes=None)):
        said = summarize(model_report(dataclasses.replace(fn, memory_limit=same)))
        assert not any("rematerialized" in f.text for f in said.functions[0].findings)


# --- text helpers --------------------------------------------------------------------


def test_visible_escapes_control_characters_only():
    assert visible("params['w'] [bold]x[/bold] é") == "params['w'] [bold]x[/bold] é"
    assert visible("a\x1b[31mred\nnext\t\x00\u202e") == "a\\x1b[31mred\\nnext\\t\\x00\\u202e"


def test_wrap_breaks_between_words_only():
    text = "peak 39.5 MiB -> 19.8 MiB for params['layers'][0]['attn']['wk']['kernel'] ok"
    lines = wrap(text, 20, "  ")
    assert " ".join(line.strip() for line in lines) == text
    assert "params['layers'][0]['attn']['wk']['kernel']" in [line.strip() for line in lines]
    assert all(not re.match(r"\s*(B|KiB|MiB)\b", line) for line in lines)
    assert shorten("sample_programs/transformer_adam.py:87", 20) == "sample_pr...am.py:87"


# --- the terminal, exactly -----------------------------------------------------------

EXPECTED_80 = """\
memscope report
program: train.py --steps 3
run:     completed (exit code 0)
jax 0.10.2, jaxlib 0.10.2, backend cpu, 1 device (cpu)

train_step (train.py:40): peak 90.0 KiB per device
  warning: 27 leaves, 20.8 KiB, not donated, but an output of the same shape and
      dtype could reuse the buffer (candidates): opt_state[0].count,
      opt_state[0].mu['embed'], opt_state[0].mu['layers'][0]['b'] and 24 more
  Advice: jit train_step with donate_argnames=("params", "opt_state") (adds
    opt_state): 27 candidate leaves, 20.8 KiB; peak 90.0 KiB -> 60.0 KiB
    (-30.0 KiB, measured).

Compiled functions (bytes per device)
+-------------------------------------------------------------------+
| function   | argument |   output |    alias |     temp |     peak |
|------------+----------+----------+----------+----------+----------|
| train_step | 60.0 KiB | 60.0 KiB | 20.0 KiB | 10.0 KiB | 90.0 KiB |
+-------------------------------------------------------------------+

train_step  train.py:40  12 calls
  signature: params: 13 arrays, 10.4 KiB; opt_state: 27 arrays, 20.8 KiB; batch:
    {x: float32[8,64], y: int32[8]}; lr=0.001
  inputs: 42 leaves, 33.2 KiB
    params                  13 leaves   10.4 KiB  aliased 13
      params['embed']        1 leaf      4.0 KiB  aliased 1
      params['layers']      12 leaves    6.4 KiB  aliased 12
    opt_state               27 leaves   20.8 KiB  not_donated 27 (candidates)
      opt_state[0].count     1 leaf          4 B  not_donated 1 (candidate)
      opt_state[0].mu       13 leaves   10.4 KiB  not_donated 13 (candidates)
      opt_state[0].nu       13 leaves   10.4 KiB  not_donated 13 (candidates)
    batch                    2 leaves    2.0 KiB  not_donated 2
  outputs: 41 leaves, 31.1 KiB
    result         41 leaves   31.1 KiB  new 28, reuses_input 13
      result[0]     1 leaf          4 B  new 1
      result[1]    13 leaves   10.4 KiB  reuses_input 13
      result[2]    27 leaves   20.8 KiB  new 27
  why (identical reasons merged; each leaf's own: --leaves):
    opt_state[0] (27 leaves, not_donated, 20.8 KiB): for example
      opt_state[0].mu['embed']: result[2][0].mu['embed'] has the same shape and
      dtype and is a new buffer; donating opt_state[0].mu['embed'] lets
      result[2][0].mu['embed'] reuse its buffer and saves 4.0 KiB, if the caller
      does not read opt_state[0].mu['embed'] after the call.
Donation variants (each compiled and measured)
+------------------------------------+
|          | as written | donate all |
|----------+------------+------------|
| argument |   60.0 KiB |   60.0 KiB |
| output   |   60.0 KiB |        n/a |
| alias    |   20.0 KiB |        n/a |
| temp     |   10.0 KiB |        n/a |
| peak     |   90.0 KiB |   62.0 KiB |
| unusable |          0 |          2 |
+------------------------------------+
  as written: donate_argnames=("params",)
  donate all: donate_argnames=("params", "opt_state", "batch"); unusable:
              batch['x'], batch['y']
  terms:
    aliased: donated, and the named output is written into its buffer
    not_donated: not donated: the buffer stays allocated for the caller
    reuses_input: written into the named donated input's buffer
    new: a fresh buffer
    candidate: not donated, yet an output of its shape and dtype could reuse it

every leaf: --leaves; everything: -o FILE.json
"""


def test_terminal_at_80_columns_answers_first_and_groups_leaves():
    lines = render(model_report(), detail=True)
    assert "\n".join(lines) + "\n" == EXPECTED_80


EXPECTED_DEFAULT = """\
memscope report
program: train.py --steps 3
run:     completed (exit code 0)
jax 0.10.2, jaxlib 0.10.2, backend cpu, 1 device (cpu)

train_step (train.py:40): peak 90.0 KiB per device
  warning: 27 leaves, 20.8 KiB, not donated, but an output of the same shape and
      dtype could reuse the buffer (candidates): opt_state[0].count,
      opt_state[0].mu['embed'], opt_state[0].mu['layers'][0]['b'] and 24 more
  Advice: jit train_step with donate_argnames=("params", "opt_state") (adds
    opt_state): 27 candidate leaves, 20.8 KiB; peak 90.0 KiB -> 60.0 KiB
    (-30.0 KiB, measured).

Compiled functions (bytes per device)
+-------------------------------------------------------------------+
| function   | argument |   output |    alias |     temp |     peak |
|------------+----------+----------+----------+----------+----------|
| train_step | 60.0 KiB | 60.0 KiB | 20.0 KiB | 10.0 KiB | 90.0 KiB |
+-------------------------------------------------------------------+

train_step  train.py:40  12 calls
  signature: params: 13 arrays, 10.4 KiB; opt_state: 27 arrays, 20.8 KiB; batch:
    {x: float32[8,64], y: int32[8]}; lr=0.001
  inputs: 42 leaves, 33.2 KiB
    params       13 leaves   10.4 KiB  aliased 13
    opt_state    27 leaves   20.8 KiB  not_donated 27 (candidates)
    batch         2 leaves    2.0 KiB  not_donated 2
  outputs: 41 leaves, 31.1 KiB
    result         41 leaves   31.1 KiB  new 28, reuses_input 13
      result[0]     1 leaf          4 B  new 1
      result[1]    13 leaves   10.4 KiB  reuses_input 13
      result[2]    27 leaves   20.8 KiB  new 27
  why (identical reasons merged; each leaf's own: --leaves):
    opt_state[0] (27 leaves, not_donated, 20.8 KiB): for example
      opt_state[0].mu['embed']: result[2][0].mu['embed'] has the same shape and
      dtype and is a new buffer; donating opt_state[0].mu['embed'] lets
      result[2][0].mu['embed'] reuse its buffer and saves 4.0 KiB, if the caller
      does not read opt_state[0].mu['embed'] after the call.
  donation variants (each compiled and measured; the table: --detail):
    donate all: donate_argnames=("params", "opt_state", "batch"): peak 62.0 KiB
      (-28.0 KiB), alias n/a, 2 unusable

Every function in full: --detail; every leaf: --leaves; everything: -o FILE.json
"""


def test_the_default_shows_each_argument_on_a_line_and_the_rest_on_request():
    """Subtrees, every reason, the variants' table and the terms: --detail."""
    assert "\n".join(render(model_report())) + "\n" == EXPECTED_DEFAULT
    # A function with nothing to change gets no section, and the footer names it.
    clean = dataclasses.replace(model_step(0), name="eval_step", inputs=(), outputs=(),
                                variants=(), advice=None)
    lines = render(model_report(model_step(0), clean))
    assert "eval_step (train.py:40): peak 90.0 KiB per device; nothing to change" in lines
    assert not any(line.startswith("eval_step  ") for line in lines)
    assert "Not shown, nothing to change: eval_step." in " ".join(lines)


def test_leaves_lists_every_leaf_whole_and_filters():
    report = model_report()
    fn = report.functions[0]
    lines = render(report, width=40, leaves=LeafFilter())
    rows = [line.split() for line in lines]
    for b in (*fn.inputs, *fn.outputs):
        assert any(row and row[0] == b.path for row in rows), b.path
    for line in lines:  # nothing split: every bracket opened on a line closes on it
        assert line.count("[") == line.count("]"), line
    chosen = render(report, leaves=LeafFilter("opt_state[0].mu['layers'][1]", "candidate"))
    detail = chosen[next(i for i, ln in enumerate(chosen) if "leaves of" in ln):]
    listed = [ln.split()[0] for ln in detail
              if ln.startswith("    opt_state") and re.match(r"\((\d|\))", ln.split()[1])]
    assert listed == ["opt_state[0].mu['layers'][1]['b']", "opt_state[0].mu['layers'][1]['w']"]
    assert "leaves of train_step (under or matching opt_state[0].mu['layers'][1], fate " \
           "candidate): 2 of 42 inputs, 0 of 41 outputs" in " ".join(" ".join(chosen).split())


def test_a_small_function_is_shown_leaf_by_leaf():
    small = model_step(0)
    small = dataclasses.replace(small, inputs=small.inputs[:3], outputs=small.outputs[:3])
    lines = render(model_report(small), detail=True)
    assert "    params['embed']           (64,16)  float32  4.0 KiB  yes      aliased       " \
           "result[1]['embed']" in lines
    assert not any(line.startswith("  inputs:") for line in lines)


def test_user_text_is_printed_literally():
    argv = ("tags=[a,b]", "[bold]x[/bold]", "data.paths=[/data/a,/data/b]")
    fn = dataclasses.replace(model_step(1), name="step[red]\x1b[2J", source="a[b].py:3",
                             error="ValueError: bad [shape] \x07")
    report = dataclasses.replace(model_report(fn, argv=argv), run=RunInfo(
        "train.py", argv, "failed", 1, error="KeyError: '[bold]missing[/bold]'"))
    text = "\n".join(render(report, width=200))
    assert "program: train.py 'tags=[a,b]' '[bold]x[/bold]' 'data.paths=[/data/a,/data/b]'" in text
    assert "run:     failed (exit code 1): KeyError: '[bold]missing[/bold]'" in text
    assert "step[red]\\x1b[2J  a[b].py:3" in text
    assert "ValueError: bad [shape] \\x07" in text
    assert "\x1b" not in text and "\x07" not in text


# --- the command line ----------------------------------------------------------------


def test_show_leaves_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("COLUMNS", "80")
    saved = tmp_path / "r.json"
    report = model_report()
    save_report(report, str(saved))
    plain = invoke("show", str(saved))
    assert plain.exit_code == 0, plain.output
    assert plain.stdout.splitlines() == EXPECTED_DEFAULT.splitlines()
    detail = invoke("show", "--detail", str(saved))
    assert detail.stdout.splitlines() == EXPECTED_80.splitlines()
    every = invoke("show", "--leaves", str(saved))
    for b in report.functions[0].inputs:
        assert f"    {b.path}  " in every.stdout
    picked = invoke("show", "--path", "*['w']", "--fate", "aliased", str(saved))
    assert "6 of 42 inputs, 0 of 41 outputs" in " ".join(picked.stdout.split())
    data = json.loads(saved.read_text())
    assert {b["path"] for b in data["functions"][0]["inputs"]} == {
        b.path for b in report.functions[0].inputs}
    bad = invoke("show", "--fate", "eaten", str(saved))
    assert bad.exit_code == 2 and "'eaten' is not one of" in bad.stderr


EXAMPLES = ("leaf paths look like params['embed'], opt_state[0].count, batch['x'], result[0] "
            "(a path and what is under it, or a glob: *, ?; brackets are literal)")


@pytest.mark.parametrize(("pattern", "said"), [
    ("[", f"--path '[' matches no leaf of any function; {EXAMPLES}"),
    ("*zz", f"--path '*zz' matches no leaf of any function; {EXAMPLES}"),
    ("bias", f"--path 'bias' matches no leaf of any function; {EXAMPLES}"),
    ("['w']", "--path \"['w']\" matches no leaf of any function; did you mean \"*['w']*\" "
              "(12 leaves)? A pattern without * or ? selects a whole path and what is under it"),
    ("count", "--path 'count' matches no leaf of any function; did you mean '*count*' "
              "(2 leaves)? A pattern without * or ? selects a whole path and what is under it"),
    ("'x'", "--path \"'x'\" matches no leaf of any function; did you mean \"*'x'*\" "
            "(1 leaf)? A pattern without * or ? selects a whole path and what is under it"),
    ("params", None), ("*['w']", None), ("result[0]", None), ("batch['x']", None),
])
def test_a_path_that_matches_no_leaf_is_said_with_examples(pattern: str, said: str | None):
    fn = model_step(2)
    assert unmatched_pattern([fn], pattern) == said
    # said exactly when the listing would be empty, whatever the fate
    inputs, outputs = select_leaves(fn, pattern)
    assert (said is None) == bool(inputs or outputs)


def test_a_path_against_a_report_without_leaves():
    fn = dataclasses.replace(model_step(0), inputs=(), outputs=())
    assert unmatched_pattern([fn], "x") == ("--path 'x' matches no leaf of any function "
                                            "(the report has no leaves)")


def test_show_warns_of_a_path_that_matches_nothing(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("COLUMNS", "80")
    saved = tmp_path / "r.json"
    save_report(model_report(model_step(2)), str(saved))
    result = invoke("show", "--path", "[", str(saved))
    assert result.exit_code == 0, result.output
    assert result.stderr == ("memscope: warning: --path '[' matches no leaf of any function; "
                             f"{EXAMPLES}\n")
    assert "leaves of train_step (under or matching [): 0 of 18 inputs, 0 of 17 outputs" \
        in result.stdout
    matched = invoke("show", "--path", "params", str(saved))
    assert (matched.exit_code, matched.stderr) == (0, "")
    empty = invoke("show", "--path", "", str(saved))
    assert (empty.exit_code, empty.stdout, empty.stderr) == (
        2, "", "memscope: error: --path '': the pattern is empty; give a leaf path "
               "(\"params['w']\") or a glob ('*bias')\n")


def test_run_warns_of_a_path_that_matches_nothing_and_keeps_its_exit_code(tmp_path: Path):
    script = tmp_path / "step.py"
    script.write_text("import jax, jax.numpy as jnp\n"
                      "step = jax.jit(lambda params, x: {'w': params['w'] * x})\n"
                      "step({'w': jnp.ones(3)}, jnp.ones(3))\n", encoding="utf-8")
    result = invoke("run", "--advice", "off", "-o", str(tmp_path / "r.json"),
                    "--path", "[", str(script))
    assert result.exit_code == 0, result.output
    assert result.stderr == (
        "memscope: warning: --path '[' matches no leaf of any function; leaf paths look like "
        "params['w'], x, result['w'] (a path and what is under it, or a glob: *, ?; brackets "
        "are literal)\n")
    assert (tmp_path / "r.json").exists()  # the report is still written
    # an empty pattern is refused before the script runs
    marker = tmp_path / "ran"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n", encoding="utf-8")
    empty = invoke("run", "--path", "", str(script))
    assert empty.exit_code == 2 and empty.stderr.startswith("memscope: error: --path '': ")
    assert not marker.exists()


def test_diff_groups_many_changed_leaves_by_argument_and_fates():
    from memscope.check.compare import FunctionDiff, LeafChange
    from memscope.render.diff import render_diff

    changes = tuple(LeafChange("input", f"opt_state[0].mu['layers'][{i}]['w']", "not_donated",
                               f"aliased result[1][0].mu['layers'][{i}]['w']") for i in range(30))
    changes += (LeafChange("input", "batch['x']", "not_donated", "unusable"),)
    d = FunctionDiff("train_step", "train.py:40", "(...)", "better", "a", "b", leaves=changes,
                     short_signature="opt_state: 30 arrays, 120.0 KiB")
    assert [(g.kind, g.argument, g.before, g.after, g.leaves) for g in d.groups] == [
        ("input", "opt_state", "not_donated", "aliased", 30),
        ("input", "batch", "not_donated", "unusable", 1)]
    out = io.StringIO()
    render_diff("memscope diff", [d], out, width=80, plain=True)
    lines = [line.rstrip() for line in out.getvalue().splitlines()]
    assert lines[-6:] == [
        "31 buffers change their fate (before -> after), by argument (each leaf: the JSON",
        "  report, -o):",
        "  input opt_state: 30 leaves not_donated -> aliased:",
        "      opt_state[0].mu['layers'][0]['w'], opt_state[0].mu['layers'][1]['w'],",
        "      opt_state[0].mu['layers'][2]['w'] and 27 more",
        "  input batch: 1 leaf not_donated -> unusable: batch['x']"]
    text = "\n".join(lines)
    assert "input batch: 1 leaf not_donated -> unusable: batch['x']" in text
    assert "signature: opt_state: 30 arrays, 120.0 KiB" in text


def test_markdown_for_pull_requests_is_the_answer_bounded():
    from memscope.render.markdown_run import MAX_MARKDOWN_SECTIONS, MAX_ROWS, render_run_markdown

    out = io.StringIO()
    render_run_markdown(model_report(), out)
    text = out.getvalue()
    assert text.startswith("### memscope: `train.py --steps 3`\n")
    assert ("| `train_step` | `train.py:40` | 12 | 60.0 KiB | 60.0 KiB | 20.0 KiB | "
            "10.0 KiB | 90.0 KiB |") in text
    # Leaf paths escaped, so markdown shows their brackets and underscores as typed.
    assert ("- **warning:** 27 leaves, 20.8 KiB, not donated, but an output of the same "
            "shape and dtype could reuse the buffer (candidates): opt\\_state\\[0\\].count"
            ) in text
    assert ('- **advice:** jit train\\_step with donate\\_argnames=("params", "opt\\_state") '
            "(adds opt\\_state): 27 candidate leaves, 20.8 KiB; peak 90.0 KiB -\\> 60.0 KiB "
            "(-30.0 KiB, measured).") in text
    many = [dataclasses.replace(model_step(1), name=f"step_{i}") for i in range(30)]
    out = io.StringIO()
    render_run_markdown(model_report(*many), out)
    text = out.getvalue()
    assert text.count("| `step_") == MAX_ROWS
    assert "| and 10 more functions |" in text
    assert text.count("- **advice:**") == MAX_MARKDOWN_SECTIONS
    assert "And 22 more functions with something to change" in text
    assert len(text.splitlines()) < 100


def test_show_and_run_print_markdown(tmp_path: Path):
    saved = tmp_path / "r.json"
    save_report(model_report(), str(saved))
    shown = invoke("show", "--format", "markdown", str(saved))
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.startswith("### memscope: `train.py --steps 3`")
    script = tmp_path / "step.py"
    script.write_text("import jax, jax.numpy as jnp\n"
                      "f = jax.jit(lambda x: x * 2)\n"
                      "print(f(jnp.ones(4)))\n")
    ran = invoke("run", "--format", "markdown", str(script))
    assert ran.exit_code == 0, ran.output
    assert "| `<lambda>` |" in ran.stdout and "### memscope: `" in ran.stdout


def test_advice_that_saves_under_the_threshold_is_a_note_not_advice():
    """The issue's "peak 1.5 MiB -> 1.5 MiB (0 B, measured)": measured to save less
    than MEANINGFUL_SAVING of the peak, the donation is not advised."""
    from memscope.report.function import MEANINGFUL_SAVING

    fn = model_step(1)
    peak = fn.memory.peak_bytes
    for after, worth in ((peak, False), (peak - int(peak * MEANINGFUL_SAVING) + 1, False),
                         (peak - int(peak * MEANINGFUL_SAVING) - 1, True), (peak + 10, False)):
        advice = dataclasses.replace(fn.advice, peak_before=peak, peak_after=after)
        assert advice.worthwhile == worth, after
        s = summarize(model_report(dataclasses.replace(fn, advice=advice))).functions[0]
        assert (s.advice is not None) == worth
        (candidates,) = [f for f in s.findings if "could reuse" in f.text]
        assert candidates.severity == ("warning" if worth else "info")
        if not worth:
            assert "not advised" in candidates.text
            assert ("under 1%" in candidates.text) == (after < peak), candidates.text
            assert ("the peak stays" in candidates.text) == (after == peak)
            # A donation that raises the peak says so, by how much (never "saves nothing").
            assert ("the peak rises from" in candidates.text) == (after > peak)
            lines = render(model_report(dataclasses.replace(fn, advice=advice)))
            assert not any("Advice:" in line for line in lines)
    # Dropping a donation that does nothing is advised whatever it saves.
    dropped = dataclasses.replace(fn.advice, peak_before=peak, peak_after=peak,
                                  drop=("batch",))
    assert dropped.worthwhile


def test_live_array_samples_are_not_repeated():
    from memscope.report import LiveSample, LiveTimeline, Runtime

    samples = (LiveSample(2, "step", 4, 64), LiveSample(2, "(end)", 4, 64))
    report = dataclasses.replace(model_report(), runtime=Runtime(
        live_timeline=LiveTimeline(samples, "every call", 0.001)))
    text = " ".join(render(report, width=200))
    assert "4 before call 2, 4 at the end" in text
    assert "4 at call 2, 4 at call 2" not in text
    assert "unavailable" not in text  # CPU never keeps device memory statistics


def test_many_functions_are_bounded_worst_and_largest_first():
    """A test suite's thousands of functions: the answer and the figures show the
    MAX_FUNCTIONS most urgent (the largest peaks first), the sections
    MAX_SECTIONS_BOUNDED, the rest counted, within 200 lines at 80 columns too;
    --detail shows all."""
    from memscope.render.terminal import MAX_FUNCTIONS, MAX_SECTIONS_BOUNDED

    clean = dataclasses.replace(model_step(0), inputs=(), outputs=(), variants=(), advice=None)
    functions = [dataclasses.replace(clean, name=f"test_{i}", memory=Memory(peak_bytes=i * KiB))
                 for i in range(300)]
    functions += [dataclasses.replace(model_step(1), name=f"step_{i}") for i in range(12)]
    lines = render(model_report(*functions), width=120)
    text = "\n".join(lines)
    assert len(lines) < 200, len(lines)
    assert len(render(model_report(*functions), width=80)) < 200
    answered = [ln.split(" (")[0] for ln in lines if "): peak " in ln and ln[:1] != " "]
    assert len(answered) == MAX_FUNCTIONS
    # The 12 with advice first, then the largest clean ones.
    assert answered[:12] == [f"step_{i}" for i in range(12)]
    assert answered[12:] == [f"test_{i}" for i in range(300 - (MAX_FUNCTIONS - 12), 300)]
    rest = 312 - MAX_FUNCTIONS
    assert (f"and {rest} more functions ({rest} with nothing to change; the largest peak "
            f"{rest - 1}.0 KiB)") in " ".join(text.split())
    assert f"| {rest} more " in text
    assert sum(ln.startswith("step_") and "calls" in ln for ln in lines) == MAX_SECTIONS_BOUNDED
    assert f"{12 - MAX_SECTIONS_BOUNDED} more functions with something to change: --detail" in \
        " ".join(text.split())
    full = render(model_report(*functions), width=120, detail=True)
    assert sum("): peak " in ln and ln[:1] != " " for ln in full) == 312


def test_a_bounded_answer_gives_each_function_one_signature_first_and_no_notes():
    """A suite that compiled one function for many signatures: the answer lists
    one signature of each function before a second of any, each without its
    notes (the recompiles are told once, between calls); --detail has them all."""
    from memscope.render.terminal import MAX_FUNCTIONS

    step = model_step(1)
    many = [dataclasses.replace(step, memory=Memory(peak_bytes=(100 + i) * KiB))
            for i in range(20)]  # one function, 20 signatures, the largest peaks
    others = [dataclasses.replace(step, name=f"other_{i}", source=f"other.py:{i}",
                                  memory=Memory(peak_bytes=i * KiB)) for i in range(5)]
    summary = summarize(model_report(*many, *others))
    assert any(f.severity == "info" for s in summary.functions for f in s.findings)
    lines = render(model_report(*many, *others), width=120)
    answered = [ln.split(" (")[0] for ln in lines if "): peak " in ln and ln[:1] != " "]
    assert len(answered) == MAX_FUNCTIONS
    # (by urgency and peak alone, all twelve would be train_step's)
    assert set(answered) == {"train_step", *(f"other_{i}" for i in range(5))}
    assert answered.count("train_step") == MAX_FUNCTIONS - 5
    answer = lines[:lines.index(next(ln for ln in lines if "more functions" in ln)) + 1]
    assert not any(ln.strip().startswith("note:") for ln in answer)
    full = render(model_report(*many, *others), width=120, detail=True)
    assert any(ln.strip().startswith("note:") for ln in full)


def test_the_terminal_and_markdown_give_sections_to_the_same_functions():
    """One choice of what to show (memscope.views.view): a function with
    something to change, or with figures the user asked for (other donations
    measured), gets a section in both views; one with nothing to say in neither."""
    from memscope.render.markdown_run import render_run_markdown
    from memscope.views.view import choose_view

    clean = dataclasses.replace(model_step(0), name="clean", inputs=(), outputs=(),
                                variants=(), advice=None)
    asked = dataclasses.replace(clean, name="asked", variants=(
        Variant("none", "donate_argnums=()", Memory(peak_bytes=70 * KiB)),))
    step = model_step(1)
    report = model_report(clean, asked, step)
    view = choose_view(report, summarize(report), rows=None, sections=None)
    assert [report.functions[i].name for i in view.sections] == ["asked", "train_step"]
    assert view.quiet == ("clean",)
    lines = render(report, width=120)
    sectioned = [ln.split(" ")[0] for ln in lines if re.match(r"^\w+  \S+  \d+ calls?$", ln)]
    out = io.StringIO()
    render_run_markdown(report, out)
    markdown = [name.replace("\\_", "_")
                for name in re.findall(r"^\*\*(.+?)\*\* at ", out.getvalue(), re.M)]
    assert sectioned == markdown == ["asked", "train_step"], (lines, out.getvalue())
    assert "- peak with other donations: no donation 70.0 KiB." in out.getvalue()
    assert "Not shown, nothing to change: clean." in " ".join(lines)
