"""Put engine/tests on sys.path so these tests can use the shared pypaimon oracle."""

import sys
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parents[1])
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)
