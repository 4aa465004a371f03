#!/usr/bin/env python3
"""Check that the design documents the code cites are in this repository.

In src/ and tests/ (C++ and Python sources, CMake files):
  - every cited `docs/<name>.md` exists, and every section quoted right after it
    (`docs/engines.md "Spec strings"`, `docs/engines.md ("apollo", "markov-rs")`,
    `docs/cli.md's "Limits"`) is a heading of that document (a heading that contains the text);
  - a bare `<NAME>.md` (no directory) names a file in docs/ or the repository root;
  - no citation points outside the repository at the design notes it was written from
    (a `shared/design/` or `../shared` path).
In docs/, README.md and the CMake files the last rule applies too. A path such as
`ggml/docs/gguf.md` (another project's docs) is not a citation of this repository.

Usage: check_doc_citations.py [--root DIR]   (default: the repository of this script)
Exit 0 when every citation resolves, 1 with one line per problem. Stdlib only.
"""
import argparse
import pathlib
import re
import sys

SOURCE_SUFFIXES = {".h", ".cc", ".inl", ".py", ".txt", ".cmake"}
# Split so that this file does not cite them itself.
FORBIDDEN = re.compile(r"(?:shared" + r"/design|\.\./shared" + r"\b)")
DOCS_CITE = re.compile(r'(?<![\w/.-])docs/([\w.-]+\.md)((?:\'s)?(?:\s+\(?|\s*\()"[^"\n]+"(?:\s*,\s*"[^"\n]+")*)?')
QUOTED = re.compile(r'"([^"\n]+)"')
BARE_MD = re.compile(r"(?<![\w/.-])([\w-]+\.md)\b")


def headings(path):
    return [re.sub(r"^#+\s*", "", line).strip()
            for line in path.read_text(errors="replace").splitlines() if line.startswith("#")]


def source_files(root, dirs):
    for d in dirs:
        base = root / d
        if not base.is_dir():
            continue
        for p in sorted(base.rglob("*")):
            if p.is_file() and (p.suffix in SOURCE_SUFFIXES or p.name == "CMakeLists.txt"):
                yield p


def check(root):
    errors = []
    docs = root / "docs"
    heads = {}
    for path in source_files(root, ["src", "tests"]):
        rel = path.relative_to(root)
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for m in DOCS_CITE.finditer(line):
                doc = docs / m.group(1)
                if not doc.is_file():
                    errors.append(f"{rel}:{n}: cites docs/{m.group(1)}, which does not exist")
                    continue
                if m.group(2):
                    hs = heads.setdefault(doc, headings(doc))
                    for section in QUOTED.findall(m.group(2)):
                        if not any(section in h for h in hs):
                            errors.append(f"{rel}:{n}: docs/{m.group(1)} has no heading containing "
                                          f"{section!r}")
            rest = DOCS_CITE.sub("", line)
            for m in BARE_MD.finditer(rest):
                name = m.group(1)
                if not ((docs / name).is_file() or (root / name).is_file()):
                    errors.append(f"{rel}:{n}: cites {name}, which is neither in docs/ nor at the "
                                  "repository root")
    others = [p for p in [root / "README.md", root / "CMakeLists.txt"] if p.is_file()]
    others += sorted(docs.glob("*.md")) if docs.is_dir() else []
    for path in list(source_files(root, ["src", "tests"])) + others:
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if FORBIDDEN.search(line):
                errors.append(f"{path.relative_to(root)}:{n}: cites design notes outside the "
                              "repository; cite docs/ instead")
    return errors


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=pathlib.Path, default=pathlib.Path(__file__).resolve().parent.parent)
    args = ap.parse_args()
    errors = check(args.root)
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        print(f"check_doc_citations: {len(errors)} problem(s)", file=sys.stderr)
        return 1
    print("check_doc_citations: every docs/ citation in src/ and tests/ resolves")
    return 0


if __name__ == "__main__":
    sys.exit(main())
