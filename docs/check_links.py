#!/usr/bin/env python3
"""Check every relative link in README.md and docs/*.md: the file it names exists, and a
``#fragment`` names a heading of that file (GitHub's anchors). Prints each broken link and
exits 1 if there is one.

    python docs/check_links.py
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def anchors(path: Path) -> set[str]:
    """GitHub's anchors of a markdown file's headings."""
    found = set()
    for line in FENCE.sub("", path.read_text(encoding="utf-8")).splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


def broken(doc: Path) -> list[str]:
    """The broken relative links of one markdown file."""
    bad = []
    text = FENCE.sub("", doc.read_text(encoding="utf-8"))
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        name, _, fragment = target.partition("#")
        path = (doc.parent / name).resolve() if name else doc
        if not path.exists():
            bad.append(f"{doc.relative_to(ROOT)}: {target} (no such file)")
        elif fragment and path.suffix == ".md" and fragment not in anchors(path):
            bad.append(f"{doc.relative_to(ROOT)}: {target} (no such heading)")
    return bad


def main() -> int:
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    bad = [line for doc in docs for line in broken(doc)]
    print("\n".join(bad) or f"{len(docs)} files, every relative link resolves")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
