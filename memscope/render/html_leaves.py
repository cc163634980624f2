"""The HTML table of every leaf of a function: sorted by size and filtered by
fate and path text in the page by :data:`SCRIPT`; embedded where no script
runs (a notebook's output), collapsed and its first rows only.

Every report string is escaped into text or data attributes; :data:`SCRIPT`
holds no report data, it only reads the rows of the table it is given.
"""

from __future__ import annotations

from collections.abc import Sequence

from memscope.render.text import html_text as _t
from memscope.report import FunctionReport, InputBuffer, OutputBuffer, is_host_kind
from memscope.report.units import format_bytes
from memscope.views.leaves import fate_label, leaf_reason, observed_label

#: The leaf table's sorting and filtering. It holds no report data: it reads the
#: rows' data attributes, so nothing from the report ever runs as script.
SCRIPT = """
document.querySelectorAll('.leafview').forEach(function (view) {
  var table = view.querySelector('table.leaves'), body = table.tBodies[0];
  var text = view.querySelector('.path-filter');
  var fate = view.querySelector('.fate-filter');
  var shown = view.querySelector('.shown'), more = view.querySelector('.more');
  var limit = Number(view.dataset.limit), all = false;
  // Keys are read once: reading data attributes in every comparison is slow.
  var keys = Array.prototype.map.call(body.rows, function (r) {
    return {row: r, bytes: Number(r.dataset.bytes), path: r.dataset.path,
            low: r.dataset.path.toLowerCase(), fate: r.dataset.fate,
            candidate: r.dataset.candidate === '1'};
  });
  // Only the first rows that match are laid out: a table of thousands of rows
  // takes seconds to lay out, a few hundred take a moment.
  function apply() {
    var q = text.value.toLowerCase(), f = fate.value, n = 0;
    for (var i = 0; i < keys.length; i++) {
      var k = keys[i];
      var ok = (!f || k.fate === f || (f === 'candidate' && k.candidate)) &&
               (!q || k.low.indexOf(q) >= 0);
      if (ok) n++;
      k.row.hidden = !ok || (!all && n > limit);
    }
    shown.textContent = String(n);
    more.hidden = all || n <= limit;
  }
  text.addEventListener('input', apply);
  fate.addEventListener('change', apply);
  more.addEventListener('click', function () { all = true; apply(); });
  view.querySelectorAll('th[data-sort]').forEach(function (th) {
    th.querySelector('button').addEventListener('click', function () {
      var key = th.dataset.sort, down = th.getAttribute('aria-sort') !== 'descending';
      view.querySelectorAll('th[data-sort]').forEach(function (o) {
        o.setAttribute('aria-sort', 'none'); });
      th.setAttribute('aria-sort', down ? 'descending' : 'ascending');
      keys.sort(function (x, y) {
        var a = x[key], b = y[key];
        var c = key === 'bytes' ? a - b : (a < b ? -1 : a > b ? 1 : 0);
        return down ? -c : c;
      });
      table.removeChild(body);  // reorder off the page, then put it back once
      keys.forEach(function (k) { body.appendChild(k.row); });
      apply();
      table.appendChild(body);
    });
  });
  apply();
});
"""

#: Rows of a leaf table laid out at once (the rest: a button away, and in JSON).
LEAF_ROWS = 500


