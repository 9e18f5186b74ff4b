"""``kip audit verify``: checks the hash chains of the audit topic (schemas/audit_chain.py).

``ChainCheck`` takes the topic's records in the order each partition holds them and, at
the end, says what does not hold, record by record:

- a record without a chain header (written by something that is not a kip stage);
- a seal that does not verify with a trusted public key;
- a record no seal covers (its link hash is not the ``prev`` of an authenticated
  record): altered, or inserted by someone without the key;
- a gap in a chain's sequence numbers: a record dropped;
- a sequence number read twice, or out of order within a partition: a record copied,
  or two swapped.

- a chain that ends before the head its writer committed (``heads``: read from the
  stages' committed offsets and used only where their seal verifies,
  schemas/audit_chain.py): its last records dropped.

A chain's records before the time range are not read, so its first record in range is
taken as it is (its own ``prev`` is not checked). When the range stops short of the
topic's end (``complete=False``), a chain's last records may wait for a seal outside
it; those are counted as unsealed rather than reported, and heads are not checked.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from kip.schemas.audit_chain import ChainHead, Link, seal_message, seal_message_v1
from kip.schemas.result_signatures import ResultVerifier


@dataclass(frozen=True, order=True)
class Position:
    partition: int
    offset: int

    def __str__(self) -> str:
        return f"[{self.partition}]@{self.offset}" if self.partition >= 0 else " (none)"


@dataclass(frozen=True, order=True)
class Problem:
    where: Position
    what: str

    def __str__(self) -> str:
        return f"record {self.where}: {self.what}"


@dataclass
class Summary:
    records: int = 0
    chains: int = 0
    sealed: int = 0
    heads: int = 0
    unsealed_in_range: int = 0
    problems: list[Problem] = field(default_factory=list)
    heads_set_aside: list[str] = field(default_factory=list)   # committed, not used

    @property
    def ok(self) -> bool:
        return not self.problems


class ChainCheck:
    def __init__(self, verifier: ResultVerifier, complete: bool = True,
                 heads: dict[str, ChainHead] | None = None) -> None:
        self.verifier = verifier
        self.complete = complete
        self.heads = heads or {}
        self.summary = Summary()
        self._chains: dict[str, list[tuple[Link, Position]]] = defaultdict(list)
        self._latest: dict[tuple[str, int], tuple[int, Position]] = {}

    def add(self, partition: int, offset: int, value: bytes | None, headers) -> None:
        """One record, in its partition's order."""
        where = Position(partition, offset)
        self.summary.records += 1
        link = Link.read(value or b"", headers)
        if link is None:
            self._problem(where, "no chain header: not written by a kip stage")
            return
        latest = self._latest.get((link.chain_id, partition))
        if latest is not None and link.seq <= latest[0]:
            self._problem(where, f"chain {link.chain_id}: seq {link.seq} follows seq "
                          f"{latest[0]} (record {latest[1]}) in this partition: records "
                          "reordered or copied")
        else:
            self._latest[(link.chain_id, partition)] = (link.seq, where)
        self._chains[link.chain_id].append((link, where))

    def finish(self) -> Summary:
        """Every chain checked; problems in the order of their records."""
        self.summary.chains = len(self._chains)
        for chain_id, links in self._chains.items():
            self._check(chain_id, sorted(links, key=lambda lw: (lw[0].seq, lw[1])))
        if self.complete:
            self.summary.heads = len(self.heads)
            for head in self.heads.values():
                self._reaches(head, self._chains.get(head.chain_id, []))
        self.summary.problems.sort()
        return self.summary

    def _check(self, chain_id: str, links: list[tuple[Link, Position]]) -> None:
        authentic = self._authentic(links)
        covered = {link.seq for link, _ in authentic}
        last_covered = max(covered, default=-1)
        for run in _runs([lw for lw in links if lw not in authentic]):
            (first, at), (last, where) = run[0], run[-1]
            if last.seq > last_covered and not self.complete:
                self.summary.unsealed_in_range += len(run)
            elif last.seq + 1 in covered:
                lost = (f"; seq {first.seq}-{last.seq - 1} before it lose their cover"
                        if first.seq < last.seq else "")
                self._problem(where, f"chain {chain_id} seq {last.seq} does not link into "
                              f"seq {last.seq + 1}: altered, or inserted without the key"
                              + lost)
            else:
                self._problem(at, f"chain {chain_id} seq {_span(first.seq, last.seq)}: no "
                              "seal covers it (inserted without the key, or the record "
                              "sealing it was dropped)")
        self._gaps(chain_id, links)

    def _authentic(self, links: list[tuple[Link, Position]]) -> set[tuple[Link, Position]]:
        """The records a valid seal covers: sealed ones, and back along ``prev``."""
        authentic: set[tuple[Link, Position]] = set()
        wanted: set[str] = set()
        for link, where in reversed(links):
            sealed = link.seal is not None and self._sealed(link, where)
            if sealed or link.hash in wanted:
                authentic.add((link, where))
                wanted.add(link.prev)
        return authentic

    def _sealed(self, link: Link, where: Position) -> bool:
        if (self.verifier.verified(link.seal, seal_message(link.chain_id, link.seq, link.hash))
                or self.verifier.verified(link.seal, seal_message_v1(link.hash))):
            self.summary.sealed += 1
            return True
        self._problem(where, f"chain {link.chain_id} seq {link.seq}: its seal does not "
                      "verify with a trusted key (altered, or sealed by another key)")
        return False

    def _reaches(self, head: ChainHead, links: list[tuple[Link, Position]]) -> None:
        """Whether the chain goes as far as its committed head says."""
        last_seq = head.seq - 1
        if last_seq < 0 or not links:   # nothing written, or nothing in the range read
            return
        link, where = max(links, key=lambda lw: lw[0].seq)
        if link.seq < last_seq:
            self._problem(where, f"chain {head.chain_id} ends at seq {link.seq}, but its "
                          f"writer committed up to seq {last_seq}: "
                          f"seq {_span(link.seq + 1, last_seq)} dropped from its end")
        elif link.seq == last_seq and link.hash != head.last:
            self._problem(where, f"chain {head.chain_id} seq {last_seq} is not the record "
                          "its writer committed: altered")

    def _gaps(self, chain_id: str, links: list[tuple[Link, Position]]) -> None:
        for (before, at), (link, where) in zip(links, links[1:]):
            if link.seq == before.seq:
                self._problem(where, f"chain {chain_id} seq {link.seq} is claimed by record "
                              f"{at} too: copied, or inserted")
            elif link.seq != before.seq + 1:
                self._problem(where, f"chain {chain_id} seq "
                              f"{_span(before.seq + 1, link.seq - 1)} missing before this "
                              f"record (after record {at}): dropped")

    def _problem(self, where: Position, what: str) -> None:
        self.summary.problems.append(Problem(where, what))


def _runs(links: list[tuple[Link, Position]]) -> list[list[tuple[Link, Position]]]:
    """``links`` (in sequence order) cut where the sequence numbers jump."""
    runs: list[list[tuple[Link, Position]]] = []
    for lw in links:
        if runs and lw[0].seq - runs[-1][-1][0].seq <= 1:
            runs[-1].append(lw)
        else:
            runs.append([lw])
    return runs


def _span(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}-{last}"
