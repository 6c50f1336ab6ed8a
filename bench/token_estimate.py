"""How far cairn's token estimate is from real encodings, per kind of text.

``EstimateCounter`` (``cairn.agent.tokens``) guesses tokens from characters. This
measures it against OpenAI's ``o200k_base`` (gpt-4o, gpt-4.1, gpt-5, o-series)
and ``cl100k_base`` (gpt-4, gpt-3.5) encodings, offline, through cairn's
``ExactCounter``: the ``tokens`` extra (``bpe-openai``, whose wheel ships both
encoding files; tiktoken itself downloads them at run time, which cairn's tests
and benchmarks may not do). Install it to run this:
``.venv/bin/pip install -e '.[tokens]'``.

Texts, cut into chunks of about 2,000 characters:

* prose: English text: the licences in /usr/share/common-licenses (GPL-3,
  Apache-2.0) and the prose paragraphs of this repo's docs (no code blocks or tables);
* json: every tenth ``*.json`` under 200 KB in the environment's site-packages
  (here mostly botocore's API models and cfn-lint's schemas: API-shaped JSON);
* code: Python source, cairn's own ``src/cairn``;
* japanese: GnuPG's Japanese help (/usr/share/gnupg/help.ja.txt), the standard
  library's Japanese test texts (``test/cjkencodings/*jp*-utf8.txt``) and the
  Japanese translation of Rust by Example shipped with the Rust toolchain (the
  pages' text, code blocks left out), where this machine has them.

For each kind and encoding: the number of chunks, the real tokens and the
estimate's in total, the estimate over the real count in total, and the 10th,
50th and 90th percentile of that ratio per chunk, as a Markdown table (``--json``
for the numbers as JSON).

    .venv/bin/python -m bench.token_estimate
"""

from __future__ import annotations

import html
import json
import re
import statistics
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

from cairn.agent.tokens import EstimateCounter, ExactCounter, has_exact_counts

ROOT = Path(__file__).resolve().parents[1]
CHUNK = 2000
RUST_DOCS = "/root/.rustup/toolchains/stable-x86_64-unknown-linux-gnu/share/doc/rust/html"
ENCODINGS = ("o200k_base", "cl100k_base")


def _chunks(text: str) -> Iterator[str]:
    for start in range(0, len(text), CHUNK):
        piece = text[start : start + CHUNK]
        if len(piece.strip()) > CHUNK // 4:
            yield piece


def _read(paths: list[Path]) -> list[str]:
    texts = []
    for path in paths:
        try:
            texts.append(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError):
            continue
    return texts


def _prose_of_markdown(text: str) -> str:
    """The paragraphs of a Markdown file that are prose: no code, tables or headings."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    keep = [
        line
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith(("|", "#", "    ", "$ "))
    ]
    return "\n".join(keep)


def _text_of_html(page: str) -> str:
    """The text of an HTML page, without its code blocks, scripts and tags."""
    page = re.sub(r"<(pre|script|style|nav)\b.*?</\1>", "", page, flags=re.S | re.I)
    text = html.unescape(re.sub(r"<[^>]+>", " ", page))
    return "\n".join(line.strip() for line in text.splitlines() if line.strip())


def _files(root: str | Path, pattern: str) -> list[Path]:
    return sorted(Path(root).glob(pattern))


def samples() -> dict[str, list[str]]:
    """Texts of each kind found on this machine."""
    stdlib = sysconfig.get_paths()["stdlib"]
    packages = sysconfig.get_paths()["purelib"]
    licences = _read([Path("/usr/share/common-licenses") / n for n in ("GPL-3", "Apache-2.0")])
    docs = [_prose_of_markdown(t) for t in _read(_files(ROOT / "docs", "*.md"))]
    json_files = [p for p in _files(packages, "**/*.json") if p.stat().st_size < 200_000][::10]
    japanese = [Path("/usr/share/gnupg/help.ja.txt")]
    japanese += _files(stdlib, "test/cjkencodings/*jp*-utf8.txt")
    pages = _files(RUST_DOCS, "rust-by-example/ja/**/*.html")
    return {
        "prose": licences + docs,
        "json": _read(json_files),
        "code": _read(_files(ROOT / "src" / "cairn", "**/*.py")),
        "japanese": list(dict.fromkeys(_read(japanese))) + [_text_of_html(t) for t in _read(pages)],
    }


def measure(exact: ExactCounter, texts: list[str]) -> dict[str, float]:
    """The estimate against the ``exact`` count over the chunks of ``texts``."""
    counter = EstimateCounter()
    ratios: list[float] = []
    estimated = real = 0
    for text in texts:
        for piece in _chunks(text):
            guess, truth = counter.count(piece), exact.count(piece)
            estimated += guess
            real += truth
            ratios.append(guess / truth)
    if not ratios:
        return {"chunks": 0}
    deciles = statistics.quantiles(ratios, n=10) if len(ratios) > 1 else ratios * 9
    return {
        "chunks": len(ratios),
        "real": real,
        "estimate": estimated,
        "total": estimated / real,
        "p10": deciles[0],
        "p50": statistics.median(ratios),
        "p90": deciles[-1],
    }


def table(results: dict[str, dict[str, dict[str, float]]]) -> str:
    """The results as a Markdown table, one row per encoding and kind of text."""
    lines = [
        "| encoding | text | chunks | real tokens | estimate | estimate / real | p10 | p50 | p90 |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, kinds in results.items():
        for kind, m in kinds.items():
            if not m["chunks"]:
                lines.append(f"| {name} | {kind} | 0 | | | | | | |")
                continue
            lines.append(
                f"| {name} | {kind} | {m['chunks']:.0f} | {m['real']:,.0f} "
                f"| {m['estimate']:,.0f} | {m['total']:.2f} | {m['p10']:.2f} "
                f"| {m['p50']:.2f} | {m['p90']:.2f} |"
            )
    return "\n".join(lines)


def main() -> None:
    if not has_exact_counts():
        sys.exit("needs the tokens extra (bpe-openai): pip install -e '.[tokens]'")
    found = samples()
    results = {}
    for name in ENCODINGS:
        exact = ExactCounter(name)
        results[name] = {kind: measure(exact, texts) for kind, texts in found.items()}
    print(json.dumps(results, indent=2) if "--json" in sys.argv[1:] else table(results))


if __name__ == "__main__":
    main()
