"""Fuzz tests (each module sets ``pytestmark = pytest.mark.fuzz``): the session summary counts their cases."""

from __future__ import annotations

import pytest

from tests.fuzz._contract import CASES


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Report the generated cases per fuzz module and in total."""
    if not CASES:
        return
    per_file = ", ".join(f"{name}: {n}" for name, n in sorted(CASES.items()))
    terminalreporter.write_line(f"fuzz: {sum(CASES.values())} cases ({per_file})")
