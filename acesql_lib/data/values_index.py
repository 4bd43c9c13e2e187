"""Question-relevant database values (§2): a BM25 index over every distinct string value.

The authors (after OmniSQL) put the values of a database that the question mentions first in a
column's `example: [...]`, so the model sees 'Site B' next to `collection_site` when the question
says "at Site B". The rule, read from their released prompts and code:

1. Index: every distinct non-null TEXT value of every column, 1 to 40 characters long and not a
   number written as text ('10', '0.5'), one document per (column, value).
2. Queries: every word n-gram of the question text (evidence + newline + question, n <= 8) and the
   whole text; each query keeps its `top_k` best BM25 hits (Lucene BM25, k1 0.9, b 0.4, English
   stop words and stemming).
3. Filter: a hit is kept when the longest piece of it (lower-cased) found in the question covers
   more than `min_match` of its length; hits are ranked by that share, then length, then order of
   retrieval; the best `max_hits` are grouped by `table.column` (lower-cased keys).

The index uses bm25s (sparse matrices, numpy/scipy; Lucene's scoring variant; saves to a folder):
it needs no Java, unlike pyserini, and its sparse score matrix lets a question's hundred-odd n-gram
queries touch only the documents holding their words. SQLite FTS5 with bm25() was measured beside
it (benchmarks/values_index_bench.py): FTS5 builds faster, our bm25s queries are faster, and FTS5
cannot take Lucene's k1/b nor stop words. The index lives OUTSIDE the
database, in a cache folder (e.g. runs/<profile>/values_index/), one sub-folder per database
version, and is rebuilt when the database file's size or modification time changes.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sqlite3
import uuid
from dataclasses import dataclass
from difflib import SequenceMatcher
from pathlib import Path
from typing import Any, Iterable

# bm25s imports JAX when it is installed (its top-k selection) and runs one JAX op at import: on a GPU box
# with JAX that claims 75% of the GPU's memory for XLA before SFT, GRPO or vLLM start (seen on an H200:
# 110 GiB gone, then out of memory). The kit never uses JAX: keep it on the CPU unless the user said otherwise.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
import bm25s  # noqa: E402
import numpy as np
import Stemmer

FORMAT = 1  # bump when the index contents or scoring change: cached indexes are then rebuilt
MAX_VALUE_CHARS = 40  # OmniSQL: longer values are not indexed
MAX_NGRAM = 8  # OmniSQL: query n-grams up to 8 words
_TOKEN_PATTERN = r"(?u)\b\w+\b"  # one-letter words count ("Site B"), as in Lucene's analyser
_WORDS = re.compile(r"\w+(?:'\w+)?|[^\w\s]")
_STEMMER = Stemmer.Stemmer("english")


def _tokenize(texts: list[str]) -> list[list[str]]:
    return bm25s.tokenize(texts, stopwords="en", stemmer=_STEMMER.stemWords, token_pattern=_TOKEN_PATTERN,
                          return_ids=False, show_progress=False)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def question_queries(text: str, max_n: int = MAX_NGRAM) -> list[str]:
    """Every word n-gram of `text` (n <= max_n), then `text` itself, first occurrence kept."""
    words = _WORDS.findall(text)
    grams = [" ".join(words[i:i + n]) for n in range(1, max_n + 1) for i in range(len(words) - n + 1)]
    return list(dict.fromkeys([*grams, text]))


def match_share(value: str, text: str) -> float:
    """Length of the longest piece of `value` found in `text` (case-insensitive) over len(value)."""
    a, b = value.lower(), text.lower()
    if not a:
        return 0.0
    return SequenceMatcher(None, a, b, autojunk=False).find_longest_match(0, len(a), 0, len(b)).size / len(a)


def database_values(db_path: str | Path) -> dict[str, list[str]]:
    """`{"table.column" lower-cased: [distinct string values, 1-40 chars]}` of a SQLite file (read-only)."""
    path = Path(db_path)
    if not path.is_file():
        raise FileNotFoundError(f"SQLite database not found: {path}")
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    conn.text_factory = lambda b: b.decode("utf-8", errors="replace")
    out: dict[str, list[str]] = {}
    try:
        tables = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'")]
        for table in tables:
            qt = '"' + table.replace('"', '""') + '"'
            for col in [r[1] for r in conn.execute(f"PRAGMA table_info({qt})")]:
                qc = '"' + col.replace('"', '""') + '"'
                rows = conn.execute(f"SELECT DISTINCT {qc} FROM {qt} WHERE typeof({qc}) = 'text' "
                                    f"AND length({qc}) BETWEEN 1 AND {MAX_VALUE_CHARS}").fetchall()
                if rows:
                    out[f"{table}.{col}".lower()] = [v for (v,) in rows]
    finally:
        conn.close()
    return out


@dataclass
class ValuesIndex:
    """BM25 over the (column, value) documents of one database."""

    columns: list[str]  # "table.column" lower-cased
    doc_column: list[int]  # document -> index into `columns`
    doc_value: list[str]
    bm25: Any  # bm25s.BM25, None when the database has no string value
    top_k: int = 10
    min_match: float = 0.85
    max_hits: int = 20

    @classmethod
    def from_values(cls, values: dict[str, Iterable[Any]], **settings: Any) -> "ValuesIndex":
        """Index `{"table.column": [values]}`; non-strings, numbers as text, empty and over-long strings
        are left out."""
        columns, doc_column, doc_value = [], [], []
        for key, vals in values.items():
            keep = list(dict.fromkeys(v for v in vals if isinstance(v, str) and 0 < len(v) <= MAX_VALUE_CHARS
                                       and not _is_number(v)))
            if keep:
                columns.append(key.lower())
                doc_column += [len(columns) - 1] * len(keep)
                doc_value += keep
        bm25 = None
        if doc_value:
            bm25 = bm25s.BM25(method="lucene", k1=0.9, b=0.4)  # Lucene's (pyserini's) defaults
            bm25.index(_tokenize(doc_value), show_progress=False)
        return cls(columns, doc_column, doc_value, bm25, **settings)

    # search ------------------------------------------------------------------------------------
    def top_docs(self, tokens: list[str], k: int) -> list[int]:
        """The `k` best documents for one query's tokens, by bm25s's scores (ties: lower document
        first, as Lucene orders them); documents sharing no token are never returned.

        bm25s keeps every (token, document) score in a sparse matrix; summing only the rows of the
        query's tokens costs the documents that hold them, where `BM25.retrieve` scores every
        document per query (26x slower than FTS5 on 100k values, see the benchmark).
        """
        if self.bm25 is None:
            return []
        vocab, sc = self.bm25.vocab_dict, self.bm25.scores
        ids = [vocab[t] for t in tokens if t in vocab]
        if not ids:
            return []
        indptr, indices, data = sc["indptr"], sc["indices"], sc["data"]
        docs = np.concatenate([indices[indptr[i]:indptr[i + 1]] for i in ids])
        vals = np.concatenate([data[indptr[i]:indptr[i + 1]] for i in ids])
        uniq, inverse = np.unique(docs, return_inverse=True)
        total = np.bincount(inverse, weights=vals.astype(np.float64))
        keep = total > 0
        uniq, total = uniq[keep], total[keep]
        order = np.lexsort((uniq, -total))[:k]
        return uniq[order].tolist()

    def hits(self, queries: list[str]) -> list[int]:
        """Documents retrieved by the queries (`top_k` each), in query order then rank order, each once."""
        if self.bm25 is None:
            return []
        seen: dict[int, None] = {}
        for tokens in _tokenize(queries):
            for d in self.top_docs(tokens, self.top_k):
                seen.setdefault(d, None)
        return list(seen)

    def relevant_values(self, text: str) -> dict[str, list[str]]:
        """The question's relevant values, `{"table.column" lower-cased: [values]}` (module doc)."""
        found = []
        for order, d in enumerate(self.hits(question_queries(text))):
            value = self.doc_value[d]
            share = match_share(value, text)
            if share > self.min_match:
                found.append((share, len(value), order, d))
        found.sort(reverse=True)
        out: dict[str, list[str]] = {}
        for _, _, _, d in found[:self.max_hits]:
            out.setdefault(self.columns[self.doc_column[d]], []).append(self.doc_value[d])
        return out

    # storage -----------------------------------------------------------------------------------
    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "docs.json").write_text(json.dumps(
            {"columns": self.columns, "doc_column": self.doc_column, "doc_value": self.doc_value}))
        if self.bm25 is not None:
            self.bm25.save(str(folder / "bm25"), show_progress=False)

    @classmethod
    def load(cls, folder: Path, **settings: Any) -> "ValuesIndex":
        """Raises OSError or ValueError when the folder is incomplete: an index with values but no `bm25`
        folder is never returned as an index that finds nothing."""
        docs = json.loads((folder / "docs.json").read_text())
        bm25 = bm25s.BM25.load(str(folder / "bm25"), show_progress=False) if docs["doc_value"] else None
        return cls(docs["columns"], docs["doc_column"], docs["doc_value"], bm25, **settings)


