"""The authors' released SFT files (Alpaca: `instruction`, `input`, `output` with a `<think>` block; optional
`system`, `history`) read as the kit's SFT samples (`{"role", "qid", "prompt", "completion"}`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .release_files import ReadReport, read_records


def _alpaca_messages(rec: Any) -> tuple[list[dict[str, str]], str]:
    if not isinstance(rec, dict):
        raise ValueError(f"record is a {type(rec).__name__}, not an object")
    for name in ("instruction", "output"):
        if not isinstance(rec.get(name), str) or not rec[name].strip():
            raise ValueError(f"field {name!r} is missing or empty")
    extra = rec.get("input") or ""
    if not isinstance(extra, str):
        raise ValueError("field 'input' must be a string")
    messages: list[dict[str, str]] = []
    if rec.get("system"):
        if not isinstance(rec["system"], str):
            raise ValueError("field 'system' must be a string")
        messages.append({"role": "system", "content": rec["system"]})
    for turn in rec.get("history") or []:
        if not (isinstance(turn, (list, tuple)) and len(turn) == 2 and all(isinstance(x, str) for x in turn)):
            raise ValueError("field 'history' must be a list of [user, assistant] string pairs")
        messages += [{"role": "user", "content": turn[0]}, {"role": "assistant", "content": turn[1]}]
    # LLaMA-Factory's Alpaca reading: the user turn is the instruction, a newline, then the input
    messages.append({"role": "user", "content": rec["instruction"] + ("\n" + extra if extra else "")})
    return messages, rec["output"]


def read_sft(path: str | Path, role: str) -> tuple[list[dict[str, Any]], ReadReport]:
    """The kit's SFT samples for one role from an Alpaca file (JSON list, or the hub's parquet)."""
    if role not in ("retriever", "generator"):
        raise ValueError(f"role must be retriever or generator, got {role!r}")
    data = read_records(path)
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a list of Alpaca records, got {type(data).__name__}")
    report = ReadReport(str(path), total=len(data))
    samples = []
    for i, rec in enumerate(data):
        try:
            prompt, output = _alpaca_messages(rec)
        except ValueError as e:
            report.skip(str(i), str(e))
            continue
        samples.append({"role": role, "qid": f"authors-{role}-{i}", "prompt": prompt,
                        "completion": [{"role": "assistant", "content": output.strip()}]})
    return samples, report
