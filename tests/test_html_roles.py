"""The HTML report's memory by role at the peak: one bar, a segment per role as
wide as its bytes, a legend, and each role's largest parts.

The page is the one ``memscope run --html`` writes, of a real program (a
two-layer MLP trained with optax's adam); its roles add up to the peak to the
byte (tests/test_roles.py). A real browser (headless Chromium, skipped where it
is absent) lays the bar out and paints it: the widths and colours it draws are
read back from the page and from its screenshot.
"""

from __future__ import annotations

import html
import io
import json
import math
import re
import struct
import zlib
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import jax
import jax.numpy as jnp
import optax
import pytest

from memscope.flow import analyze
from memscope.render.html import render_html
from memscope.render.html_live import BAR_WIDTH, ROLE_COLOURS, roles_view
from memscope.report import ROLE_WORDS, LiveAtPeak, PeakPart, Report, RoleBytes
from memscope.report.units import format_bytes
from memscope.views.roles_text import percent
from tests.support.browser import chromium, needs_chromium
from tests.support.records import report

_OPT = optax.adam(1e-3)


def _loss(params, x, y):
    h = jax.nn.relu(x @ params["w1"] + params["b1"])
    return jnp.mean((h @ params["w2"] + params["b2"] - y) ** 2)


def _step(params, opt_state, x, y):
    value, grads = jax.value_and_grad(_loss)(params, x, y)
    updates, opt_state = _OPT.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, value


@pytest.fixture(scope="module")
def mlp() -> Report:
    """A two-layer MLP's adam step under jax.jit, nothing donated, as a report."""
    k1, k2 = jax.random.split(jax.random.key(0))
    params = {"w1": jax.random.normal(k1, (256, 512)) * 0.01, "b1": jnp.zeros(512),
              "w2": jax.random.normal(k2, (512, 128)) * 0.01, "b2": jnp.zeros(128)}
    fn = analyze(jax.jit(_step), params, _OPT.init(params), jnp.ones((64, 256)),
                 jnp.ones((64, 128)))
    assert fn.live_at_peak is not None and len(fn.live_at_peak.roles) >= 3
    return report(fn)


def _live(rep: Report) -> LiveAtPeak:
    live = rep.functions[0].live_at_peak
    assert live is not None
    return live


def _html(rep: Report) -> str:
    out = io.StringIO()
    render_html(rep, out)
    return out.getvalue()


# --- reading the page back ---------------------------------------------------------


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    children: list[Node | str] = field(default_factory=list)

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def find(self, tag: str, cls: str | None = None) -> list[Node]:
        found = []
        for c in self.children:
            if isinstance(c, Node):
                if c.tag == tag and (cls is None or cls in c.attrs.get("class", "").split()):
                    found.append(c)
                found.extend(c.find(tag, cls))
        return found


#: Elements without an end tag.
VOID = frozenset({"meta", "br", "img", "input", "hr", "link", "col"})


