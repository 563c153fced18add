"""What several test files share: layer and attention checks, documentation example
runners, servers on loopback ports, hang guards, hostile files, the tiny runs."""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
"""The repository's root folder."""
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
"""The committed files tests read: tiny runs, shared cases of the rules."""
