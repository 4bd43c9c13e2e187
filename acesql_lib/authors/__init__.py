"""The authors' released files (their initial pool, RL rows and SFT files) read as the kit's inputs.
"""
