"""The portal's Content Security Policy (``script-src 'self'``) blocks inline event handlers:
an ``onsubmit="return confirm(…)"`` never ran, and the workspace Delete (with its home
folder) went through without asking. No template may carry one; confirmations come from
``static/js/portal.js`` (``data-confirm``)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# An on… attribute of an HTML tag (template tags, such as {% include … only=… %}, removed).
INLINE_HANDLER = re.compile(r"<[^>]*\son[a-z]+\s*=", re.IGNORECASE)
TEMPLATE_TAG = re.compile(r"{%.*?%}|{{.*?}}")


def test_no_template_carries_an_inline_event_handler() -> None:
    found = [
        f"{path.relative_to(REPO)}:{number}"
        for path in sorted((REPO / "templates").rglob("*.html"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if INLINE_HANDLER.search(TEMPLATE_TAG.sub("", line))
    ]
    assert found == []


def test_the_workspace_delete_asks_through_the_static_script() -> None:
    template = (REPO / "templates" / "workspaces" / "list.html").read_text()
    assert 'data-confirm="Delete workspace {{ job.name }}?"' in template
    script = (REPO / "static" / "js" / "portal.js").read_text()
    assert 'getAttribute("data-confirm")' in script and "window.confirm" in script