def leaf_table(fn: FunctionReport, *, script: bool = True) -> list[str]:
    """Every leaf of ``fn``: a table that sorts and filters with :data:`SCRIPT`, its
    first :data:`LEAF_ROWS` rows laid out at once; without ``script``, collapsed."""
    leaves: list[InputBuffer | OutputBuffer] = [*fn.inputs, *fn.closed_over_refs,
                                                *fn.outputs]
    if not leaves:
        return []
    if not script:
        return _static_leaf_table(fn, leaves)
    fates: list[str] = list(dict.fromkeys(fate_label(b) for b in leaves))
    if any(b.candidate for b in fn.inputs):
        fates.append("candidate")
    options = "".join(f'<option value="{_t(f)}">{_t(f)}</option>' for f in fates)
    closed = {id(b) for b in fn.closed_over_refs}
    rows = [_leaf_row(b, closed_over=id(b) in closed) for b in leaves]
    head = ('<tr><th data-sort="path" aria-sort="none"><button type="button">leaf</button></th>'
            "<th>kind</th><th>shape</th><th>dtype</th>"
            '<th data-sort="bytes" aria-sort="none"><button type="button">size</button></th>'
            '<th data-sort="fate" aria-sort="none"><button type="button">fate</button></th>'
            "<th>partner</th><th>at run time</th><th>reason</th></tr>")
    return [f"<h3>Every leaf ({len(leaves)})</h3>",
            f'<div class="leafview" data-limit="{LEAF_ROWS}"><p class="controls">'
            '<input type="search" class="path-filter" placeholder="filter by path text" '
            'aria-label="filter leaves by path"> <select class="fate-filter" '
            f'aria-label="filter leaves by fate"><option value="">every fate</option>{options}'
            f'</select> <span class="shown">{len(leaves)}</span> of {len(leaves)} match; '
            "click leaf, size or fate to sort "
            f'<button type="button" class="more" hidden>show every match (the first '
            f"{LEAF_ROWS} are shown)</button></p>",
            f'<table class="leaves"><thead>{head}</thead><tbody>{"".join(rows)}</tbody>'
            "</table></div>"]


def _static_leaf_table(fn: FunctionReport, leaves: Sequence[InputBuffer | OutputBuffer]
                       ) -> list[str]:
    """Every leaf without a script to sort or filter it: collapsed, the first
    :data:`LEAF_ROWS` rows, and how many more there are."""
    closed = {id(b) for b in fn.closed_over_refs}
    rows = [_leaf_row(b, closed_over=id(b) in closed) for b in leaves[:LEAF_ROWS]]
    more = len(leaves) - len(rows)
    head = ("<tr><th>leaf</th><th>kind</th><th>shape</th><th>dtype</th><th>size</th>"
            "<th>fate</th><th>partner</th><th>at run time</th><th>reason</th></tr>")
    return [f"<details><summary>Every leaf ({len(leaves)})</summary>",
            f'<table class="leaves"><thead>{head}</thead><tbody>{"".join(rows)}</tbody>'
            "</table>",
            *([f'<p class="dim">and {more} more (every leaf: the JSON report, or '
               "<code>memscope show --leaves</code> on it)</p>"] if more else []),
            "</details>"]


def _leaf_row(b: InputBuffer | OutputBuffer, *, closed_over: bool = False) -> str:
    if isinstance(b, InputBuffer):
        kind = "closed-over Ref" if closed_over else "input Ref" if b.ref else "input"
        partner = b.output or ("candidate" if b.candidate else "")
        observed = observed_label(b)
        reason, candidate = leaf_reason(b) or "", "1" if b.candidate else "0"
    else:
        kind, partner, observed, reason, candidate = "output", b.input or "", "", "", "0"
    if is_host_kind(b.memory_kind):  # where it lives, when not on the device
        kind = f"{kind} in {b.memory_kind}"
    path, fate = _t(b.path), _t(fate_label(b))
    return (f'<tr data-path="{path}" data-bytes="{b.bytes}" data-fate="{fate}" '
            f'data-candidate="{candidate}"><td><code>{path}</code></td><td>{kind}</td>'
            f"<td>{_t(_shape(b.shape))}</td><td>{_t(b.dtype)}</td>"
            f'<td class="n">{_t(format_bytes(b.bytes))}</td>'
            f'<td class="fate-{fate}">{fate}</td>'
            f"<td><code>{_t(partner)}</code></td><td>{_t(observed)}</td>"
            f'<td class="reason">{_t(reason)}</td></tr>')


def _shape(shape: tuple[int, ...]) -> str:
    return f"({','.join(map(str, shape))}{',' if len(shape) == 1 else ''})"

