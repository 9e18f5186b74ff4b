"""Merkle trees as RFC 9162 (Certificate Transparency 2.0, section 2.1) defines them:
one signature covers a batch of results, and each result carries the inclusion path
that ties it to the signed root (schemas/result_signatures.py).

    leaf hash = sha256(0x00 || value)      node hash = sha256(0x01 || left || right)

The tree over n leaves splits at the largest power of two below n (RFC 9162 2.1.1).
Built level by level, that is the same tree as pairing neighbours and carrying an
unpaired last node up unchanged, which is how ``root_and_paths`` builds it. The two
prefixes keep a leaf from ever passing for a node, or a node for a leaf.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

HASH_BYTES = 32


def leaf_hash(value: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + value).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def root_and_paths(leaves: list[bytes]) -> tuple[bytes, list[list[bytes]]]:
    """The root over ``leaves`` (leaf hashes, at least one) and each leaf's inclusion
    path, its nearest sibling first (RFC 9162 2.1.3.1)."""
    paths: list[list[bytes]] = [[] for _ in leaves]
    level, under = list(leaves), [[i] for i in range(len(leaves))]
    while len(level) > 1:
        pairs = range(0, len(level) - 1, 2)
        for i in pairs:
            for leaf in under[i]:
                paths[leaf].append(level[i + 1])
            for leaf in under[i + 1]:
                paths[leaf].append(level[i])
        carried = [len(level) - 1] if len(level) % 2 else []
        under = [under[i] + under[i + 1] for i in pairs] + [under[i] for i in carried]
        level = [node_hash(level[i], level[i + 1]) for i in pairs] + [level[i] for i in carried]
    return level[0], paths


def root_from_path(leaf: bytes, index: int, size: int, path: list[bytes],
                   hash_node: Callable[[bytes, bytes], bytes] = node_hash) -> bytes | None:
    """The root that ``path`` ties leaf ``index`` of a tree of ``size`` leaves to, or
    None where no tree of that size has such a path (RFC 9162 2.1.3.2). ``hash_node``
    is ``node_hash``, or a memo of it: the results of a batch share their paths' upper
    nodes."""
    if not 0 <= index < size:
        return None
    fn, sn, r = index, size - 1, leaf
    for sibling in path:
        if sn == 0:
            return None
        if fn & 1 or fn == sn:
            r = hash_node(sibling, r)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            r = hash_node(r, sibling)
        fn, sn = fn >> 1, sn >> 1
    return r if sn == 0 else None
