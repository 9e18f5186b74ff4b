"""JSON Schema documents of every wire message, generated from the pydantic models.

``kip schemas export`` writes them to docs/schemas/; a test keeps those files in step
with the models, so the published contract cannot drift from the code.
"""

from __future__ import annotations

import json
from pathlib import Path

from kip.schemas.codec import MESSAGE_TYPES


def schema_documents() -> dict[str, str]:
    """File name -> pretty JSON Schema, one per message type."""
    out = {}
    for cls, type_name in MESSAGE_TYPES.items():
        schema = cls.model_json_schema(mode="serialization")
        schema["$id"] = f"https://kip.dev/schemas/{type_name}.v1.json"
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        out[f"{type_name}.v1.json"] = json.dumps(schema, indent=2, sort_keys=True) + "\n"
    return out


def export(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in schema_documents().items():
        path = folder / name
        path.write_text(text)
        written.append(path)
    return written
