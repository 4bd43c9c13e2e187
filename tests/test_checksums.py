"""Benchmark files pinned by checksum (data/benchmarks.json): the shipped fixtures verify, a changed byte or a
missing file is named with what was expected and found, a digest not known yet is a warning, never a pass."""
from __future__ import annotations

import copy
import json
import shutil

import pytest

from acesql_lib.data import checksums
from acesql_lib.data.checksums import ChecksumError, DigestCache, load_manifest, preflight_rows, verify_benchmark
from acesql_lib.config.checks import ConfigError
from acesql_lib.config.profiles import load_config
from repo_paths import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "real"


@pytest.fixture(scope="module")
def manifest():
    return load_manifest()


@pytest.fixture
def fixtures_copy(tmp_path):
    dest = tmp_path / "real"
    shutil.copytree(FIXTURES, dest)
    return dest


def test_the_shipped_fixtures_match_their_recorded_digests(manifest):
    for name in ("fixtures_real", "fixtures_authors"):
        entry = manifest["benchmarks"][name]
        assert all(rec["sha256"] and rec["digest_source"] == checksums.SHIPPED for rec in entry["files"].values())
        assert verify_benchmark(name, entry, ROOT / entry["path"]) == []


def test_a_changed_byte_fails_verification_naming_the_file(manifest, fixtures_copy):
    entry = manifest["benchmarks"]["fixtures_real"]
    target = fixtures_copy / "spider_dev.json"
    data = bytearray(target.read_bytes())
    data[100] ^= 1
    target.write_bytes(bytes(data))
    found = verify_benchmark("fixtures_real", entry, fixtures_copy, DigestCache())
    assert [(f.path, f.kind) for f in found] == [(str(target), "mismatch")]
    assert found[0].expected == f"sha256 {entry['files']['spider_dev.json']['sha256']} (257,103 bytes)"
    assert found[0].found.startswith("sha256 ") and found[0].found != found[0].expected
    with pytest.raises(ChecksumError, match=r"spider_dev\.json: expected sha256 1d3c834ea5b5\w+ \(257,103 bytes\), "
                                            r"found sha256 \w+"):
        checksums.verify_or_raise("fixtures_real", entry, fixtures_copy, DigestCache())


def test_a_changed_database_inside_a_folder_names_the_folder(manifest, fixtures_copy):
    db = fixtures_copy / "spider_dk" / "database" / "new_pets_1" / "new_pets_1.sqlite"
    db.write_bytes(db.read_bytes() + b"\0")
    found = verify_benchmark("fixtures_real", manifest["benchmarks"]["fixtures_real"], fixtures_copy, DigestCache())
    assert [(f.path, f.kind) for f in found] == [(str(fixtures_copy / "spider_dk" / "database"), "mismatch")]


def test_a_missing_file_is_named(manifest, fixtures_copy):
    (fixtures_copy / "bird_subset_tables.json").unlink()
    found = verify_benchmark("fixtures_real", manifest["benchmarks"]["fixtures_real"], fixtures_copy, DigestCache())
    assert [(f.path, f.kind) for f in found] == [(str(fixtures_copy / "bird_subset_tables.json"), "missing")]
    assert "bird_subset_tables.json: missing (expected sha256 372506fd0059" in str(found[0])


