// Pure helpers for the LQL text the console writes and the places the server names in it; no DOM,
// so web/test/unit.mjs runs them under plain Node.

/** A string the console cannot put in an LQL string literal (a control character LQL has no escape for). */
export class LqlQuoteError extends Error {}

/**
 * `text` as an LQL string literal (docs/lql.md "Lexical"): `"` + text + `"` with the only escapes
 * LQL has — `\\ \" \n \t \r` — as the server's own quoting does (src/lql/printer.cc quote_string).
 * Any other control character (U+0000–U+001F, U+007F) has no escape in LQL, so it is refused
 * with a message naming `what` (the field) and the character, rather than sent in a form the
 * server would read differently or reject; so is a lone surrogate (no UTF-8 form).
 */
export function lqlQuote(text: string, what = "text"): string {
  let out = '"';
  for (const ch of text) {
    switch (ch) {
      case "\\": out += "\\\\"; break;
      case '"': out += '\\"'; break;
      case "\n": out += "\\n"; break;
      case "\t": out += "\\t"; break;
      case "\r": out += "\\r"; break;
      default: {
        const c = ch.codePointAt(0) as number;
        const u = "U+" + c.toString(16).toUpperCase().padStart(4, "0");
        if (c < 0x20 || c === 0x7f)
          throw new LqlQuoteError(`${what}: holds the control character ${u}, which an LQL string cannot carry (only \\n, \\t and \\r): remove it`);
        // Half of a surrogate pair is no character: the request body could not carry it as UTF-8.
        if (c >= 0xd800 && c <= 0xdfff) throw new LqlQuoteError(`${what}: holds a lone surrogate ${u} (not a character): remove it`);
        out += ch;
      }
    }
  }
  return out + '"';
}

/**
 * The UTF-16 offset (CodeMirror's unit) within `lineText` of the server's column `col` on that
 * line. The server's LINE:COL counts COL in Unicode code points: COL = 1 + the code points before
 * the token on its line. An astral character (an emoji) is one code point but two UTF-16 units.
 * A column past the end of the line gives the line's length; a column below 1 gives 0.
 */
export function utf16OffsetOfColumn(lineText: string, col: number): number {
  let off = 0;
  for (let k = 1; k < col && off < lineText.length; ++k) {
    const c = lineText.codePointAt(off) as number;
    off += c > 0xffff ? 2 : 1;
  }
  return Math.min(off, lineText.length);
}

/** The length in UTF-16 units of the code point at `off` in `text` (0 at the end): what to select there. */
export function codePointLengthAt(text: string, off: number): number {
  if (off >= text.length) return 0;
  return (text.codePointAt(off) as number) > 0xffff ? 2 : 1;
}

/**
 * An error message and the place the server gave, shown once: the server's messages already say
 * "at LINE:COL", so the place is added ("(line L, column C)") only when the message lacks it.
 */
export function errorText(message: string, line?: number, column?: number): string {
  if (!line) return message;
  const at = new RegExp(`(^|\\D)${line}:${column ?? "\\d+"}(?!\\d)`);
  if (at.test(message)) return message;
  return `${message} (line ${line}${column ? `, column ${column}` : ""})`;
}
