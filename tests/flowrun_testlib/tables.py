"""Tables that tests measure as they run (the faults table of docs/reliability.md); the
session prints each at its end (tests/conftest.py): {title: Markdown text}."""
TABLES = {}
