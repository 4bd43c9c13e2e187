"""The settings: one typed dataclass per stage whose defaults are the paper's values (`settings`),
the profiles that override them (configs/*.yaml), the run's folders (`paths`) and the run context a
notebook starts from (`context`).
"""
