"""How many examples a property test runs, under the hypothesis profile of the run.

A test that needs more (or fewer) examples than hypothesis's default says so relative to it:
`@settings(max_examples=examples(300))`; the profile then scales every test alike. Profiles
(registered in tests/conftest.py, chosen with `pytest --hypothesis-profile NAME`):

* `default` (make check, CI): each test's own count;
* `fast` (make fast): a tenth, at least 5: a smoke of every property in seconds;
* `thorough`: ten times, for a campaign before a release.
"""

from __future__ import annotations

from hypothesis import settings

DEFAULT_EXAMPLES = 100  # hypothesis's own default, which the profiles scale
PROFILES = {"fast": 10, "thorough": 1000}  # max_examples of each profile besides the default


def examples(n: int) -> int:
    """`n` examples scaled by the profile in use (its max_examples against hypothesis's 100)."""
    current = settings.default
    scaled = n * (current.max_examples if current is not None else DEFAULT_EXAMPLES) // DEFAULT_EXAMPLES
    return max(5, scaled) if scaled < n else scaled


def register_profiles() -> None:
    for name, count in PROFILES.items():
        settings.register_profile(name, max_examples=count)
