"""A serving engine (placeholder docstring; filled in below)."""
