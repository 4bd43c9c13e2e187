"""The benchmarks' and the authors' downloads (§7), for machines with internet: SynSQL-2.5M and the authors'
release from the Hugging Face hub, BIRD dev, Spider and its robustness sets (Spider-DK, Spider-Syn,
Spider-Realistic) from their archives, each laid out as the loaders in `datasets` read it.

They never run in tests, and with `HF_HUB_OFFLINE=1` they stop at once (`OfflineError`) with the folder
layout to create by hand. A download whose files are already there is not repeated (`force` repeats it).
"""
from __future__ import annotations

import os
import shutil
import urllib.request
import zipfile
from pathlib import Path

from ..runtime.jsonfiles import DatasetError

SYNSQL_REPO = "seeklhy/SynSQL-2.5M"  # OmniSQL's release on the hub (§7)
ACESQL_REPO = "xiaobing11/ACE-SQL"  # the authors' SFT/RL/pool data (§7)
BIRD_DEV_URL = "https://bird-bench.oss-cn-beijing.aliyuncs.com/dev.zip"
# spider_data.zip, the archive linked from the Spider site (hub copies hold the questions only, no databases)
SPIDER_URL = "https://drive.usercontent.google.com/download?id=1403EGqzIDoHMdQF4c9Bkyl7dZLZ5Wt6J&export=download&confirm=t"


class OfflineError(RuntimeError):
    """A download asked for while downloads are switched off; the message says what to place where."""


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _prepare(dest: str | Path, what: str, layout: str, present: list[str], force: bool) -> tuple[Path, bool]:
    """(dest as a Path, whether the files are already there). Raises OfflineError when offline."""
    if not isinstance(dest, (str, Path)) or not str(dest).strip():
        raise TypeError(f"dest must be a folder path, got {dest!r}")
    dest = Path(dest)
    if dest.exists() and not dest.is_dir():
        raise NotADirectoryError(f"dest is a file, not a folder: {dest}")
    if not force and all((dest / p).exists() for p in present):
        return dest, True
    if _offline():
        raise OfflineError(f"cannot download {what} offline (HF_HUB_OFFLINE is set). Download it on a machine "
                           f"with internet, or place the files by hand so that {dest} holds:\n{layout}")
    dest.mkdir(parents=True, exist_ok=True)
    return dest, False


def _snapshot(repo_id: str, dest: Path) -> Path:
    from huggingface_hub import snapshot_download

    snapshot_download(repo_id=repo_id, repo_type="dataset", local_dir=str(dest))
    return dest


def _fetch_zip(url: str, dest: Path) -> None:
    """Download `url` into dest and unpack it, then unpack any zip found inside (BIRD nests one)."""
    archive = dest / "download.zip"
    with urllib.request.urlopen(url) as response, archive.open("wb") as out:  # noqa: S310 (https URL constants)
        shutil.copyfileobj(response, out)
    with zipfile.ZipFile(archive) as z:
        z.extractall(dest)
    archive.unlink()
    for inner in sorted(dest.rglob("*.zip")):
        with zipfile.ZipFile(inner) as z:
            z.extractall(inner.parent)
        inner.unlink()


def download_synsql(dest: str | Path, force: bool = False) -> Path:
    """SynSQL-2.5M from the hub into dest (data.json, tables.json, databases/)."""
    dest, done = _prepare(dest, f"SynSQL-2.5M ({SYNSQL_REPO})",
                          "  data.json\n  tables.json\n  databases/<db_id>/<db_id>.sqlite",
                          ["data.json", "databases"], force)
    return dest if done else _snapshot(SYNSQL_REPO, dest)


def download_acesql_release(dest: str | Path, force: bool = False) -> Path:
    """The authors' released SFT/RL/pool files (§7), as the hub repository lays them out."""
    dest, done = _prepare(dest, f"the ACE-SQL release ({ACESQL_REPO})",
                          f"  the files of the hub dataset {ACESQL_REPO}, as published", [".complete"], force)
    if not done:
        _snapshot(ACESQL_REPO, dest)
        (dest / ".complete").write_text(ACESQL_REPO + "\n")
    return dest


def download_bird_dev(dest: str | Path, force: bool = False, url: str = BIRD_DEV_URL) -> Path:
    """BIRD dev (dev.json, dev_tables.json, dev_databases/ with database_description CSVs) into dest."""
    layout = ("  dev.json\n  dev_tables.json\n  dev_databases/<db_id>/<db_id>.sqlite\n"
              "  dev_databases/<db_id>/database_description/<table>.csv")
    dest, done = _prepare(dest, f"BIRD dev ({url})", layout, ["dev.json", "dev_tables.json", "dev_databases"], force)
    if not done:
        _fetch_zip(url, dest)
        _hoist(dest, "dev.json")
    return dest


