"""Benchmark files pinned by checksum: the manifest (`data/benchmarks.json`), verification and `make checksums`.

The manifest lists every file the paper profile reads from a publisher (BIRD dev in both releases, BIRD train,
Spider, Spider-DK, Spider-Syn, Spider-Realistic, SynSQL-2.5M, the authors' release) and the benchmark files the
kit ships as test fixtures. Each file, or folder (a name ending in "/", digested as a tree: the SHA-256 of its
files' `path<TAB>size<TAB>sha256` lines in sorted order), carries its size, its SHA-256 and `digest_source`,
where the digest came from. A digest not known yet is null (`PENDING`): `make checksums` computes it from the
downloaded files and writes it, and until then verification reports the file as unverified (a warning).

    python -m acesql_lib.data.checksums --profile paper --verify      # what is on disk against the manifest
    python -m acesql_lib.data.checksums --profile paper --download    # download what is missing, then verify
    python -m acesql_lib.data.checksums --profile paper --write       # `make checksums`: record the digests on disk

The preflight calls `preflight_rows` (one row per benchmark the profile reads).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..config.checks import ConfigError
from ..config.eval import BIRD_DEV_VERSION
from ..config.profiles import load_config, parse_overrides
from ..config.settings import Config
from ..config.paths import REPO_ROOT, resolve

MANIFEST = REPO_ROOT / "data" / "benchmarks.json"
PENDING = "to be computed on a GPU box by `make checksums`"
COMPUTED = "computed by `make checksums` from the files downloaded from source_url"
SHIPPED = "computed from the file the kit ships"
CACHE_NAME = "checksum_cache.json"  # under runs/: digests by path, size and mtime, so a second check reads nothing
CHUNK = 1 << 20
# Which benchmark an evaluation set reads; BIRD dev by its version (eval.sets[].version)
SET_BENCHMARKS = {"spider_dev": "spider", "spider_test": "spider", "spider_dk": "spider_dk",
                  "spider_syn": "spider_syn", "spider_realistic": "spider_realistic"}
LAYOUT_MARKER = ".acesql-layout.json"  # acesql_lib/data/layouts.py: a folder written from the tiny world


class ChecksumError(ValueError):
    """A benchmark file differs from the manifest or is missing; the message names the file, expected and found."""


@dataclass(frozen=True)
class Finding:
    """One file of a benchmark that did not verify: `kind` is "mismatch", "missing" or "unverified"."""
    benchmark: str
    path: str
    kind: str
    expected: str = ""
    found: str = ""

    def __str__(self) -> str:
        if self.kind == "mismatch":
            return f"{self.path}: expected {self.expected}, found {self.found}"
        if self.kind == "missing":
            return f"{self.path}: missing (expected {self.expected})"
        return f"{self.path}: unverified (no digest recorded yet: {PENDING})"


# ---------------------------------------------------------------------------------------------
# hashing


class DigestCache:
    """SHA-256 of files, remembered by (path, size, mtime) in a JSON file: an unchanged file is not read again."""

    def __init__(self, path: Path | None = None):
        self.path = path
        self._known: dict[str, list] = {}
        if path is not None and path.is_file():
            try:
                self._known = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError):
                self._known = {}
        self._dirty = False

    def sha256(self, file: Path) -> str:
        st = file.stat()
        key, stamp = str(file.resolve()), [st.st_size, st.st_mtime_ns]
        known = self._known.get(key)
        if known and known[:2] == stamp:
            return known[2]
        h = hashlib.sha256()
        with file.open("rb") as f:
            while chunk := f.read(CHUNK):
                h.update(chunk)
        self._known[key] = stamp + [h.hexdigest()]
        self._dirty = True
        return h.hexdigest()

    def save(self) -> None:
        if self.path is not None and self._dirty:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self._known))
            os.replace(tmp, self.path)
            self._dirty = False


def default_cache() -> DigestCache:
    """The digests remembered under runs/ (ACESQL_CHECKSUM_CACHE=0: every file read again, nothing remembered)."""
    if os.environ.get("ACESQL_CHECKSUM_CACHE", "1").strip() == "0":
        return DigestCache()
    return DigestCache(REPO_ROOT / "runs" / CACHE_NAME)


def tree_digest(folder: Path, cache: DigestCache) -> dict[str, Any]:
    """{files, size, sha256} of every file under `folder` (the SHA-256 of its sorted `path\\tsize\\tsha256` lines);
    names starting with "." (download markers, the hub's .cache/) are not part of a benchmark."""
    files = sorted(p for p in folder.rglob("*")
                   if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts))
    lines = [f"{p.relative_to(folder).as_posix()}\t{p.stat().st_size}\t{cache.sha256(p)}\n" for p in files]
    return {"files": len(files), "size": sum(p.stat().st_size for p in files),
            "sha256": hashlib.sha256("".join(lines).encode()).hexdigest()}


