"""`python -m acesql_lib.executor`: score a BIRD prediction file (see bird.py)."""
from .bird import main

main()
