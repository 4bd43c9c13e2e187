"""The top floor: the pipeline runner (`python -m acesql_lib.pipeline`), the preflight (`preflight`, its checks in
`preflight_data`, `preflight_memory`, `preflight_packages`, `preflight_stages`), the environment's pins, the run
card, the multi-seed study and the tiny base models the CPU profiles start from.
"""
