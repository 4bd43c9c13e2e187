"""The two roles of the one model (§2, §4): the prompts each role reads, the parsers that read its
answers, the rewards it is scored with, and the column-set pool that holds the retriever's targets.
Text and arithmetic only; imports nothing else of the kit.
"""