def digest_of(path: Path, cache: DigestCache) -> dict[str, Any]:
    """{size, sha256} of a file, {files, size, sha256} of a folder."""
    if path.is_dir():
        return tree_digest(path, cache)
    return {"size": path.stat().st_size, "sha256": cache.sha256(path)}


# ---------------------------------------------------------------------------------------------
# the manifest


def load_manifest(path: Path = MANIFEST) -> dict[str, Any]:
    """The manifest's benchmarks, checked: every entry names its files and every file its digest fields."""
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ChecksumError(f"{path}: not a readable checksum manifest ({e})") from None
    benchmarks = raw.get("benchmarks") if isinstance(raw, dict) else None
    if not isinstance(benchmarks, dict) or not benchmarks:
        raise ChecksumError(f"{path}: expected a 'benchmarks' mapping")
    for name, entry in benchmarks.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("files"), dict) or not entry["files"]:
            raise ChecksumError(f"{path}: benchmarks.{name}: expected a 'files' mapping")
        for fname, rec in entry["files"].items():
            missing = [k for k in ("sha256", "digest_source") if not isinstance(rec, dict) or k not in rec]
            if missing:
                raise ChecksumError(f"{path}: benchmarks.{name}.files[{fname!r}]: missing {', '.join(missing)}")
    return raw


def benchmark_root(entry: dict[str, Any], cfg: Config | None) -> Path | None:
    """Where a benchmark lies: the data root its entry names (data.<root> of `cfg`), or its fixed `path`."""
    if entry.get("path"):
        return resolve(entry["path"])
    if entry.get("data_root") and cfg is not None:
        return resolve(getattr(cfg.data, entry["data_root"]))
    return None


def profile_benchmarks(cfg: Config) -> list[str]:
    """The manifest entries `cfg` reads: its evaluation sets, SynSQL for the synsql world, the release when asked."""
    names = []
    for s in cfg.eval.sets:
        if s.name == "bird_dev":
            names.append(f"bird_dev_{s.version or BIRD_DEV_VERSION}")
        elif s.name in SET_BENCHMARKS:
            names.append(SET_BENCHMARKS[s.name])
    if cfg.data.world == "synsql":
        names.append("synsql")
    if cfg.data.stage1_source == "authors":
        names.append("acesql_release")
    return list(dict.fromkeys(names))


# ---------------------------------------------------------------------------------------------
# verification


def _expected(rec: dict[str, Any], folder: bool = False) -> str:
    if not rec.get("sha256"):
        return "a folder" if folder else "a file"
    size = f"{rec['size']:,} bytes" if isinstance(rec.get("size"), int) else "size unknown"
    files = f"{rec['files']:,} files, " if isinstance(rec.get("files"), int) else ""
    return f"sha256 {rec['sha256']} ({files}{size})"


