import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MPLBACKEND", "Agg")

FIXTURES = Path(__file__).parent / "fixtures"
REAL = FIXTURES / "real"


def pytest_terminal_summary(terminalreporter):
    """An explicit vLLM opt-out (tests/vllm_env.py) is said out loud, not hidden in `-q`'s count."""
    reason = os.environ.get("ACESQL_SKIP_VLLM", "").strip()
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if "ACESQL_SKIP_VLLM" in str(r.longrepr)]
    if reason not in ("", "0") and skipped:
        terminalreporter.write_line(f"ACESQL_SKIP_VLLM={reason!r}: {len(skipped)} vLLM test(s) skipped on "
                                    "request; the vLLM engine (weight sync, GRPO rollouts, the rehearsal smoke run) was not checked")
