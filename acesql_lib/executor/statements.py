"""What an untrusted SQL text is, read from its tokens before SQLite sees it: how many statements it
holds (`count_statements`), the kind of the one SQLite would run (`statement_kind`, past comments, invisible
characters, WITH and EXPLAIN), and whether the sandbox refuses it outright (`check_sql`: not a string, a NUL
byte, too long, empty, several statements, or a kind that is not a read).
"""
from __future__ import annotations

import re

from .authorizer import _READ_PRAGMAS

MAX_SQL_BYTES = 2_000_000  # UNKNOWN (kit): longer SQL is refused before SQLite parses it

# Every statement kind of SQLite's grammar (lang.html) that is not a read, refused by its parsed
# kind (statement_kind: past semicolons, comments, byte-order marks and whitespace of every kind,
# through WITH to the main statement and through EXPLAIN to the explained one) before SQLite sees
# it, whatever the database holds: REINDEX and ANALYZE are authorized per index or table, so on a
# database without one the authorizer would not be asked at all. Writes reach the authorizer too.
_STATEMENT_NEEDS = {"REINDEX": "REINDEX", "ANALYZE": "ANALYZE", "VACUUM": "VACUUM (a maintenance write)",
                    "BEGIN": "TRANSACTION", "COMMIT": "TRANSACTION", "END": "TRANSACTION",
                    "ROLLBACK": "TRANSACTION", "SAVEPOINT": "SAVEPOINT", "RELEASE": "SAVEPOINT", "DETACH": "DETACH",
                    "ATTACH": "ATTACH", "INSERT": "INSERT", "REPLACE": "INSERT", "UPDATE": "UPDATE",
                    "DELETE": "DELETE", "CREATE": "CREATE", "DROP": "DROP", "ALTER": "ALTER TABLE"}


_TOKEN = re.compile(r"""'(?:[^']|'')*(?:'|\Z)|"(?:[^"]|"")*(?:"|\Z)|`[^`]*(?:`|\Z)|\[[^\]]*(?:\]|\Z)"""
                    r"""|--[^\n]*|/\*.*?(?:\*/|\Z)|;|\s+|[^'"`\[\-/;\s]+|.""", re.DOTALL)


def count_statements(sql: str) -> int:
    """Number of non-empty statements, scanning quotes, identifiers and comments (linear time)."""
    if ";" not in sql and "--" not in sql and "/*" not in sql:  # the common case, without the scan
        return int(bool(sql.strip()))
    count, has_content = 0, False
    for m in _TOKEN.finditer(sql):
        tok = m.group()
        if tok == ";":
            count += has_content
            has_content = False
        elif not (tok[0].isspace() or tok.startswith("--") or tok.startswith("/*")):
            has_content = True
    return count + has_content


# Characters SQLite never reads as part of a keyword and that the check steps over: whitespace of
# every kind (str.isspace: ASCII, NBSP, U+2000-U+200A, U+2028/9, U+3000...) and invisible format
# characters (byte-order mark, zero-width space/joiners, word joiner, bidi marks, soft hyphen).
_INVISIBLE = "\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff"
_KIND_TOKEN = re.compile(r"""(?P<skip>--[^\n]*|/\*.*?(?:\*/|\Z)|[;\s""" + _INVISIBLE + r"""]+)"""
                         r"""|'(?:[^']|'')*(?:'|\Z)|"(?:[^"]|"")*(?:"|\Z)|`[^`]*(?:`|\Z)|\[[^\]]*(?:\]|\Z)"""
                         r"""|[A-Za-z_][A-Za-z0-9_$]*|.""", re.DOTALL)


def _significant(sql: str):
    """Tokens past whitespace of every kind, invisible characters, comments and semicolons."""
    for m in _KIND_TOKEN.finditer(sql):
        if m.lastgroup != "skip":
            yield m.group()


def statement_kind(sql: str) -> tuple[str, str]:
    """(kind, detail) of the statement SQLite would run, read from its tokens rather than its first
    characters: leading semicolons, comments, byte-order marks and whitespace of every kind are
    skipped, `WITH ...` is the kind of its main statement (the first word after a CTE's closing
    body's closing parenthesis), `EXPLAIN [QUERY PLAN] x` the kind of x, `PRAGMA [schema.]name` has the name as
    detail. kind is the upper-cased keyword ("" when the SQL has no word: SQLite reports why)."""
    toks = _significant(sql)
    word = next(toks, "").upper()
    while word == "EXPLAIN":
        word = next(toks, "").upper()
        if word == "QUERY":
            next(toks, "")  # PLAN
            word = next(toks, "").upper()
    if word == "WITH":
        depth, after_body = 0, False
        for tok in toks:
            if tok == "(":
                depth += 1
            elif tok == ")":
                depth -= 1
                after_body = depth == 0
                continue
            elif depth == 0 and after_body and tok != "," and tok.upper() != "AS":  # AS: after a column list
                return tok.upper()[:40], ""
            after_body = False
        return "WITH", ""
    if word == "PRAGMA":
        name = next(toks, "")
        if next(toks, "") == ".":
            name = next(toks, "")
        return word, name.strip('"`[]').lower()[:60]
    return word[:40], ""


def first_word(sql: str) -> str:
    """The statement's kind (`statement_kind`), kept under its old name for callers and messages."""
    return statement_kind(sql)[0]


def _refusal(sql: str) -> str | None:
    """Why the parsed statement is not a read the sandbox runs, or None."""
    kind, detail = statement_kind(sql)
    if kind in _STATEMENT_NEEDS:
        return f"{kind} statement needs {_STATEMENT_NEEDS[kind]}"
    if kind == "PRAGMA" and detail not in _READ_PRAGMAS:
        return f"PRAGMA statement needs PRAGMA {detail} (the schema pragmas are the only ones read here)"
    return None


def check_sql(sql: object) -> tuple[str, str] | None:
    """(status, message) when the SQL must not reach SQLite, else None."""
    if not isinstance(sql, str):
        return "error", f"SQL must be a string, got {type(sql).__name__}"
    if "\x00" in sql:
        return "error", "SQL contains a NUL byte"
    if len(sql) > MAX_SQL_BYTES or len(sql.encode("utf-8", "surrogatepass")) > MAX_SQL_BYTES:
        return "error", f"SQL too long: over {MAX_SQL_BYTES} bytes"
    n = count_statements(sql)
    if n == 0:
        return "error", "empty SQL"
    if n > 1:
        return "blocked", f"blocked: {n} statements; only one statement per call is allowed"
    why = _refusal(sql)
    if why:
        head = " ".join(sql.split())[:80]
        return "blocked", f"blocked: {why}, which the read-only sandbox does not allow (only reads run): {head}"
    return None
