"""Reading TensorBoard event files back, for the tests of experiment tracking (test_tracking: the
tracker adapter and SFT's TRL integration; test_grpo: GRPO's `grpo.report_to`)."""
from __future__ import annotations


def read_events(folder) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in the TensorBoard event files under `folder`: tag -> [(step, value), ...]."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out: dict[str, list[tuple[int, float]]] = {}
    files = sorted(folder.rglob("events.out.tfevents.*"))
    assert files, f"no event file under {folder}"
    for f in files:
        acc = EventAccumulator(str(f))
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            out.setdefault(tag, []).extend((e.step, e.value) for e in acc.Scalars(tag))
    return out
