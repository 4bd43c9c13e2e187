"""`python -m acesql_lib.data.tinyworld --out DIR`: build the tiny world (see world.py)."""
from .world import main

raise SystemExit(main())