def verify_benchmark(name: str, entry: dict[str, Any], root: Path, cache: DigestCache | None = None) -> list[Finding]:
    """Every file of one manifest entry under `root` against its recorded digest: [] when all match."""
    cache = cache or DigestCache()
    out = []
    for rel, rec in entry["files"].items():
        path = root / rel.rstrip("/")
        shown = str(path)
        if not (path.is_dir() if rel.endswith("/") else path.is_file()):
            out.append(Finding(name, shown, "missing", _expected(rec, rel.endswith("/"))))
            continue
        if not rec.get("sha256"):
            out.append(Finding(name, shown, "unverified"))
            continue
        found = digest_of(path, cache)
        if found["sha256"] != rec["sha256"]:
            size = f", {found['size']:,} bytes" if found.get("size") != rec.get("size") else ""
            out.append(Finding(name, shown, "mismatch", _expected(rec), f"sha256 {found['sha256']}{size}"))
    return out


def verify_or_raise(name: str, entry: dict[str, Any], root: Path, cache: DigestCache | None = None) -> list[Finding]:
    """`verify_benchmark`, raising ChecksumError on a mismatch or a missing file; returns the unverified files."""
    findings = verify_benchmark(name, entry, root, cache)
    bad = [f for f in findings if f.kind != "unverified"]
    if bad:
        raise ChecksumError(f"{name} ({entry.get('title', name)}) does not match {MANIFEST.name}:\n"
                            + "\n".join(f"  {f}" for f in bad))
    return findings


def preflight_rows(cfg: Config, manifest: dict[str, Any] | None = None,
                   cache: DigestCache | None = None) -> list[tuple[str, str, str]]:
    """(item, status, detail) per benchmark `cfg` reads: OK, FAIL (a mismatch), MISSING, WARN (unverified) or
    INFO (a layout the kit wrote from the tiny world, not the publisher's files)."""
    manifest = manifest or load_manifest()
    cache = cache or default_cache()
    rows = []
    for name in profile_benchmarks(cfg):
        entry = manifest["benchmarks"].get(name)
        if entry is None:
            rows.append((name, "WARN", f"not in {MANIFEST.name}: unverified"))
            continue
        root = benchmark_root(entry, cfg)
        if root is not None and (root / LAYOUT_MARKER).is_file():
            rows.append((name, "INFO", f"{root}: written by the kit from the tiny world, not checked"))
            continue
        if root is not None and not root.is_dir():
            rows.append((name, "MISSING", f"{entry.get('title', name)}: {root} not found (python -m "
                         f"acesql_lib.data.checksums --download --only {name}, from {entry.get('source_url', '')})"))
            continue
        rows.append(_row(name, entry, root, verify_benchmark(name, entry, root, cache) if root else []))
    cache.save()
    return rows


def _row(name: str, entry: dict[str, Any], root: Path | None, findings: list[Finding]) -> tuple[str, str, str]:
    title = entry.get("title", name)
    by_kind = {k: [f for f in findings if f.kind == k] for k in ("mismatch", "missing", "unverified")}
    if by_kind["mismatch"]:
        return name, "FAIL", f"{title}: " + "; ".join(map(str, by_kind["mismatch"] + by_kind["missing"]))
    if by_kind["missing"]:
        return name, "MISSING", f"{title}: " + "; ".join(map(str, by_kind["missing"])) + \
            f" (python -m acesql_lib.data.checksums --download --only {name})"
    n = len(entry["files"])
    if by_kind["unverified"]:
        return name, "WARN", (f"{title}: unverified, {len(by_kind['unverified'])} of {n} files have no recorded "
                              f"digest ({PENDING})")
    return name, "OK", f"{title}: {n} files match {MANIFEST.name} under {root}"


# ---------------------------------------------------------------------------------------------
# downloads and `make checksums`


def _downloaders(cfg: Config) -> dict[str, Callable[[Path], Any]]:
    from . import datasets as ds

    def hub(repo_id: str) -> Callable[[Path], Any]:
        def fetch(dest: Path) -> Path:
            ds._prepare(dest, repo_id, f"  the files of the hub dataset {repo_id}", [], True)
            return ds._snapshot(repo_id, dest)
        return fetch

    return {"bird_dev_20240627": ds.download_bird_dev, "bird_dev_20251106": hub("birdsql/bird_sql_dev_20251106"),
            "spider": ds.download_spider, "spider_syn": ds.download_spider_syn,
            "spider_dk": lambda d: ds.download_spider_dk(d, resolve(cfg.data.spider_dir)),
            "spider_realistic": ds.download_spider_realistic, "synsql": ds.download_synsql,
            "acesql_release": ds.download_acesql_release}


