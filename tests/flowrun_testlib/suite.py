"""The base of the end-to-end test classes that drive the real binary.

A class `TestX(E2E)` in a test module gets, before each of its test_* methods (pytest runs
each on a fresh instance): self.config (pytest's), self.test_name (pytest's name of the test,
with its case's id in brackets when it is parametrized), self.flowrun, self.root, self.sanitized,
self.slack (timing bounds are multiplied by it: 3 for a sanitizer build), self.scratch (a
directory of the test's own, removed after it) and self.check (the soft check, see checks.py).
Anything a test registers in self.open (Nodes, ...) is closed after it, passed or failed, so
nothing outlives it."""
import os

import pytest


class E2E:
    @pytest.fixture(autouse=True)
    def _suite(self, request, flowrun, repo_root, sanitized, scratch, check):
        self.config, self.test_name = request.config, request.node.name
        self.flowrun, self.root, self.sanitized = flowrun, repo_root, sanitized
        self.slack = 3.0 if sanitized else 1.0
        self.scratch = str(scratch)
        self.check = check
        self.open = []
        self.set_up()
        try:
            yield
        finally:
            self.close_all()

    def set_up(self):
        """What each test of the class needs beyond the above (a subclass's own)."""

    def close_all(self):
        for n in self.open:
            n.close()
        self.open = []

    def borrow(self, cls):
        """An instance of helper class `cls` (an E2E) that shares this test's binary, scratch
        directory and checks: one test that uses another suite's plumbing."""
        other = cls.__new__(cls)
        for name in ("config", "test_name", "flowrun", "root", "sanitized", "slack", "scratch", "check", "open"):
            setattr(other, name, getattr(self, name))
        other.set_up()
        return other

    @classmethod
    def names_of_tests(cls):
        """The names of the class's own tests, in their order, without test_; for a parametrized
        one, the ids of its cases."""
        names = []
        for name, test in cls.__dict__.items():
            if name.startswith("test_"):
                cases = [mark for mark in getattr(test, "pytestmark", []) if mark.name == "parametrize"]
                names += [case.id for case in cases[0].args[1]] if cases else [name[len("test_"):]]
        return names


def path_of(*parts):
    """A path under tests/."""
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), *parts)
