#!/usr/bin/env python3
"""The repository checks must be able to fail: scripts/check_layering.py and
scripts/check_doc_citations.py run on small temporary trees, each with one violation, and must
exit 1 naming it; the same trees without the violation must pass. Stdlib unittest (ctest
`layering_scripts_reject_violations`)."""
import pathlib
import subprocess
import sys
import tempfile
import unittest

REPO = pathlib.Path(__file__).resolve().parents[2]
LAYERING = REPO / "scripts" / "check_layering.py"
CITATIONS = REPO / "scripts" / "check_doc_citations.py"
FOLDERS = ["util", "formats", "quant", "compute", "model", "tokenizer", "inference", "boundary",
           "kv", "accuracy", "cli"]


def run(script, root):
    p = subprocess.run([sys.executable, str(script), "--root", str(root)],
                       capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout + p.stderr


class Tree:
    """A temporary repository: src/<folder>/ for every layer, docs/ with one page."""

    def __enter__(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.root = pathlib.Path(self._tmp.name)
        for f in FOLDERS:
            (self.root / "src" / f).mkdir(parents=True)
        self.write("src/util/error.h", "#pragma once\n")
        self.write("src/kv/engine.h", '#pragma once\n#include "inference/forward.h"\n#include "util/error.h"\n')
        self.write("src/inference/forward.h", '#pragma once\n#include "model/model.h"\n#include "compute/ops.h"\n')
        self.write("docs/engines.md", "# KV engines\n\n## Spec strings\n\n## Interface\n")
        return self

    def __exit__(self, *exc):
        self._tmp.cleanup()

    def write(self, rel, text):
        p = self.root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


class LayeringTest(unittest.TestCase):
    def test_clean_tree_passes(self):
        with Tree() as t:
            rc, out = run(LAYERING, t.root)
            self.assertEqual(rc, 0, out)

    def test_upward_include_fails(self):
        with Tree() as t:
            t.write("src/util/bad.h", '#pragma once\n#include "kv/engine.h"\n')
            rc, out = run(LAYERING, t.root)
            self.assertEqual(rc, 1, out)
            self.assertIn("src/util/bad.h:2: util/ may not include kv/", out)

    def test_sibling_include_fails(self):
        with Tree() as t:  # boundary/ depends on util/ only, not on the model chain
            t.write("src/boundary/codec.cc", '#include "boundary/codec.h"\n  #  include "model/model.h"\n')
            rc, out = run(LAYERING, t.root)
            self.assertEqual(rc, 1, out)
            self.assertIn("src/boundary/codec.cc:2: boundary/ may not include model/", out)

    def test_unknown_folder_fails(self):
        with Tree() as t:
            (t.root / "src" / "webui").mkdir()
            rc, out = run(LAYERING, t.root)
            self.assertEqual(rc, 1, out)
            self.assertIn("src/webui/: folder not in the layering graph", out)

    def test_cmake_links_outside_the_graph_fail(self):
        with Tree() as t:
            t.write("src/inference/CMakeLists.txt",
                    "larql_library(larql_inference SOURCES ${srcs} DEPS larql_model larql_tokenizer)\n")
            rc, out = run(LAYERING, t.root)
            self.assertEqual(rc, 1, out)
            self.assertIn("src/inference/CMakeLists.txt: links ['model', 'tokenizer']", out)
            t.write("src/inference/CMakeLists.txt",
                    "larql_library(larql_inference SOURCES ${srcs} DEPS larql_model\n  PRIVATE_DEPS Foo::foo)\n")
            rc, out = run(LAYERING, t.root)
            self.assertEqual(rc, 0, out)


class DocCitationsTest(unittest.TestCase):
    def test_clean_tree_passes(self):
        with Tree() as t:
            t.write("src/kv/registry.h", '// Grammar: docs/engines.md "Spec strings".\n'
                                         "// Format spec: ggml/docs/gguf.md (another project's).\n")
            rc, out = run(CITATIONS, t.root)
            self.assertEqual(rc, 0, out)

    def test_missing_document_fails(self):
        with Tree() as t:
            # Names are split so that this file does not cite them itself (the check scans tests/).
            t.write("src/formats/gguf.h", "// Layout: docs/gguf" + ".md\n")
            rc, out = run(CITATIONS, t.root)
            self.assertEqual(rc, 1, out)
            self.assertIn("src/formats/gguf.h:1: cites docs/gguf" + ".md, which does not exist", out)

    def test_missing_section_fails(self):
        with Tree() as t:
            t.write("tests/kv/x_test.cc", '// (docs/engines.md ("Interface", "Measurement"))\n')
            rc, out = run(CITATIONS, t.root)
            self.assertEqual(rc, 1, out)
            self.assertIn("tests/kv/x_test.cc:1: docs/engines.md has no heading containing 'Measurement'", out)
            self.assertNotIn("'Interface'", out)

    def test_bare_name_outside_docs_fails(self):
        with Tree() as t:
            t.write("tests/python/test_x.py", '"""Never a crash (ARCHITECTURE' + '.md, Errors)."""\n')
            rc, out = run(CITATIONS, t.root)
            self.assertEqual(rc, 1, out)
            self.assertIn("tests/python/test_x.py:1: cites ARCHITECTURE" + ".md", out)

    def test_design_notes_outside_the_repo_fail(self):
        with Tree() as t:
            t.write("src/kv/engine.h", "// Specification: shared" + "/design/engines-spec.txt\n")
            t.write("docs/cli.md", "# cli\nSee ../" + "shared/notes for more.\n")
            rc, out = run(CITATIONS, t.root)
            self.assertEqual(rc, 1, out)
            self.assertIn("src/kv/engine.h:1: cites design notes outside the repository", out)
            self.assertIn("docs/cli.md:2: cites design notes outside the repository", out)


if __name__ == "__main__":
    unittest.main(verbosity=2)
