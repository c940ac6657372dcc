"""`python -m inferbook ...` is the same as the `inferbook` command."""

from .cli import main

raise SystemExit(main())
