"""Malformed messages for kip's two input stages, from a seed: what the fuzz suite
(tests/e2e/test_fuzz.py) throws at a running kip.

Each ``Fuzzed`` message says where it goes (a request topic, read by the pipeline, or a
work topic, read by a worker) and, once sent, which request id its one terminal result
must carry: the id its sender's envelope vouches for, where the suite sends it as tenant
acme's client would, else ``undecodable.<topic>.<partition>.<offset>``
(docs/protocol.md).
"""

from __future__ import annotations

import base64
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import orjson


INTERACTIVE_LIMIT = 1024 * 1024   # the interactive class's payload limit (admission)


@dataclass
class Fuzzed:
    case: str
    stage: str            # "pipeline" (a request topic) or "worker" (a work topic)
    value: bytes | None
    key: bytes | None = b"acme"
    headers: list = field(default_factory=list)
    oversized: bool = False
    rid: str = ""         # the id it was made for (``messages``)

    @property
    def sealable(self) -> bool:
        """Whether the fuzz suite sends it as tenant acme's client would, with acme's
        envelope (schemas/envelopes.py): a request-topic message keyed ``acme`` that
        names no request id other than its own in a header."""
        ids = [v for k, v in self.headers if k == "kip-request-id"]
        return (self.stage == "pipeline" and self.key == b"acme"
                and all(v == self.rid.encode() for v in ids))

    def sent_headers(self) -> list:
        """Its headers as sent: with its ``kip-request-id`` where it is sealed."""
        named = any(k == "kip-request-id" for k, _ in self.headers)
        own = [("kip-request-id", self.rid.encode())] if self.sealable and not named else []
        return own + self.headers

    def expected_id(self, topic: str, partition: int, offset: int, sealed: bool) -> str:
        """The request id of this message's terminal result, once sent there: the id its
        envelope vouches for where it was ``sealed``; else the one of its coordinates,
        as nothing vouches for an id it merely names (docs/protocol.md)."""
        return self.rid if sealed else f"undecodable.{topic}.{partition}.{offset}"


def _request(rid: str) -> dict:
    """A request-shaped document: unsigned (its signature is zeros), never valid."""
    return {"schema_version": 1, "request_id": rid, "tenant": "acme", "key_id": "acme-k1",
            "signature": "0" * 64, "issued_at_ms": 1_800_000_000_000,
            "priority": "interactive", "model": "digits",
            "inputs": [{"name": "pixels", "datatype": "FP32", "shape": [1, 64],
                        "raw": base64.b64encode(bytes(256)).decode()}]}


def _mutate(doc: dict, path: tuple, value) -> dict:
    target = doc
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return doc


def _json(doc) -> bytes:
    return orjson.dumps(doc)


def _random_bytes(rng: random.Random, rid: str) -> Fuzzed:
    return Fuzzed("random bytes", "pipeline", rng.randbytes(rng.randint(0, 2000)))


def _truncated(rng: random.Random, rid: str) -> Fuzzed:
    whole = _json(_request(rid))
    return Fuzzed("truncated JSON", "pipeline", whole[:rng.randint(1, len(whole) - 1)])


def _deeply_nested(rng: random.Random, rid: str) -> Fuzzed:
    depth = rng.choice([100, 10_000, 200_000])
    inner = b"[" * depth + b"]" * depth
    return Fuzzed("deeply nested JSON", "pipeline",
                  _json(_request(rid))[:-1] + b',"extra":' + inner + b"}")


def _huge_numbers(rng: random.Random, rid: str) -> Fuzzed:
    field_, literal = rng.choice([("issued_at_ms", b"1" + b"0" * 400),
                                  ("deadline_ms", b"1e400"), ("issued_at_ms", b"-1"),
                                  ("deadline_ms", b"18446744073709551616"),
                                  ("issued_at_ms", b"1.5")])
    doc = _json(_mutate(_request(rid), (field_,), "__N__"))
    return Fuzzed("huge numbers", "pipeline", doc.replace(b'"__N__"', literal))


def _not_a_number(rng: random.Random, rid: str) -> Fuzzed:
    token = rng.choice([b"NaN", b"Infinity", b"-Infinity", b"1e999"])
    doc = _request(rid)
    doc["inputs"][0] = {"name": "pixels", "datatype": "FP32", "shape": [1, 64],
                        "data": ["__X__"] * 64}
    return Fuzzed("NaN and infinities", "pipeline", _json(doc).replace(b'"__X__"', token))


_WRONG = [None, True, 7, -1.5, "text", [], {}, [1, "a", None], {"a": {"b": []}}]


def _wrong_types(rng: random.Random, rid: str) -> Fuzzed:
    doc = _request(rid)
    path = rng.choice([("tenant",), ("key_id",), ("signature",), ("issued_at_ms",),
                       ("priority",), ("model",), ("deadline_ms",), ("reply_to",),
                       ("inputs",), ("inputs", 0), ("inputs", 0, "shape"),
                       ("inputs", 0, "datatype"), ("inputs", 0, "raw"),
                       ("schema_version",), ("traceparent",)])
    return Fuzzed("wrong types", "pipeline", _json(_mutate(doc, path, rng.choice(_WRONG))))


