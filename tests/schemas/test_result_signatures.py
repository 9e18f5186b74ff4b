"""A batch signature covers exactly the results it was made for, under a trusted key."""

from __future__ import annotations

from kip.schemas import merkle
from kip.schemas.merkle import node_hash
from kip.schemas.result_signatures import (MAX_BATCH, ResultKeys, ResultSigningKey,
                                           SIGNATURE_HEADER)

KEY = ResultSigningKey.generate("r1")
VALUES = [b'{"request_id":"r-%d"}' % i for i in range(6)]


def _verifier(key: ResultSigningKey = KEY):
    return ResultKeys(keys={key.key_id: key.public()}).verifier()


def _headers():
    return KEY.signer().headers(VALUES)


def _with(header: tuple[str, bytes], field: int, text: str) -> list[tuple[str, bytes]]:
    parts = header[1].decode().split(":")
    parts[field] = text
    return [(SIGNATURE_HEADER, ":".join(parts).encode())]


def test_each_result_of_a_batch_verifies_and_no_other_value_does():
    verifier = _verifier()
    headers = _headers()
    assert all(verifier.valid(v, [h]) for v, h in zip(VALUES, headers))
    assert not verifier.valid(b'{"request_id":"r-9"}', [headers[0]])
    assert not verifier.valid(VALUES[0], [headers[0], headers[1]])   # two signatures


def test_a_changed_place_size_path_or_key_fails_even_after_the_batch_verified():
    verifier = _verifier()
    headers = _headers()
    assert verifier.valid(VALUES[2], [headers[2]])   # the batch is now remembered
    assert not verifier.valid(VALUES[2], _with(headers[2], 3, "3"))
    assert not verifier.valid(VALUES[2], _with(headers[2], 4, "7"))
    assert not verifier.valid(VALUES[2], _with(headers[2], 4, str(MAX_BATCH + 1)))
    assert not verifier.valid(VALUES[2], _with(headers[2], 5, "00" * 32))
    assert not verifier.valid(VALUES[2], _with(headers[2], 5, "zz"))
    assert not verifier.valid(VALUES[2], _with(headers[2], 3, "-2"))
    assert not verifier.valid(VALUES[2], _with(headers[2], 1, "r2"))
    assert not _verifier(ResultSigningKey.generate("r1")).valid(VALUES[2], [headers[2]])


def test_a_signature_over_one_batch_signs_no_other():
    verifier = _verifier()
    other = KEY.signer().headers([b"x", b"y", b"z", b"w", b"v", b"u"])
    signature = other[2][1].decode().split(":")[2]
    assert not verifier.valid(VALUES[2], _with(_headers()[2], 2, signature))


def test_a_single_result_signature_never_passes_as_a_batch_one_or_back():
    verifier = _verifier()
    single = KEY.signer().header(VALUES[0])[1].decode().split(":")[2]
    assert not verifier.valid(VALUES[0], _with(_headers()[0], 2, single))
    batch = _headers()[0][1].decode().split(":")[2]
    assert not verifier.valid(VALUES[0], [(SIGNATURE_HEADER, f"ed25519:r1:{batch}".encode())])


def test_the_results_of_a_batch_share_their_paths_node_hashes(monkeypatch):
    """Six results: the tree's five nodes are hashed once each, not once per path
    (3 + 3 + 3 + 3 + 2 + 2 = 16 times), and every path still reaches the signed root."""
    hashed = []

    def counted(left: bytes, right: bytes) -> bytes:
        hashed.append((left, right))
        return node_hash(left, right)

    headers = _headers()
    monkeypatch.setattr(merkle, "node_hash", counted)
    verifier = _verifier()
    assert all(verifier.valid(v, [h]) for v, h in zip(VALUES, headers))
    assert len(hashed) == len(set(hashed)) == 5
