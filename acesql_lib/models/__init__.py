"""The model and its engines: loading the policy (full or LoRA), the generation engines (HF and
vLLM, one interface), an engine kept from one model to the next, and how a model is sharded over ranks.
"""
