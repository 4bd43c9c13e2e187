"""The settings: `Config`, one typed dataclass per stage whose defaults are the paper's values (`settings`, its
sections in `data`, `model`, `train`, `eval`; their choices and bounds in `choices`, how a section checks its
values in `checks`), the profiles that override them (configs/*.yaml, loaded by `profiles`), the run's folders
and the checkout's root (`paths`) and the run context a notebook starts from (`context`).
"""
