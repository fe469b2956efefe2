"""Put engine/tests on sys.path so these tests can use the shared pypaimon oracle, and run every
manifest test with both manifest decoders."""

import sys
from pathlib import Path

import pytest

from strata.manifest import avro_arrow, codec

_TESTS = str(Path(__file__).resolve().parents[1])
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)


@pytest.fixture(autouse=True, params=["polars", "fastavro"])
def manifest_decoder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """polars (falling back to fastavro where it cannot read a file, as in production), then
    fastavro alone."""
    if request.param == "polars" and not avro_arrow.available():
        pytest.fail("polars is not installed: install the engine's polars extra")
    monkeypatch.setattr(codec, "DEFAULT_DECODER", "auto" if request.param == "polars" else "fastavro")
    return str(request.param)
