"""The question sets, one module per chapter (`ch01.py`, `ch02.py`, ...); see `registry`."""
