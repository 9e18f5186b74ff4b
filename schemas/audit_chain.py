"""Tamper evidence for the governance topic: audit records linked into hash chains.

Each writer of audit records (a stage's transactional producer for one input partition,
``transport.transactions``) keeps one chain. Every audit record it writes carries the header

    kip-chain: <chain id> <seq> <prev>

with the chain's id, the record's sequence number in the chain (0, 1, 2, ...) and the
link hash of the chain's previous record (64 zeros before the first). A record's link
hash is

    sha256("kip-audit-link-v1\\n" + chain id + "\\n" + seq + "\\n" + prev + "\\n" + value)

over the record's value bytes as they are on the wire, so it covers the record and,
through ``prev``, every record before it in the chain. The chain's last record in each
transaction also carries a seal by the stage's signing key (the key that signs results):

    kip-chain-seal: ed25519:<key id>:<hex signature of the seal message>

    seal message = "kip-audit-seal-v2\n" + chain id + "\n" + seq + "\n" + link hash

A reader holding the public keys authenticates a record when it is sealed, or when its
link hash is the ``prev`` of an authenticated record of the same chain. Without the key,
no one who can write the topic can add a record that authenticates, change one that
does, or remove one without leaving a gap in the sequence numbers; and records of one
chain must appear in sequence order within each partition, so two swapped ones show too.
(Seals of scheme ``kip-audit-seal-v1``, over the link hash alone, still verify.)

The chain continues across restarts and partition moves: its head (chain id, next
sequence number, last link hash, and the seal of that last record) is the metadata of
the input partition's committed offset, written in the transaction that carries the
records (``ChainHead.metadata``); whoever owns the partition next reads it back with the
offset. A writer that finds no head (or metadata that is not one) starts a new chain,
whose id ends in a fresh random tag, so it never reuses an old chain's sequence numbers.

Offset metadata can be committed by anyone the cluster lets into the group, so a
reader uses a head only when its seal verifies: the seal names the chain and sequence
number it was made for, so a head says how far its chain went even where the records
at its end are gone (``kip audit verify`` calls those dropped), and no one without the
key can make one that claims more.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

CHAIN_HEADER = "kip-chain"
SEAL_HEADER = "kip-chain-seal"
GENESIS = "0" * 64
LINK_SCHEME = b"kip-audit-link-v1\n"
SEAL_SCHEME = b"kip-audit-seal-v2\n"
SEAL_SCHEME_V1 = b"kip-audit-seal-v1\n"
_METADATA = "kip-chain-v2 "
_METADATA_V1 = "kip-chain-v1 "
HEAD_PREFIX = "kip-chain-"   # metadata starting so claims to be a head


def link_hash(chain_id: str, seq: int, prev: str, value: bytes) -> str:
    return hashlib.sha256(LINK_SCHEME + f"{chain_id}\n{seq}\n{prev}\n".encode()
                          + value).hexdigest()


def seal_message(chain_id: str, seq: int, link: str) -> bytes:
    """What a seal signs: the chain, sequence number and link hash of the record it is on."""
    return SEAL_SCHEME + f"{chain_id}\n{seq}\n{link}".encode()


def seal_message_v1(link: str) -> bytes:
    """What a seal of the first scheme signed: the link hash alone."""
    return SEAL_SCHEME_V1 + link.encode()


class MalformedHead(ValueError):
    """Offset metadata that claims to be a chain head and is not a well-formed one."""


@dataclass(frozen=True)
class ChainHead:
    """Where a chain stands: the next record's sequence number, the last one's link hash,
    and that record's seal (None before the first, or in a head of the first scheme)."""

    chain_id: str
    seq: int = 0
    last: str = GENESIS
    seal: str | None = None

    @classmethod
    def start(cls, writer: str) -> ChainHead:
        return cls(f"{writer}~{secrets.token_hex(4)}")

    @classmethod
    def from_metadata(cls, metadata: str | None, writer: str) -> ChainHead:
        """The head committed with an offset, or a new chain where there is none or the
        metadata is not one."""
        try:
            return cls.parse(metadata) or cls.start(writer)
        except MalformedHead:
            return cls.start(writer)

    @classmethod
    def parse(cls, metadata: str | None) -> ChainHead | None:
        """The head in offset metadata; None where the metadata claims none; raises
        ``MalformedHead`` where it claims one that does not parse."""
        if not metadata or not metadata.startswith(HEAD_PREFIX):
            return None
        scheme, _, rest = metadata.partition(" ")
        parts = rest.split(" ")
        count = {_METADATA.strip(): 4, _METADATA_V1.strip(): 3}.get(scheme)
        if count is None or len(parts) != count or not _well_formed(*parts[:3]):
            raise MalformedHead(f"not a chain head: {metadata[:120]!r}")
        chain_id, seq, last = parts[:3]
        return cls(chain_id, int(seq), last, parts[3] if count == 4 else None)

    def metadata(self) -> str:
        if self.seal is None:   # nothing sealed yet: nothing to claim
            return f"{_METADATA_V1}{self.chain_id} {self.seq} {self.last}"
        return f"{_METADATA}{self.chain_id} {self.seq} {self.last} {self.seal}"

    def sealed_message(self) -> bytes | None:
        """What this head's seal must sign: the last record's chain, seq and link."""
        return None if self.seq < 1 else seal_message(self.chain_id, self.seq - 1, self.last)

    def link(self, value: bytes) -> tuple[tuple[str, bytes], ChainHead]:
        """The chain header of the next record, with ``value``, and the head after it."""
        header = (CHAIN_HEADER, f"{self.chain_id} {self.seq} {self.last}".encode())
        return header, ChainHead(self.chain_id, self.seq + 1,
                                 link_hash(self.chain_id, self.seq, self.last, value))


def _well_formed(chain_id: str, seq: str, last: str) -> bool:
    return (0 < len(chain_id) <= 512 and seq.isdigit() and len(seq) <= 18 and len(last) == 64
            and all(c in "0123456789abcdef" for c in last))


@dataclass(frozen=True)
class Link:
    """One record's place in its chain, as read back from its headers."""

    chain_id: str
    seq: int
    prev: str
    hash: str
    seal: str | None

    @classmethod
    def read(cls, value: bytes, headers) -> Link | None:
        """The link a record claims, or None when it has no well-formed chain header."""
        pairs = _strings(headers)
        found = dict(pairs)
        if len(found) != len(pairs):   # a header given twice: which one would count?
            return None
        try:
            chain_id, seq, prev = found[CHAIN_HEADER].split(" ")
            number = int(seq)
        except (KeyError, ValueError):
            return None
        if number < 0 or len(prev) != 64:
            return None
        return cls(chain_id, number, prev, link_hash(chain_id, number, prev, value),
                   found.get(SEAL_HEADER))


def _strings(headers) -> list[tuple[str, str]]:
    return [(k, v.decode("ascii", "replace")) for k, v in headers or ()
            if k in (CHAIN_HEADER, SEAL_HEADER)]
