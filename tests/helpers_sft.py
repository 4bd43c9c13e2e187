"""The SFT tests' tiny data and model (test_sft, and test_tracking's TensorBoard check of SFT's loss):
a handful of chat prompt/completion pairs, the texts a tiny tokenizer is trained on, the settings
and a 2-layer model built from a seed."""
from __future__ import annotations

from acesql_lib.config.train import SFTConfig
from acesql_lib.models.loading import build_tiny_model

TEXTS = [
    "Find the minimal columns needed. Question: how many singers are older than 30?",
    "SELECT count(*) FROM singer WHERE age > 30",
    "SELECT name FROM concert WHERE year = 2014 ORDER BY name",
    "[singer.age, singer.name, concert.year, concert.name]",
    "Tables used: singer. The query filters and counts.",
] * 4

SAMPLES = [
    {"prompt": [{"role": "user", "content": f"Question {i}: how many singers are older than {20 + i}?"}],
     "completion": [{"role": "assistant",
                     "content": f"<think>\nTables used: singer.\n</think>\n\n```sql\nSELECT count(*) FROM singer "
                                f"WHERE age > {20 + i}\n```"}]}
    for i in range(8)
]

CFG = SFTConfig(learning_rate=1e-2, warmup_ratio=0.0, per_device_batch_size=4, gradient_accumulation_steps=1,
                num_epochs=1, max_length=256, bf16=False, gradient_checkpointing=False, logging_steps=1, save_steps=0)


def tiny_model(tokenizer, seed=0):
    return build_tiny_model(tokenizer, hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1,
                            intermediate_size=64, max_position=256, seed=seed)