_ODD = ["\u202eevil", "zero\u200bwidth", "nul\u0000byte", "😀" * 40, "ｆｕｌｌ", "é" * 300,
        "\ufeffbom", "tab\tand\nnewline", "a" * 5000]


def _odd_unicode(rng: random.Random, rid: str) -> Fuzzed:
    doc = _request(rid)
    field_ = rng.choice(["tenant", "key_id", "model", "reply_to", "traceparent"])
    value = _json(_mutate(doc, (field_,), rng.choice(_ODD)))
    if rng.random() < 0.3:   # a lone surrogate: valid JSON escape, not valid UTF-16
        value = value.replace(b'"acme"', b'"\\ud800acme"', 1)
    return Fuzzed("odd unicode", "pipeline", value)


def _huge_shape(rng: random.Random, rid: str) -> Fuzzed:
    shape = rng.choice([[2**31 - 1] * 8, [2**31 - 1, 2**31 - 1], [2**40, 2**40],
                        [0, 64], [1, 64, 1, 1, 1, 1, 1, 1, 1], [-1, 64], [2**63 - 1] * 3])
    doc = _request(rid)
    doc["inputs"][0]["shape"] = "__S__"
    value = _json(doc).replace(b'"__S__"', str(shape).replace(" ", "").encode())
    if rng.random() < 0.2:
        value = value.replace(b"9223372036854775807", b"1" + b"0" * 30)
    return Fuzzed("huge or odd shapes", "pipeline", value)


def _huge_header(rng: random.Random, rid: str) -> Fuzzed:
    name = rng.choice(["kip-request-id", "kip-model", "traceparent", "x-junk"])
    return Fuzzed("1 MB header", "pipeline", _json(_request(rid)),
                  headers=[(name, b"h" * (1024 * 1024))])


def _odd_key(rng: random.Random, rid: str) -> Fuzzed:
    return Fuzzed("null or odd key", "pipeline", _json(_request(rid)),
                  key=rng.choice([None, b"", b"\xff\xfe", b"other-tenant", b"k" * 10_000]))


def _null_value(rng: random.Random, rid: str) -> Fuzzed:
    return Fuzzed("null value", rng.choice(["pipeline", "worker"]), None)


def _oversized(rng: random.Random, rid: str) -> Fuzzed:
    return Fuzzed("oversized", "pipeline", b"x" * (INTERACTIVE_LIMIT + rng.randint(1, 4096)),
                  headers=[("kip-request-id", rid.encode())], oversized=True)


def _work_item(rng: random.Random, rid: str) -> Fuzzed:
    """A work item that is wrong in one way (never stamped: the worker must refuse it)."""
    doc = {"schema_version": 1, "request": _request(rid), "routed_at_ms": 1,
           "deadline_ms": 2**62, "reply_to": "kip.results",
           "route": {"alias": "digits", "model_name": "digits", "model_version": "0",
                     "artifact_sha256": "0" * 64},
           "stamp": {"key_id": "s1", "mac": "0" * 64}}
    path = rng.choice([("route",), ("route", "model_name"), ("request", "inputs"),
                       ("stamp",), ("stamp", "mac"), ("deadline_ms",), ("reply_to",),
                       ("request", "inputs", 0, "shape"), ("routed_at_ms",)])
    mutated = _mutate(doc, path, rng.choice(_WRONG + ["kip.control", [2**40, 2**40], []]))
    return Fuzzed("work item", "worker", _json(mutated), key=rid.encode())


def _work_bytes(rng: random.Random, rid: str) -> Fuzzed:
    value = rng.choice([rng.randbytes(rng.randint(0, 500)),
                        _json({"request": {"request_id": rid}}), b"[" * 50_000])
    return Fuzzed("work item bytes", "worker", value, key=rng.choice([None, rid.encode()]))


# (weight, case): the heavy cases (a megabyte each) are rare.
CASES: list[tuple[int, Callable[[random.Random, str], Fuzzed]]] = [
    (10, _random_bytes), (10, _truncated), (3, _deeply_nested), (8, _huge_numbers),
    (8, _not_a_number), (15, _wrong_types), (10, _odd_unicode), (8, _huge_shape),
    (1, _huge_header), (5, _odd_key), (2, _null_value), (1, _oversized),
    (12, _work_item), (7, _work_bytes)]


def messages(seed: int, count: int, prefix: str = "fuzz") -> Iterator[Fuzzed]:
    """``count`` malformed messages, the same for the same seed; JSON ones carry the ids
    ``<prefix>-<n>``."""
    rng = random.Random(seed)
    weights = [w for w, _ in CASES]
    for n in range(count):
        _, case = rng.choices(CASES, weights)[0]
        fuzzed = case(rng, f"{prefix}-{n}")
        fuzzed.rid = f"{prefix}-{n}"
        yield fuzzed
