"""The batch tree is RFC 9162's: the same roots and paths as the RFC's recursive
definition, and a path proves one leaf's place and nothing else."""

from __future__ import annotations

import pytest

from kip.schemas.merkle import leaf_hash, node_hash, root_and_paths, root_from_path

LEAVES = [leaf_hash(b"result %d" % i) for i in range(33)]


def _rfc_root(leaves: list[bytes]) -> bytes:
    """MTH, RFC 9162 2.1.1: split at the largest power of two below n."""
    if len(leaves) == 1:
        return leaves[0]
    k = 1 << (len(leaves) - 1).bit_length() - 1
    return node_hash(_rfc_root(leaves[:k]), _rfc_root(leaves[k:]))


def _rfc_path(m: int, leaves: list[bytes]) -> list[bytes]:
    """PATH(m, D[n]), RFC 9162 2.1.3.1."""
    if len(leaves) == 1:
        return []
    k = 1 << (len(leaves) - 1).bit_length() - 1
    if m < k:
        return _rfc_path(m, leaves[:k]) + [_rfc_root(leaves[k:])]
    return _rfc_path(m - k, leaves[k:]) + [_rfc_root(leaves[:k])]


@pytest.mark.parametrize("size", range(1, 34))
def test_every_leaf_of_every_size_has_the_rfc_path_to_the_rfc_root(size):
    leaves = LEAVES[:size]
    root, paths = root_and_paths(leaves)
    assert root == _rfc_root(leaves)
    for index, leaf in enumerate(leaves):
        assert paths[index] == _rfc_path(index, leaves)
        assert root_from_path(leaf, index, size, paths[index]) == root


def test_a_path_proves_its_own_leaf_at_its_own_place_in_its_own_size_only():
    leaves = LEAVES[:11]
    root, paths = root_and_paths(leaves)
    assert root_from_path(leaf_hash(b"forged"), 4, 11, paths[4]) != root
    assert root_from_path(leaves[4], 5, 11, paths[4]) != root
    assert root_from_path(leaves[4], 4, 11, paths[4][:-1]) != root
    assert all(root_from_path(leaves[4], 4, size, paths[4]) != root for size in (5, 8, 17))
    # ...but a path fits trees of some other sizes (here 9 to 16) to the same root: so a
    # batch's signature signs its size as well (schemas/result_signatures.py)
    assert root_from_path(leaves[4], 4, 12, paths[4]) == root
    assert root_from_path(leaves[4], 4, 11, paths[4] + [leaves[0]]) is None   # too long
    assert root_from_path(leaves[4], 11, 11, paths[4]) is None                # not a place


def test_a_node_never_passes_for_a_leaf():
    root, _ = root_and_paths(LEAVES[:2])
    node_as_value = b"\x01" + LEAVES[0] + LEAVES[1]
    assert leaf_hash(node_as_value[1:]) != root and leaf_hash(node_as_value) != root
