from pathlib import Path

import jsonschema
import numpy as np
import orjson

from kip.schemas import encode
from kip.schemas.jsonschema import schema_documents
from tests.pipeline.conftest import signer

DOCS = Path(__file__).resolve().parents[2] / "docs" / "schemas"


def test_published_schemas_match_the_models():
    for name, text in schema_documents().items():
        published = DOCS / name
        assert published.exists() and published.read_text() == text, \
            f"{published} is stale: run `kip schemas export`"


def test_a_real_request_validates_against_its_published_schema():
    schema = orjson.loads((DOCS / "inference-request.v1.json").read_text())
    request = signer().request("digits", {"pixels": np.zeros((1, 64), np.float32)})
    jsonschema.validate(orjson.loads(encode(request)), schema)
