"""Evaluation (§5): evaluating checkpoints on the benchmark sets (`evaluate`), the metrics of one evaluation
(`metrics`), the records each prediction leaves, the statistics that compare systems, the ablation variants,
and the released baselines measured under their own protocols.
"""