def _with_realistic(tmp_path, manifest, sha256=None):
    """A profile reading Spider-Realistic from tmp_path (a real file there), the manifest's entry given `sha256`."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "spider-realistic.json").write_text(json.dumps([{"db_id": "x", "question": "q", "query": "s"}]))
    cfg = load_config("paper", {"data.spider_realistic_dir": str(tmp_path), "data.world": "tinyworld",
                                "eval.sets": [{"name": "spider_realistic", "format": "spider",
                                               "path": str(tmp_path / "spider-realistic.json")}]})
    changed = copy.deepcopy(manifest)
    changed["benchmarks"]["spider_realistic"]["files"]["spider-realistic.json"]["sha256"] = sha256
    return cfg, changed


def test_a_digest_not_known_yet_is_a_warning_not_a_pass(tmp_path, manifest):
    cfg, changed = _with_realistic(tmp_path, manifest)
    assert preflight_rows(cfg, changed, DigestCache()) == [
        ("spider_realistic", "WARN", f"Spider-Realistic: unverified, 1 of 1 files have no recorded digest "
                                     f"({checksums.PENDING})")]


def test_the_preflight_fails_a_mismatch_naming_file_expected_and_found(tmp_path, manifest):
    cfg, changed = _with_realistic(tmp_path, manifest, "ab" * 32)
    [(item, status, detail)] = preflight_rows(cfg, changed, DigestCache())
    assert (item, status) == ("spider_realistic", "FAIL")
    assert f"{tmp_path / 'spider-realistic.json'}: expected sha256 {'ab' * 32}" in detail and ", found sha256 " in detail
    (tmp_path / "spider-realistic.json").unlink()
    [(_, status, detail)] = preflight_rows(cfg, changed, DigestCache())
    assert status == "MISSING" and "spider-realistic.json: missing" in detail


def test_make_checksums_records_digests_and_never_overwrites_one(tmp_path, manifest):
    cfg, changed = _with_realistic(tmp_path, manifest)
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(changed))
    said = checksums.record_digests(cfg, ["spider_realistic"], path)
    rec = json.loads(path.read_text())["benchmarks"]["spider_realistic"]["files"]["spider-realistic.json"]
    assert said == [f"spider_realistic: spider-realistic.json recorded ({rec['sha256'][:12]}...)"]
    assert rec["size"] == (tmp_path / "spider-realistic.json").stat().st_size and rec["digest_source"] == checksums.COMPUTED
    assert preflight_rows(cfg, load_manifest(path), DigestCache())[0][1] == "OK"
    (tmp_path / "spider-realistic.json").write_text("[]")
    with pytest.raises(ChecksumError, match=r"spider-realistic.json: expected sha256 .*\(not overwritten"):
        checksums.record_digests(cfg, ["spider_realistic"], path)


def test_a_download_is_verified_and_a_changed_one_stops_naming_the_file(tmp_path, manifest, monkeypatch):
    from acesql_lib.data.downloads import download_spider_realistic

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    published = tmp_path / "published.json"
    published.write_text(json.dumps([{"db_id": "x", "question": "q", "query": "s"}]))
    digest = checksums.digest_of(published, DigestCache())["sha256"]
    fetch = lambda d: download_spider_realistic(d, url=published.as_uri())  # noqa: E731 (urllib, a file URL)
    cfg, pinned = _with_realistic(tmp_path / "first", manifest, digest)
    pinned["benchmarks"]["spider_realistic"]["files"]["spider-realistic.json"]["size"] = published.stat().st_size
    shutil.rmtree(tmp_path / "first")
    assert checksums.download_verified(cfg, "spider_realistic", pinned, fetch) == []
    assert (tmp_path / "first" / "spider-realistic.json").read_bytes() == published.read_bytes()
    published.write_text("[]")  # the publisher's file changed
    cfg, _ = _with_realistic(tmp_path / "second", manifest)
    shutil.rmtree(tmp_path / "second")
    with pytest.raises(ChecksumError, match=rf"spider_realistic .*\n  .*second/spider-realistic.json: expected sha256 "
                                            rf"{digest} \(\d+ bytes\), found sha256 "):
        checksums.download_verified(cfg, "spider_realistic", pinned, fetch)


def test_the_manifest_covers_every_file_the_paper_profile_reads(manifest):
    cfg = load_config("paper")
    read = checksums.profile_benchmarks(cfg)
    assert read == ["bird_dev_20240627", "spider", "spider_dk", "spider_syn", "spider_realistic", "synsql"]
    authors = checksums.profile_benchmarks(load_config("paper", {"data.stage1_source": "authors"}))
    assert "acesql_release" in authors
    for name in read + ["bird_dev_20251106", "bird_train", "acesql_release"]:
        entry = manifest["benchmarks"][name]
        assert entry["source_url"].startswith("https://") and entry["version"]
        assert all(rec["digest_source"] for rec in entry["files"].values())
    listed = {(checksums.benchmark_root(manifest["benchmarks"][n], cfg) / rel.rstrip("/")).resolve()
              for n in read for rel in manifest["benchmarks"][n]["files"]}
    for s in cfg.eval.sets:  # every file an evaluation set reads is one the manifest pins
        for p in (s.path, s.tables, s.db_root):
            assert (ROOT / p).resolve() in listed, (s.name, p)
    for p in ("data.json", "tables.json", "databases"):  # and the training data's
        assert (ROOT / cfg.data.synsql_dir / p).resolve() in listed


def test_eval_sets_name_the_bird_dev_version():
    assert [s.version for s in load_config("paper").eval.sets if s.name == "bird_dev"] == ["20240627"]
    newer = load_config("paper", {"eval.sets": [{"name": "bird_dev", "path": "x", "version": 20251106}]})
    assert newer.eval.sets[0].version == "20251106"
    assert checksums.profile_benchmarks(newer)[0] == "bird_dev_20251106"
    with pytest.raises(ConfigError, match=r"eval.sets\[bird_dev\].version: '2023' is not allowed"):
        load_config("paper", {"eval.sets": [{"name": "bird_dev", "path": "x", "version": "2023"}]})


def test_a_malformed_manifest_is_named(tmp_path):
    bad = tmp_path / "benchmarks.json"
    bad.write_text(json.dumps({"benchmarks": {"spider": {"files": {"dev.json": {"size": 1}}}}}))
    with pytest.raises(ChecksumError, match=r"benchmarks.json: benchmarks.spider.files\['dev.json'\]: missing sha256, "
                                            "digest_source"):
        load_manifest(bad)
