"""The three training stages along the data flow: distillation (§3.1), SFT (§3.3), and joint GRPO
(§4) with its parts: rollouts, the pool's start, PCGrad, the schedule, micro-batches, packed rows,
checkpoints, the memory estimate, metric tracking and the accelerate launch.
"""
