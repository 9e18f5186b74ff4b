"""kip's one door into pydantic's internals: messages built without validation, and
JSON written straight through a model's serializer.

Everything here relies on what pydantic keeps to itself, and nothing else in kip does
(``python -m kip.devkit.layers`` checks it): an instance's field dict and the dunder
attributes it sets beside it (``__pydantic_fields_set__``, ``__pydantic_extra__``,
``__pydantic_private__``), ``__pydantic_post_init__``, and a model class's
``__pydantic_serializer__``. tests/schemas/test_pydantic_adapter.py pins each against
the installed release.

**Built messages.** A worker's result and final audit record are made of fields that
came from a work item it decoded and checked, from its own clocks and counters, and
from model outputs its session checked. pydantic's constructor validates every field
once more, and ``model_construct`` costs as much, being a Python loop over the fields.
``built`` fills the instance's field dict directly, in the order the fields are
declared (pydantic writes JSON in that order), without that second pass.

Nothing is checked but the field names, so a caller passes only values it read off
validated messages or computed itself. tests/schemas/test_pydantic_adapter.py checks
that every message built so equals, and encodes byte for byte as, the one validated
from the same fields.

**JSON.** ``to_json`` calls the model's serializer itself: ``model_dump_json`` returns
a str, which every message a stage writes would then encode back to bytes.
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)

_templates: dict[type[BaseModel], tuple[dict, frozenset[str]]] = {}
_set = object.__setattr__


def built(cls: type[M], fields: dict) -> M:
    """A ``cls`` of ``fields`` (and the defaults of the others), not validated. A field
    with a default factory (a list) counts as required: one shared default list would
    be every message's."""
    template, required = _templates.get(cls) or _template(cls)
    values = template.copy()
    values.update(fields)   # keeps the declared order: every key is in the template
    if len(values) != len(template) or not fields.keys() >= required:
        raise TypeError(f"{cls.__name__} has no fields {sorted(set(fields) - set(template))}"
                        f", or lacks required {sorted(required - set(fields))}")
    message = cls.__new__(cls)
    _set(message, "__dict__", values)
    _set(message, "__pydantic_fields_set__", set(fields))
    _set(message, "__pydantic_extra__", None)
    _set(message, "__pydantic_private__", None)
    return message


def _template(cls: type[BaseModel]) -> tuple[dict, frozenset[str]]:
    """The defaults of ``cls``'s fields, in declared order (None for a required one),
    and the names of the required ones."""
    if cls.__pydantic_post_init__ or cls.model_config.get("extra") == "allow":
        raise TypeError(f"{cls.__name__} needs pydantic's own construction")
    required = frozenset(name for name, field in cls.model_fields.items()
                         if field.is_required() or field.default_factory is not None)
    template = {name: None if name in required else field.default
                for name, field in cls.model_fields.items()}
    _templates[cls] = template, required
    return template, required


def to_json(message: BaseModel, exclude_none: bool = True) -> bytes:
    """``message`` as compact JSON bytes, as ``model_dump_json`` writes it."""
    return message.__pydantic_serializer__.to_json(message, exclude_none=exclude_none)
