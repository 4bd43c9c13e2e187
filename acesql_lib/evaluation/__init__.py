"""Evaluation (§5): evaluating checkpoints on the benchmark sets, the records each prediction
leaves, the statistics that compare systems, the ablation variants, and the released baselines measured
under their own protocols.
"""