def _signature(db_path: Path) -> dict[str, Any]:
    st = db_path.stat()
    return {"format": FORMAT, "db": str(db_path.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:10]


def _load_entry(folder: Path, sig: dict[str, Any], settings: dict[str, Any]) -> ValuesIndex | None:
    """The cached index in `folder` when it is whole and built from this very file, else None."""
    try:
        if json.loads((folder / "meta.json").read_text()) == sig:
            return ValuesIndex.load(folder, **settings)
    except (OSError, ValueError, KeyError, TypeError):
        pass  # missing, damaged or half-removed: built again by the caller
    return None


def open_index(db_path: str | Path, cache_dir: str | Path, **settings: Any) -> ValuesIndex:
    """The values index of one database: loaded from `cache_dir` when it matches the file's size and
    modification time, else built and saved there (the database itself is only read).

    Each entry is named by the database's path and its signature, `<stem>-<path digest>-<signature digest>`,
    so a cached entry is never replaced while another process may read it. Several processes may build one
    entry at once (every rank of a launch, on a fresh run folder): each writes its own temporary folder and
    renames it into place; when another process got there first, its equal build is kept and ours dropped.
    A damaged entry is moved aside before ours takes its name. Entries of older versions of the same
    database file are removed once the new one is in place.
    """
    db_path = Path(db_path)
    if not db_path.is_file():
        raise FileNotFoundError(f"SQLite database not found: {db_path}")
    sig = _signature(db_path)
    prefix = f"{db_path.stem}-{_digest(sig['db'])}-"
    folder = Path(cache_dir) / (prefix + _digest(json.dumps(sig, sort_keys=True)))
    cached = _load_entry(folder, sig, settings)
    if cached is not None:
        return cached
    index = ValuesIndex.from_values(database_values(db_path), **settings)
    unique = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp = folder.with_name(f"{folder.name}.tmp-{unique}")
    index.save(tmp)
    (tmp / "meta.json").write_text(json.dumps(sig))
    _place(tmp, folder, sig, unique)
    for old in folder.parent.glob(prefix + "*"):
        if old.name != folder.name and ".tmp-" not in old.name:  # another version of this file, or set aside
            shutil.rmtree(old, ignore_errors=True)
    return index


def _place(tmp: Path, folder: Path, sig: dict[str, Any], unique: str) -> bool:
    """Rename the build `tmp` to `folder`; False (and `tmp` removed) when a whole entry is there already."""
    for _ in range(3):
        try:
            tmp.rename(folder)  # a directory is never renamed onto a non-empty one: no live entry is replaced
            return True
        except OSError:
            pass
        if _load_entry(folder, sig, {}) is not None:  # another process's equal build: keep it
            shutil.rmtree(tmp, ignore_errors=True)
            return False
        try:  # damaged: set it aside (removed with the other versions), then try again
            folder.rename(folder.with_name(f"{folder.name}.old-{unique}"))
        except OSError:
            pass  # set aside by another process already, or gone
    shutil.rmtree(tmp, ignore_errors=True)
    return False
