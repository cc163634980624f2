"""The shell and the stylesheet of every memscope HTML page: the report's
(:mod:`memscope.render.html`) and the fit plan's (:mod:`memscope.render.plan`).
Each page adds only its own rules and its body."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from memscope.render.text import html_text as _t

#: The rules every page shares: the page, its title, the notes around the
#: figures, code, and tables with numbers aligned right (``td.n``).
CSS = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px auto;
max-width:1180px;color:#1d232b;background:#fff;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}.meta,.dim{color:#5b6673}code{font-size:12.5px}
table{border-collapse:collapse;margin:6px 0 10px;font-size:13px}
th,td{border:1px solid #dde3ea;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f3f6f9}td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
"""


def document(title: str, body: Iterable[str], *, css: str = "", script: str = "") -> str:
    """One self-contained HTML document: ``title`` (escaped here), the shared
    :data:`CSS` then the page's own ``css``, the ``body`` parts (already HTML)
    one a line, then ``script`` where given; nothing is fetched from elsewhere."""
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_t(title)}</title><style>{CSS}{css}</style></head><body>",
        *body, (f"<script>{script}</script>" if script else "") + "</body></html>"]) + "\n"


def hover_columns(xs: Sequence[float], data: Sequence[str], height: float,
                  margin: float) -> list[str]:
    """One transparent column per point of a chart (at ``xs``, with its ``data-``
    attributes), as wide as its stretch of the chart: halfway to each
    neighbour, ``margin`` beyond the first and last."""
    out = []
    for i, attributes in enumerate(data):
        left = (xs[i - 1] + xs[i]) / 2 if i else xs[i] - margin
        right = (xs[i] + xs[i + 1]) / 2 if i + 1 < len(xs) else xs[i] + margin
        out.append(f'<rect class="pt" x="{left:.1f}" y="0" width="{max(right - left, 1):.1f}" '
                   f'height="{height}" {attributes}/>')
    return out