def download_verified(cfg: Config, name: str, manifest: dict[str, Any] | None = None,
                      fetch: Callable[[Path], Any] | None = None) -> list[Finding]:
    """Download one benchmark into the data root `cfg` names (`fetch`, default the kit's download helper for it)
    and verify it; ChecksumError on a mismatch or a missing file, the unverified files returned."""
    manifest = manifest or load_manifest()
    entry = manifest["benchmarks"][name]
    root = benchmark_root(entry, cfg)
    fetch = fetch or _downloaders(cfg).get(name)
    if root is None or fetch is None:
        raise ChecksumError(f"{name}: the kit has no download for it ({entry.get('source_url', '')})")
    if not all((root / rel.rstrip("/")).exists() for rel in entry["files"]):
        fetch(root)
    cache = default_cache()
    try:
        return verify_or_raise(name, entry, root, cache)
    finally:
        cache.save()


def record_digests(cfg: Config, names: list[str], manifest_path: Path = MANIFEST) -> list[str]:
    """`make checksums`: write the size and SHA-256 of every file of `names` found on disk into the manifest
    (a digest already recorded that the files no longer match is an error, never overwritten). Returns what it did."""
    manifest = load_manifest(manifest_path)
    cache, said = default_cache(), []
    for name in names:
        entry = manifest["benchmarks"][name]
        root = benchmark_root(entry, cfg)
        for rel, rec in entry["files"].items():
            path = (root / rel.rstrip("/")) if root else None
            if path is None or not path.exists():
                said.append(f"{name}: {rel} not on disk, left as it is")
                continue
            found = digest_of(path, cache)
            if rec.get("sha256") and rec["sha256"] != found["sha256"]:
                raise ChecksumError(f"{path}: expected sha256 {rec['sha256']}, found {found['sha256']} "
                                    "(not overwritten: move the manifest's entry by hand if the publisher re-released it)")
            if not rec.get("sha256"):
                rec.update(found, digest_source=SHIPPED if entry.get("path") else COMPUTED)
                said.append(f"{name}: {rel} recorded ({found['sha256'][:12]}...)")
    cache.save()
    manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")
    return said


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Verify, download or record the benchmark files against data/benchmarks.json.")
    ap.add_argument("--profile", default="paper")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="config overrides (data roots)")
    ap.add_argument("--only", nargs="*", help="manifest entries (default: every one the profile reads)")
    what = ap.add_mutually_exclusive_group()
    what.add_argument("--verify", action="store_true", help="check what is on disk (the default)")
    what.add_argument("--download", action="store_true", help="download what is missing, then verify")
    what.add_argument("--write", action="store_true", help="record the digests of the files on disk (make checksums)")
    args = ap.parse_args(argv)
    from .downloads import OfflineError

    try:
        cfg = load_config(args.profile, parse_overrides(args.set))
        manifest = load_manifest()
        names = args.only or profile_benchmarks(cfg)
        unknown = [n for n in names if n not in manifest["benchmarks"]]
        if unknown:
            raise ChecksumError(f"{MANIFEST.name}: no entry {', '.join(unknown)} (have: {', '.join(manifest['benchmarks'])})")
        if args.write:
            print("\n".join(record_digests(cfg, names)))
            return 0
        if args.download:
            for name in names:
                for f in download_verified(cfg, name, manifest):
                    print(f"WARN {f}")
                print(f"{name}: downloaded and verified")
            return 0
    except (ChecksumError, ConfigError, OfflineError) as e:
        print(f"checksums: {e}", file=sys.stderr)
        return 1
    rows = [r for r in preflight_rows(cfg, manifest) if not args.only or r[0] in args.only]
    for item, status, detail in rows:
        print(f"{status:<8} {item:<20} {detail}")
    return 1 if any(s in ("FAIL", "MISSING") for _, s, _ in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
