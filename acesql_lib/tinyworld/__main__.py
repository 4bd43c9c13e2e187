"""`python -m acesql_lib.tinyworld --out DIR`: build the tiny world (see world.py)."""
from .world import main

raise SystemExit(main())
