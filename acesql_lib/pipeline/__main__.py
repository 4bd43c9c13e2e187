"""`python -m acesql_lib.pipeline --profile NAME`: run the profile's notebooks in order (see runner.py)."""
from .runner import main

raise SystemExit(main())