class _Tree(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.stack = [Node("#document", {})]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Node(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        while len(self.stack) > 1 and self.stack.pop().tag != tag:
            pass

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse(text: str) -> Node:
    tree = _Tree()
    tree.feed(text)
    tree.close()
    return tree.stack[0]


def roles_div(page: Node) -> Node:
    (div,) = page.find("div", "roles")
    return div


# --- the HTML ----------------------------------------------------------------------


def test_one_segment_per_role_with_its_words_bytes_and_share(mlp):
    live = _live(mlp)
    div = roles_div(parse(_html(mlp)))
    assert div.text().startswith(f"Memory by role at the peak: {format_bytes(live.bytes)} live")
    (bar,) = div.find("svg", "rolebar")
    segments = bar.find("rect", "role")
    # one segment per role with bytes, in the report's order; no role of 0 bytes
    assert [(s.attrs["data-role"], int(s.attrs["data-bytes"])) for s in segments] == [
        (r.role, r.bytes) for r in live.roles]
    assert all(r.bytes > 0 for r in live.roles)
    x = 0.0
    for s, r in zip(segments, live.roles, strict=True):
        assert s.attrs["fill"] == ROLE_COLOURS[r.role]
        assert float(s.attrs["x"]) == pytest.approx(x, abs=0.002)
        assert float(s.attrs["width"]) == pytest.approx(r.bytes / live.bytes * BAR_WIDTH,
                                                        abs=0.002)
        x += float(s.attrs["width"])
        # hovering a segment: its words and its exact bytes
        (title,) = s.find("title")
        assert title.text().startswith(
            f"{ROLE_WORDS[r.role]}: {format_bytes(r.bytes)} ({r.bytes:,} bytes, "
            f"{percent(r.bytes, live.bytes)}, {r.buffers} buffer")
    assert x == pytest.approx(BAR_WIDTH, abs=0.01)
    legend = div.find("li")
    assert [li.text() for li in legend] == [
        f"{ROLE_WORDS[r.role]} {format_bytes(r.bytes)} ({percent(r.bytes, live.bytes)})"
        for r in live.roles]
    assert [li.attrs["title"] for li in legend] == [
        f"{r.bytes:,} bytes, {percent(r.bytes, live.bytes)}" for r in live.roles]
    assert "optimizer state" in div.text() and "parameters" in div.text()


def test_each_roles_largest_parts_are_tabled_below_the_bar(mlp):
    live = _live(mlp)
    div = roles_div(parse(_html(mlp)))
    (table,) = div.find("table", "roleparts")
    rows = [r for r in table.find("tr") if "data-role" in r.attrs]
    shown = [p for r in live.roles for p in live.parts_of(r.role)[:3]]
    assert [(r.attrs["data-role"], int(r.attrs["data-bytes"])) for r in rows] == [
        (p.role, p.bytes) for p in shown]
    for row, part in zip(rows, shown, strict=True):
        size = row.find("td")[-1]
        assert (size.text(), f"{part.bytes:,} bytes") == (
            format_bytes(part.bytes), size.attrs["title"].rpartition(", ")[2])
        assert row.find("td")[-2].text() == part.op
    more = table.find("tr", "more")
    assert len(more) == sum(len(live.parts_of(r.role)) > 3 for r in live.roles)


PKG = "/venv/lib/python3.12/site-packages/"
HAND = LiveAtPeak(
    bytes=1000,
    roles=(RoleBytes("activations", 600, 5), RoleBytes("unknown", 300, 1),
           RoleBytes("parameters", 100, 1)),
    parts=(PeakPart("activations", "model.py:12", "dot_general", 200, 1, "f32[50]"),
           PeakPart("activations", f"{PKG}flax/linen/linear.py:7", "add", 150, 2, "f32[30]"),
           PeakPart("unknown", None, "custom-call", 300, 1, "f32[75]"),
           PeakPart("activations", "model.py:13", "tanh", 100, 1, "f32[25]"),
           PeakPart("parameters", "params['w']", "argument", 100, 1, "f32[25]"),
           PeakPart("activations", "model.py:14", "exp", 90, 1, "f32[22]"),
           PeakPart("activations", "model.py:15", "log", 60, 1, "f32[15]")))


def test_cannot_be_told_is_said_in_words_in_the_line_the_bar_and_the_legend():
    div = roles_div(parse("".join(roles_view(HAND))))
    assert div.text().startswith("Memory by role at the peak: 1000 B live; 300 B (30%) "
                                 "cannot be told")
    (unknown,) = [s for s in div.find("rect", "role") if s.attrs["data-role"] == "unknown"]
    assert unknown.attrs["fill"] == ROLE_COLOURS["unknown"]
    assert unknown.find("title")[0].text() == "cannot be told: 300 B (300 bytes, 30%, 1 buffer)"
    # wide enough to be named inside: 30% of the bar
    assert "cannot be told 30%" in [t.text() for t in div.find("text")]
    assert "cannot be told 300 B (30%)" in [li.text() for li in div.find("li")]


def test_the_parts_table_lists_three_a_role_then_how_many_more():
    (table,) = roles_div(parse("".join(roles_view(HAND)))).find("table", "roleparts")
    cells = [[td.text() for td in tr.find("td")] for tr in table.find("tr")[1:]]
    assert cells == [
        ["activations", "model.py:12", "dot_general", "200 B"],
        ["flax/linen/linear.py:7", "add", "150 B"],
        ["model.py:13", "tanh", "100 B"],
        ["and 2 more", "150 B"],
        ["cannot be told", "no source line", "custom-call", "300 B"],
        ["parameters", "params['w']", "argument", "100 B"],
    ]
    (add,) = [tr for tr in table.find("tr") if tr.attrs.get("data-bytes") == "150"]
    assert add.find("td")[-1].attrs["title"] == "f32[30], 2 buffers, 150 bytes"


def test_no_roles_no_view():
    assert roles_view(LiveAtPeak(bytes=0)) == []
    assert roles_view(LiveAtPeak(bytes=10)) == []


# --- in a browser ------------------------------------------------------------------

#: Added to a copy of the page: the role view moved to the top (so that the
#: screenshot holds it) and what the browser laid out, written into the page.
MEASURE = """<script>
var roles = document.querySelector('div.roles');
document.body.prepend(roles);
var bar = roles.querySelector('svg.rolebar').getBoundingClientRect();
var out = {bar: [bar.left, bar.top, bar.width, bar.height], segments: []};
roles.querySelectorAll('rect.role').forEach(function (r) {
  var box = r.getBoundingClientRect();
  out.segments.push([r.dataset.role, box.left, box.width]);
});
var pre = document.createElement('pre');
pre.id = 'measured';
pre.textContent = JSON.stringify(out);
document.body.append(pre);
</script>"""

def _page(rep: Report, tmp_path: Path) -> Path:
    page = tmp_path / "report.html"
    page.write_text(_html(rep).replace("</body>", MEASURE + "</body>"), encoding="utf-8")
    return page


def _measured(page: Path, tmp_path: Path) -> dict:
    dom = chromium(page, tmp_path, "--dump-dom")
    assert dom.returncode == 0, dom.stderr
    found = re.search(r'<pre id="measured">(.*?)</pre>', dom.stdout, re.S)
    assert found is not None, dom.stdout[-2000:]
    return json.loads(html.unescape(found.group(1)))


@pytest.mark.browser
@needs_chromium
def test_in_a_browser_each_segment_is_as_wide_as_its_bytes(mlp, tmp_path):
    live = _live(mlp)
    laid = _measured(_page(mlp, tmp_path), tmp_path)
    left, _, width, height = laid["bar"]
    assert (width, height) == (BAR_WIDTH, 22)
    assert [role for role, _, _ in laid["segments"]] == [r.role for r in live.roles]
    x = left
    for (role, at, drawn), r in zip(laid["segments"], live.roles, strict=True):
        assert abs(drawn - r.bytes / live.bytes * width) < 1, role
        assert abs(at - x) < 1, role  # side by side, in order
        x += drawn
    assert abs(sum(drawn for _, _, drawn in laid["segments"]) - width) < 1


@pytest.mark.browser
@needs_chromium
def test_in_a_screenshot_each_roles_colour_is_as_wide_as_its_bytes(mlp, tmp_path):
    live = _live(mlp)
    page = _page(mlp, tmp_path)
    laid = _measured(page, tmp_path)
    shot = tmp_path / "shot.png"
    result = chromium(page, tmp_path, f"--screenshot={shot}")
    assert result.returncode == 0, result.stderr
    left, top, width, _ = laid["bar"]
    row = png_row(shot.read_bytes(), math.ceil(top) + 2)  # above the segments' labels
    bar = row[math.floor(left) - 3:math.ceil(left + width) + 3]
    white = (255, 255, 255)
    assert bar[:3] == [white] * 3 and bar[-3:] == [white] * 3
    # the bar is painted edge to edge, as wide as the page laid it out
    assert abs(sum(p != white for p in bar) - width) <= 2
    for r in live.roles:
        colour = tuple(int(ROLE_COLOURS[r.role][i:i + 2], 16) for i in (1, 3, 5))
        painted = sum(p == colour for p in bar)
        assert abs(painted - r.bytes / live.bytes * width) <= 2, (r.role, painted)


def png_row(data: bytes, y: int) -> list[tuple[int, int, int]]:
    """Row ``y`` of an 8-bit RGB or RGBA PNG (as Chromium writes them), as RGB."""
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    width, _, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", data[16:29])
    assert depth == 8 and colour in (2, 6) and interlace == 0
    chunks, at = [], 8
    while at < len(data):
        (size,), kind = struct.unpack(">I", data[at:at + 4]), data[at + 4:at + 8]
        if kind == b"IDAT":
            chunks.append(data[at + 8:at + 8 + size])
        at += size + 12
    raw = zlib.decompress(b"".join(chunks))
    step = 3 if colour == 2 else 4
    stride = width * step
    previous = bytearray(stride)
    for i in range(y + 1):
        start = i * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        for j in range(stride):
            a = line[j - step] if j >= step else 0
            b = previous[j]
            c = previous[j - step] if j >= step else 0
            if kind == 1:
                line[j] = (line[j] + a) & 0xFF
            elif kind == 2:
                line[j] = (line[j] + b) & 0xFF
            elif kind == 3:
                line[j] = (line[j] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                nearest = a if pa <= pb and pa <= pc else b if pb <= pc else c
                line[j] = (line[j] + nearest) & 0xFF
        previous = line
    return [tuple(previous[x * step:x * step + 3]) for x in range(width)]  # type: ignore[misc]
