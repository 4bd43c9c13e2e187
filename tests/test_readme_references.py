"""The front page cannot rot: every make target, repository path and config key README.md names exists."""
from __future__ import annotations

import dataclasses
import re

from acesql_lib.config.settings import Config
from repo_paths import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
# The generated results block quotes the reports, not the tree: its names are checked by the reports' tests.
TEXT = re.sub(r"<!-- results:(\S+) -->.*?<!-- /results:\1 -->", "", README, flags=re.DOTALL)
# The layout block names folders at the start of its lines and their contents relative to them.
LAYOUT = re.search(r"## Layout\n+```\n(.*?)```", TEXT, flags=re.DOTALL).group(1)
TEXT = TEXT.replace(LAYOUT, "")
OUTPUTS = ("metrics/", "figures/", "tables/", "executed/")  # under reports/<profile>/, written by a run
SECTIONS = {f.name for f in dataclasses.fields(Config)}


def make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"^([A-Za-z][\w-]*):", text, flags=re.MULTILINE))


def named_targets(text: str) -> set[str]:
    return set(re.findall(r"`make ([a-z][\w-]*)", text)) | set(re.findall(r"^make ([a-z][\w-]*)", text, re.M))


def named_paths(text: str) -> set[str]:
    """Backticked or linked names that look like files or folders of the tree (templates like <p> left out)."""
    found = set(re.findall(r"\]\(([^)#\s]+)", text))
    blocks = re.findall(r"^```\w*\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE)
    for code in re.findall(r"`([^`\n]+)`", re.sub(r"^```.*?^```", "", text, flags=re.DOTALL | re.M)) + blocks:
        for word in code.split():
            if any(c in word for c in "()'\"\\"):  # Python calls in a shell line name no file of the tree
                continue
            if "/" in word or re.search(r"\.(py|yaml|md|txt|yml|json|sh|ipynb)$", word):
                found.add(word)
    keep = set()
    for name in found:
        name = name.strip("'\",;()").removeprefix("./")
        if not name or "<" in name or "*" in name or name.startswith(("http", "-", "runs/", "reports/", "data/synsql",
                                                                       "data/bird", "data/spider", "data/acesql") + OUTPUTS):
            continue
        if name.startswith((".venv", "acesql_lib.", "Qwen/")) or "=" in name or ":" in name:
            continue
        keep.add(name)
    return keep


def named_keys(text: str) -> set[str]:
    """Dotted settings `section.field` whose section is one of Config's."""
    keys = set()
    fenced = re.findall(r"```[a-z]*\n(.*?)```", text, re.DOTALL)  # the commands in code blocks too
    for code in re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.DOTALL)) + fenced:
        for m in re.finditer(r"(?<![\w/.])([a-z_]+)\.([a-z_]+)(?:=|\b)", code):
            if m.group(1) in SECTIONS:
                keys.add(f"{m.group(1)}.{m.group(2)}")
    return keys


def test_every_make_target_the_readme_names_exists():
    targets = named_targets(TEXT)
    assert {"test", "reproduce", "lab"} <= targets
    assert targets - make_targets() == set()


def test_every_path_the_readme_names_exists():
    paths = named_paths(TEXT)
    assert "configs/accelerate/fsdp.yaml" in paths and "docs/status.md" in paths
    missing = sorted(p for p in paths if not (ROOT / p).exists()
                     and ("/" in p.rstrip("/") or not any(ROOT.rglob(p))))
    assert missing == []


def test_every_folder_of_the_layout_exists():
    folders = re.findall(r"^(\S+/)\s", LAYOUT, flags=re.MULTILINE)
    assert "acesql_lib/" in folders and "docs/" in folders
    assert [f for f in folders if not (ROOT / f).is_dir()] == []


def test_every_setting_the_readme_names_is_a_config_key():
    keys = named_keys(TEXT)
    assert "model.lora" in keys and "grpo.max_steps" in keys  # the extraction finds what the README names
    cfg = Config()
    bad = sorted(k for k in keys if not hasattr(getattr(cfg, k.split(".")[0]), k.split(".")[1]))
    assert bad == []


def test_the_checks_catch_a_rotten_name():
    rotten = "`make frobnicate`, `configs/nothing.yaml`, `grpo.no_such_key=3`"
    assert named_targets(rotten) - make_targets() == {"frobnicate"}
    assert not (ROOT / "configs/nothing.yaml").exists() and "configs/nothing.yaml" in named_paths(rotten)
    assert "grpo.no_such_key" in named_keys(rotten)
