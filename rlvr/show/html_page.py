"""The frame every `rlvr show --html` page shares: one self-contained file (inline CSS and
JavaScript, no network), a step selector and a filter, and a strict Content-Security-Policy.

Model text is untrusted: every string goes through `esc`, and the policy allows only the
page's own two scripts (by their SHA-256), so even a string that slipped past escaping
could not run. The first script records any uncaught error in `data-errors` on <html>;
the second shows the selected step's rows that pass the filter (both can be given in the
address: `show.html#step=40&filter=wrong`) and sets `data-ready`, `data-shown` and the
status line, which the browser check (rlvr/show/browser.py) reads.
"""

from __future__ import annotations

import base64
import hashlib
import html

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1200px;padding:16px;color:#222}
h1{font-size:20px;margin:0 0 8px}h2{font-size:16px;margin:20px 0 8px}
.kv{display:grid;grid-template-columns:repeat(auto-fill,minmax(260px,1fr));gap:2px 16px}
.kv span{color:#666}
.curves{display:flex;flex-wrap:wrap;gap:12px}.curves svg{border:1px solid #ddd;background:#fff}
.controls{position:sticky;top:0;background:#f6f6f6;padding:6px 8px;border:1px solid #ddd}
.controls label{margin-right:14px}#status{color:#555}
.row{border:1px solid #ddd;border-left:4px solid #c33;margin:8px 0;padding:6px 10px}
.row.correct{border-left-color:#2a2}.row.dropped{opacity:.6}
.head{font-size:13px;color:#444}.head b{color:#222}
pre{white-space:pre-wrap;word-break:break-word;margin:4px 0;font:13px/1.4 ui-monospace,monospace}
pre.prompt{color:#777}
.with-images{display:flex;gap:12px;align-items:flex-start}
.images img{image-rendering:pixelated;border:1px solid #ddd;margin:4px 4px 0 0}
.seg-observation{background:#dff1ff;color:#035}.seg-forced{background:#fff1c2;color:#640}
.seg-masked{color:#999;text-decoration:line-through}
.legend span{padding:0 4px;margin-right:6px}
table.turns{border-collapse:collapse;font-size:12px}
table.turns td,table.turns th{border:1px solid #ddd;padding:1px 6px;vertical-align:top;text-align:left}
table.turns pre{margin:0}
.sides{display:grid;grid-template-columns:1fr 1fr;gap:10px}.ok{color:#2a2}.bad{color:#c33}
""".strip()

GUARD_JS = """
document.documentElement.dataset.errors = "";
window.addEventListener("error", function (e) {
  document.documentElement.dataset.errors += (e.message || "error") + "\\n";
});
""".strip()

VIEW_JS = """
(function () {
  var root = document.documentElement;
  var step = document.getElementById("step");
  var filter = document.getElementById("filter");
  var status = document.getElementById("status");
  function update() {
    var shown = 0, total = 0;
    var sections = document.querySelectorAll("section.rows");
    for (var i = 0; i < sections.length; i++) {
      var on = !step || sections[i].dataset.step === step.value;
      sections[i].hidden = !on;
      var rows = sections[i].querySelectorAll(".row");
      for (var j = 0; j < rows.length; j++) {
        var tags = (rows[j].dataset.tags || "").split(" ");
        var pass = on && (filter.value === "all" || tags.indexOf(filter.value) >= 0);
        rows[j].hidden = !pass;
        if (on) total++;
        if (pass) shown++;
      }
    }
    status.textContent = shown + " of " + total + " rows shown";
    root.dataset.shown = String(shown);
  }
  var given = new URLSearchParams(location.hash.slice(1));  // e.g. #step=40&filter=wrong
  if (step && given.get("step")) step.value = given.get("step");
  if (given.get("filter")) filter.value = given.get("filter");
  if (step) step.addEventListener("change", update);
  filter.addEventListener("change", update);
  update();
  root.dataset.ready = "1";
})();
""".strip()


def esc(value: object) -> str:
    """`value` as HTML text or attribute value (quotes escaped too)."""
    return html.escape(str(value), quote=True)


def _sha256(script: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(script.encode()).digest()).decode() + "'"


def page(title: str, body: str) -> str:
    """A complete HTML document around `body` (which must already be escaped)."""
    policy = (
        f"default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
        f"script-src {_sha256(GUARD_JS)} {_sha256(VIEW_JS)}"
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{esc(policy)}">'
        f"<title>{esc(title)}</title><script>{GUARD_JS}</script><style>{CSS}</style>"
        f"</head><body>\n{body}\n<script>{VIEW_JS}</script></body></html>\n"
    )


def controls(steps: list[int] | None, selected: int | None, filters: dict[str, str]) -> str:
    """The step selector (None: a page without steps) and the filter, with the status."""
    parts = ['<div class="controls">']
    if steps is not None:
        options = "".join(
            f'<option value="{s}"{" selected" if s == selected else ""}>{s}</option>' for s in steps
        )
        parts.append(f'<label>step <select id="step">{options}</select></label>')
    choices = "".join(f'<option value="{esc(v)}">{esc(t)}</option>' for v, t in filters.items())
    parts.append(f'<label>show <select id="filter">{choices}</select></label>')
    parts.append('<span id="status">rows need JavaScript to be filtered</span></div>')
    return "".join(parts)


def kv_grid(pairs: list[tuple[str, object]]) -> str:
    """Name-value pairs in a grid of columns."""
    cells = "".join(f"<div><span>{esc(k)}</span> {esc(v)}</div>" for k, v in pairs)
    return f'<div class="kv">{cells}</div>'
