"""The authors' released files read as the kit's inputs: their initial pool (`initial_pool`), RL rows (`rl_rows`)
and SFT files (`sft_files`), on the files' layout and column indices (`release_files`); `release` reads them for
a profile whose stage 1 is the authors'.
"""
