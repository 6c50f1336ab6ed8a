"""MkDocs hook: links from a page to a repository file outside docs/ become links
to that file in the repository (``repo_url`` in mkdocs.yml).

The pages are written to be read on GitHub too, where ``[bench/README.md](../bench/README.md)``
is a working link. The site holds only docs/, so MkDocs would report such a link as
broken and ``mkdocs build --strict`` would fail. This hook rewrites a relative link
whose target exists in the repository outside docs/ into a link to it on the
repository's site (``…/blob/main/bench/README.md``, ``…/tree/main/examples/x`` for a
directory); a link to a file that exists nowhere is left alone, so the strict
build still catches it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

# [text](target) or [text](target#anchor), where target is a relative path.
_LINK = re.compile(r"\[(?P<text>[^\]]+)\]\((?P<target>\.\./[^)#\s]+)(?P<anchor>#[^)\s]*)?\)")
# The branch the repository's links name (README.md's links name the same).
BRANCH = "main"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Rewrite the page's links to repository files outside docs/."""
    docs_dir = Path(config["docs_dir"]).resolve()
    repository = docs_dir.parent
    page_dir = (docs_dir / page.file.src_path).parent
    repo_url = str(config["repo_url"]).rstrip("/")

    def rewrite(match: re.Match[str]) -> str:
        target = (page_dir / match["target"]).resolve()
        if docs_dir in target.parents or not target.exists():
            return match[0]
        path = target.relative_to(repository).as_posix()
        kind = "tree" if target.is_dir() else "blob"
        url = f"{repo_url}/{kind}/{BRANCH}/{path}{match['anchor'] or ''}"
        return f"[{match['text']}]({url})"

    return _LINK.sub(rewrite, markdown)
