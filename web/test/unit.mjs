// Unit tests of the console's pure helpers (src/lqltext.ts) under plain Node: the TypeScript is
// transpiled by the compiler already in devDependencies into a temporary file, then imported.
// Run by `npm test` (part of `make test-web`).
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import assert from "node:assert/strict";
import { test } from "node:test";
import ts from "typescript";

const src = fs.readFileSync(new URL("../src/lqltext.ts", import.meta.url), "utf8");
const js = ts.transpileModule(src, { compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 } }).outputText;
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "larql-web-unit-"));
fs.writeFileSync(path.join(tmp, "lqltext.mjs"), js);
const { lqlQuote, LqlQuoteError, utf16OffsetOfColumn, codePointLengthAt, errorText } = await import(
  pathToFileURL(path.join(tmp, "lqltext.mjs")).href
);
fs.rmSync(tmp, { recursive: true, force: true });

// The server's column of a token: 1 + the code points before it on its line (the contract).
const serverColumn = (line, token) => 1 + [...line.slice(0, line.indexOf(token))].length;

test("a code-point column lands on the token in UTF-16 units", () => {
  for (const line of ['DESCRIBE "France" AT LAYR 3', 'DESCRIBE "café" AT LAYR 3', 'DESCRIBE "😀🇫🇷" AT LAYR 3',
                      'DESCRIBE "a𝔘b€" AT LAYR 3', "  \t😀 LAYR"]) {
    const off = utf16OffsetOfColumn(line, serverColumn(line, "LAYR"));
    assert.equal(line.slice(off, off + 4), "LAYR", line);
  }
  // Astral characters: 1 code point, 2 UTF-16 units each.
  assert.equal(utf16OffsetOfColumn("😀x", 2), 2);
  assert.equal(utf16OffsetOfColumn("😀😀x", 3), 4);
  assert.equal(utf16OffsetOfColumn("éx", 2), 1);
  // Out of range: clamped to the line.
  assert.equal(utf16OffsetOfColumn("abc", 1), 0);
  assert.equal(utf16OffsetOfColumn("abc", 0), 0);
  assert.equal(utf16OffsetOfColumn("abc", 99), 3);
  assert.equal(utf16OffsetOfColumn("", 5), 0);
  // The selection there covers a whole code point, never half of a surrogate pair.
  assert.equal(codePointLengthAt("😀x", 0), 2);
  assert.equal(codePointLengthAt("😀x", 2), 1);
  assert.equal(codePointLengthAt("😀x", 3), 0);
});

test("lqlQuote writes only the escapes LQL has", () => {
  assert.equal(lqlQuote("France"), '"France"');
  assert.equal(lqlQuote('say "hi"; -- x'), '"say \\"hi\\"; -- x"');
  assert.equal(lqlQuote("a\\b"), '"a\\\\b"');
  assert.equal(lqlQuote("it's"), '"it\'s"');
  assert.equal(lqlQuote("l1\nl2\tt\rr"), '"l1\\nl2\\tt\\rr"');
  assert.equal(lqlQuote("café 😀 \u2028"), '"café 😀 \u2028"');  // non-ASCII as is (JSON.stringify too), never \\u
  for (const s of ["a\u0001b", "\u0000", "x\u001b[0m", "\u007f"]) {
    assert.throws(() => lqlQuote(s, "prompt"), (e) => e instanceof LqlQuoteError && /^prompt: .*U\+00[0-7][0-9A-F]/.test(e.message), JSON.stringify(s));
  }
  assert.throws(() => lqlQuote("a\ud800b", "entity"), { message: /^entity: holds a lone surrogate U\+D800/ });
  // Whatever it accepts uses no escape outside \\ \" \n \t \r.
  const out = lqlQuote(' \\"\n\t\r\'ok');
  assert.doesNotMatch(out.replace(/\\[\\"ntr]/g, ""), /\\/);
});

test("errorText names the place once", () => {
  assert.equal(errorText('expected LAYER at 1:13, found "LAYR"', 1, 13), 'expected LAYER at 1:13, found "LAYR"');
  assert.equal(errorText("unterminated string", 2, 5), "unterminated string (line 2, column 5)");
  assert.equal(errorText("bad at 11:13", 1, 13), "bad at 11:13 (line 1, column 13)");
  assert.equal(errorText("bad at 1:130", 1, 13), "bad at 1:130 (line 1, column 13)");
  assert.equal(errorText("no place"), "no place");
});
