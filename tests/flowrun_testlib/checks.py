"""Soft checks: a test states many facts about one run and each is a sentence (its label).

A failed check does not stop the test; tests/conftest.py fails the test at its end with every
failed label and its detail, so one run shows all that is wrong with it at once."""


class Checks:
    """The checks of one test: check(ok, label, detail) records each and returns ok."""

    def __init__(self):
        self.passed, self.failed = 0, []

    def __call__(self, ok, label, detail=""):
        if ok:
            self.passed += 1
        else:
            self.failed.append((label, str(detail)))
        return bool(ok)

    def report(self):
        """Every failed check, label first, detail below it."""
        return "\n\n".join(f"FAIL {label}\n{detail}".rstrip() for label, detail in self.failed)
