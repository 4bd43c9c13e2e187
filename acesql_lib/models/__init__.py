"""The model and its engines: loading the policy (full or LoRA), the generation engines behind one interface
(`completions`; HF in `hf_engine` with its cache, prefill grouping and attention in `hf_cache`, `hf_prefix`,
`gqa_attention`; vLLM in `vllm_engine`; `engines.make_engine` picks one), an engine kept from one model to the
next, and how a model is sharded over ranks.
"""