def download_spider(dest: str | Path, force: bool = False, url: str = SPIDER_URL) -> Path:
    """Spider 1.0 (dev.json, tables.json, database/) into dest, from the official archive."""
    dest, done = _prepare(dest, f"Spider ({url})", "  dev.json\n  tables.json\n  database/<db_id>/<db_id>.sqlite",
                          ["dev.json", "tables.json", "database"], force)
    if not done:
        _fetch_zip(url, dest)
        _hoist(dest, "dev.json")
    return dest


def _hoist(dest: Path, marker: str) -> None:
    """Archives wrap their files in a folder (dev_20240627/, spider_data/); move them up to dest."""
    if (dest / marker).exists():
        return
    found = sorted(dest.rglob(marker), key=lambda p: len(p.parts))
    if not found:
        raise DatasetError(f"{dest}: the downloaded archive holds no {marker}")
    for item in sorted(found[0].parent.iterdir()):
        if not (dest / item.name).exists():
            shutil.move(str(item), str(dest / item.name))


# eval set name -> the download helper that fetches it (named in "not found" errors)
EVAL_DOWNLOADS = {"bird_dev": "download_bird_dev", "spider_dev": "download_spider", "spider_test": "download_spider",
                  "spider_dk": "download_spider_dk", "spider_syn": "download_spider_syn",
                  "spider_realistic": "download_spider_realistic"}
SPIDER_DK_URL = "https://github.com/ygan/Spider-DK/archive/HEAD.zip"
SPIDER_SYN_URL = "https://github.com/ygan/Spider-Syn/archive/HEAD.zip"
SPIDER_REALISTIC_URL = "https://zenodo.org/records/5205322/files/spider-realistic.json?download=1"


def _fetch_file(url: str, path: Path) -> None:
    with urllib.request.urlopen(url) as response, path.open("wb") as out:  # noqa: S310 (https URL constants)
        shutil.copyfileobj(response, out)


def _merge_databases(src_root: Path, dest_root: Path) -> int:
    """Link every <db>/ of src_root (Spider's database/) into dest_root unless dest has it; returns how many."""
    if not src_root.is_dir():
        raise FileNotFoundError(f"{src_root}: Spider's database/ folder not found; download Spider first "
                                "(acesql_lib.data.downloads.download_spider)")
    dest_root.mkdir(parents=True, exist_ok=True)
    n = 0
    for db in sorted(p for p in src_root.iterdir() if p.is_dir()):
        if not (dest_root / db.name).exists():
            (dest_root / db.name).symlink_to(db.resolve(), target_is_directory=True)
            n += 1
    return n


def download_spider_dk(dest: str | Path, spider_dir: str | Path, force: bool = False, url: str = SPIDER_DK_URL) -> Path:
    """Spider-DK (ygan/Spider-DK) into dest; Spider's databases are linked into dest/database (its README)."""
    layout = ("  Spider-DK.json\n  tables.json   (Spider-DK's own; replaces Spider's)\n"
              "  database/<db_id>/<db_id>.sqlite   (Spider's database/ merged with Spider-DK's database/)")
    dest, done = _prepare(dest, f"Spider-DK ({url})", layout, ["Spider-DK.json", "tables.json", "database"], force)
    if not done:
        _fetch_zip(url, dest)
        _hoist(dest, "Spider-DK.json")
        _merge_databases(Path(spider_dir) / "database", dest / "database")
    return dest


def download_spider_syn(dest: str | Path, force: bool = False, url: str = SPIDER_SYN_URL) -> Path:
    """Spider-Syn (ygan/Spider-Syn): Spider-Syn/dev.json into dest/dev.json; it uses Spider's databases."""
    dest, done = _prepare(dest, f"Spider-Syn ({url})",
                          "  dev.json   (Spider-Syn/dev.json: db_id, SpiderQuestion, SpiderSynQuestion, query)",
                          ["dev.json"], force)
    if not done:
        _fetch_zip(url, dest)
        found = sorted(dest.rglob("Spider-Syn/dev.json"), key=lambda p: len(p.parts))
        if not found:
            raise DatasetError(f"{dest}: the downloaded archive holds no Spider-Syn/dev.json")
        shutil.copyfile(found[0], dest / "dev.json")
    return dest


def download_spider_realistic(dest: str | Path, force: bool = False, url: str = SPIDER_REALISTIC_URL) -> Path:
    """Spider-Realistic (Zenodo record 5205322): spider-realistic.json into dest; it uses Spider's databases."""
    dest, done = _prepare(dest, f"Spider-Realistic ({url})", "  spider-realistic.json", ["spider-realistic.json"], force)
    if not done:
        _fetch_file(url, dest / "spider-realistic.json")
    return dest
