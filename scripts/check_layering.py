#!/usr/bin/env python3
"""Check that src/ keeps its layering: every `#include "<dir>/..."` in src/<folder>/ names the
folder itself or a layer below it in the graph LAYERS, and each src/<folder>/CMakeLists.txt links
exactly the larql_* libraries the graph gives it.

LAYERS is the one place the graph is written (docs/architecture.md "Layering" explains it). A
folder may include its direct dependencies and, transitively, theirs. The build enforces the same
graph through per-library include directories (CMakeLists.txt, larql_library); this script gives
the clear message and also catches a header that is only ever compiled from a higher layer.

Usage: check_layering.py [--root DIR]   (DIR holds src/; default: the repository of this script)
Exit 0 when the tree keeps the layering, 1 with one line per violation otherwise. Stdlib only.
"""
import argparse
import pathlib
import re
import sys

# folder -> the folders it depends on directly (its larql_<folder> library's DEPS).
LAYERS = {
    "util": [],
    "formats": ["util"],
    "vindex": ["util"],
    "lql": ["inference", "extract"],
    "quant": ["util"],
    "compute": ["quant"],
    "model": ["compute", "formats", "tokenizer", "vindex"],
    "tokenizer": ["formats"],
    "inference": ["model"],
    "extract": ["model", "vindex"],
    "boundary": ["util"],
    "kv": ["inference", "boundary", "tokenizer"],
    "accuracy": ["kv"],
    "shard": ["inference"],
    "cuda": ["inference"],
    "api": ["kv", "lql", "shard", "cuda"],
    "server": ["api", "kv", "lql"],
    "vindexfile": ["extract", "lql"],
    "cli": ["api", "kv", "accuracy", "extract", "lql", "server", "shard", "vindexfile"],
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"/]+)/[^"]*"')
DEPS = re.compile(r"larql_library\(\s*larql_(\w+)(.*?)\)", re.S)
CLI_LINK = re.compile(r"target_link_libraries\(\s*larql\s+PRIVATE(.*?)\)", re.S)


def closure(graph):
    """folder -> every folder below it (direct and transitive); raises on a cycle or an unknown name."""
    out, state = {}, {}

    def visit(f, path):
        if f not in graph:
            raise ValueError(f"{path[-1]} depends on unknown folder {f!r}")
        if state.get(f) == "open":
            raise ValueError("cycle: " + " -> ".join(path + [f]))
        if f in out:
            return out[f]
        state[f] = "open"
        below = set()
        for d in graph[f]:
            below |= {d} | visit(d, path + [f])
        state[f] = "done"
        out[f] = below
        return below

    for f in graph:
        visit(f, [])
    return out


def check(root, graph=LAYERS):
    src = root / "src"
    errors = []
    try:
        below = closure(graph)
    except ValueError as e:
        return [f"graph: {e}"]
    folders = sorted(p.name for p in src.iterdir() if p.is_dir())
    for folder in folders:
        if folder not in graph:
            errors.append(f"src/{folder}/: folder not in the layering graph (scripts/check_layering.py LAYERS)")
            continue
        allowed = below[folder] | {folder}
        for path in sorted((src / folder).rglob("*")):
            if path.suffix not in (".h", ".cc", ".cu", ".cuh") or not path.is_file():
                continue
            for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                dep = m.group(1)
                rel = path.relative_to(root)
                if dep not in graph:
                    errors.append(f"{rel}:{n}: includes from unknown folder {dep!r}")
                elif dep not in allowed:
                    errors.append(f"{rel}:{n}: {folder}/ may not include {dep}/ "
                                  f"(allowed: {', '.join(sorted(allowed))})")
        cmake = src / folder / "CMakeLists.txt"
        if cmake.is_file():
            text = re.sub(r"#[^\n]*", "", cmake.read_text())
            m = DEPS.search(text) or CLI_LINK.search(text)
            if m:
                body = m.group(m.lastindex)
                if m.re is DEPS:
                    body = body.split("PRIVATE_DEPS")[0]
                linked = sorted(set(re.findall(r"\blarql_(\w+)", body)))
                if linked != sorted(graph[folder]):
                    errors.append(f"src/{folder}/CMakeLists.txt: links {linked}, the graph says "
                                  f"{sorted(graph[folder])}")
    return errors


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=pathlib.Path, default=pathlib.Path(__file__).resolve().parent.parent)
    args = ap.parse_args()
    if not (args.root / "src").is_dir():
        print(f"check_layering: no src/ under {args.root}", file=sys.stderr)
        return 2
    errors = check(args.root)
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        print(f"check_layering: {len(errors)} violation(s); the graph is in scripts/check_layering.py "
              "and docs/architecture.md", file=sys.stderr)
        return 1
    print(f"check_layering: {len(LAYERS)} layers, includes and CMake links keep the graph")
    return 0


if __name__ == "__main__":
    sys.exit(main())
