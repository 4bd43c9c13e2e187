"""The two roles of the one model (§2, §4): the prompts each role reads (`prompts`), how its answers are read
(`answers`; evaluation's own readings in `parsers`), the rewards it is scored with (`rewards`), and the column-set
pool that holds the retriever's targets (`pool`). Text and arithmetic only; imports nothing else of the kit.
"""
