"""Least privilege as code: the Kafka ACLs of every kip role, derived from the topic names,
the models served and the tenants of the access file (``kip acls plan|apply``).

Principals (``User:<name>``: a SCRAM user, or the CN of an mTLS client certificate):

| role | principal | may |
|---|---|---|
| a tenant's producer | ``tenant-<tenant>`` | write the request topics of its classes; read its own reply topics (``<results>.<tenant>`` and ``<results>.<tenant>.*``), in groups of its own (``<prefix>.tenants.<tenant>.*``) if it reads through one |
| the pipeline | ``pipeline`` | read requests, control, telemetry; read releases and write health rollbacks; write work, results, audit, dead letters, cancels; read and write quota levels; its groups, internal topics and transactional ids (``<prefix>-pipeline*``) |
| a model's workers | ``worker-<model>`` | read that model's work topics in its groups, releases and cancels; read and write its answered-ids topics; write results, audit, dead letters, telemetry; its transactional ids (``<prefix>.workers.<model>.*``) |
| the operator | ``operator`` | read and write control and releases; read dead letters; replay them (write the request topics and the replay record, its transactional id ``<prefix>-operator*``) |
| an audit reader | ``audit-reader`` | read audit and releases; describe kip's groups and the topics they read (the audit chains' heads) |
| the scaling signal | ``scaling`` | read telemetry; describe the work topics and the workers' groups (their lag) |

Creating topics and ACLs is the cluster administrator's (a super user), not a kip role's.
Names with a ``.`` are refused in a plan: a prefixed grant such as ``<results>.acme.``
would otherwise also cover tenant ``acme.x``'s topics.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum

from kip.schemas.messages import PRIORITIES, Priority
from kip.topics.names import TopicNames


class Resource(IntEnum):   # Kafka's resource types
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5


class Pattern(IntEnum):    # Kafka's pattern types
    LITERAL = 3
    PREFIXED = 4


class Operation(IntEnum):  # Kafka's ACL operations
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DESCRIBE = 8


ALLOW = 3                  # Kafka's permission type ALLOW
ANY_HOST = "*"


@dataclass(frozen=True, order=True)
class Acl:
    principal: str
    resource: Resource
    name: str
    pattern: Pattern
    operation: Operation

    def line(self) -> str:
        return (f"{self.principal:24} {self.operation.name:8} {self.resource.name.lower()} "
                f"{self.name}{'*' if self.pattern == Pattern.PREFIXED else ''}")


def tenant_principal(tenant: str) -> str:
    return f"User:tenant-{tenant}"


def worker_principal(model: str) -> str:
    return f"User:worker-{model}"


PIPELINE, OPERATOR, AUDIT_READER = "User:pipeline", "User:operator", "User:audit-reader"
SCALING = "User:scaling"
KIP_ROLES = (PIPELINE, OPERATOR, AUDIT_READER, SCALING)


def is_kip_principal(principal: str) -> bool:
    """Whether ``principal`` names one of kip's roles (whose grants a plan decides)."""
    return (principal in KIP_ROLES
            or principal.startswith(("User:tenant-", "User:worker-")))


def plan(names: TopicNames, models: Iterable[str],
         tenants: Mapping[str, Iterable[Priority]]) -> set[Acl]:
    """Every ACL kip's roles need, and no other. ``tenants``: each tenant's classes."""
    _refuse_dotted([*models, *tenants])
    acls = _pipeline(names) | _operator(names) | _audit_reader(names) | _scaling(names)
    for model in models:
        acls |= _worker(names, model)
    for tenant, classes in tenants.items():
        acls |= _tenant(names, tenant, classes)
    return acls


def _refuse_dotted(names: list[str]) -> None:
    dotted = sorted(n for n in names if "." in n)
    if dotted:
        raise ValueError(f"names with a '.' cannot get prefixed ACLs safely: {dotted}; "
                         "rename them (a prefix grant would reach other names)")


def _grant(principal: str, resource: Resource, name: str, ops: Iterable[Operation],
           pattern: Pattern = Pattern.LITERAL) -> set[Acl]:
    return {Acl(principal, resource, name, pattern, op) for op in ops}


R, W, D = Operation.READ, Operation.WRITE, Operation.DESCRIBE
TOPIC, GROUP, TXN = Resource.TOPIC, Resource.GROUP, Resource.TRANSACTIONAL_ID
PREFIXED = Pattern.PREFIXED


def _pipeline(names: TopicNames) -> set[Acl]:
    p, own = PIPELINE, names.pipeline_group()
    acls = set()
    for topic in names.all_requests() + [names.control, names.telemetry]:
        acls |= _grant(p, TOPIC, topic, (R, D))
    acls |= _grant(p, TOPIC, names.releases, (R, W, D))   # health rollbacks
    for topic in (names.audit, names.deadletter, names.cancels):
        acls |= _grant(p, TOPIC, topic, (W, D))
    for topic in [names.quota_levels] + [names.admitted(c) for c in PRIORITIES]:
        acls |= _grant(p, TOPIC, topic, (R, W, D))
    acls |= _grant(p, TOPIC, f"{names.prefix}.work.", (W, D), PREFIXED)
    acls |= _grant(p, TOPIC, names.results, (W, D), PREFIXED)   # and every reply topic
    acls |= _grant(p, GROUP, own, (R, D), PREFIXED)
    acls |= _grant(p, TXN, own, (W, D), PREFIXED)
    acls |= _grant(p, TOPIC, own, (Operation.ALL,), PREFIXED)   # faust's internal topics
    return acls


def _worker(names: TopicNames, model: str) -> set[Acl]:
    w = worker_principal(model)
    acls = set()
    for priority in PRIORITIES:
        acls |= _grant(w, TOPIC, names.work(model, priority), (R, D))
        acls |= _grant(w, TOPIC, names.answered(model, priority), (R, W, D))
    for lane in ("", "interactive"):
        acls |= _grant(w, GROUP, names.worker_group(model, lane), (R, D))
    for topic in (names.audit, names.deadletter, names.telemetry):
        acls |= _grant(w, TOPIC, topic, (W, D))
    acls |= _grant(w, TOPIC, names.releases, (R, D))   # to load released versions ahead
    acls |= _grant(w, TOPIC, names.cancels, (R, D))   # to skip what was cancelled
    acls |= _grant(w, TOPIC, names.results, (W, D), PREFIXED)
    acls |= _grant(w, TXN, names.worker_group(model) + ".", (W, D), PREFIXED)
    return acls


def _tenant(names: TopicNames, tenant: str, classes: Iterable[Priority]) -> set[Acl]:
    t = tenant_principal(tenant)
    acls = set()
    for priority in classes:
        acls |= _grant(t, TOPIC, names.requests(priority), (W, D))
    reply = names.reply_topic(tenant)
    acls |= _grant(t, TOPIC, reply, (R, D))
    acls |= _grant(t, TOPIC, reply + ".", (R, D), PREFIXED)
    acls |= _grant(t, GROUP, names.tenant_groups(tenant), (R, D), PREFIXED)
    return acls


def _operator(names: TopicNames) -> set[Acl]:
    acls = _grant(OPERATOR, TOPIC, names.control, (R, W, D))
    acls |= _grant(OPERATOR, TOPIC, names.releases, (R, W, D))
    acls |= _grant(OPERATOR, TOPIC, names.deadletter, (R, D))
    acls |= _grant(OPERATOR, TOPIC, names.deadletter_replays, (R, W, D))
    for topic in names.all_requests():   # replays go back where they came from
        acls |= _grant(OPERATOR, TOPIC, topic, (W, D))
    acls |= _grant(OPERATOR, TXN, f"{names.prefix}-operator", (W, D), PREFIXED)
    return acls


def _audit_reader(names: TopicNames) -> set[Acl]:
    """The audit topic; and, for ``kip audit verify``, the chain heads the stages commit
    with their offsets: describe kip's groups and the topics they read."""
    acls = _grant(AUDIT_READER, TOPIC, names.audit, (R, D))
    acls |= _grant(AUDIT_READER, TOPIC, names.releases, (R, D))
    for group in (f"{names.prefix}-", f"{names.prefix}."):
        acls |= _grant(AUDIT_READER, GROUP, group, (D,), PREFIXED)
    for topic in (f"{names.prefix}.requests.", f"{names.prefix}.work."):
        acls |= _grant(AUDIT_READER, TOPIC, topic, (D,), PREFIXED)
    return acls


def _scaling(names: TopicNames) -> set[Acl]:
    """Worker telemetry (capacity), and the work topics' end offsets against the workers'
    committed ones (lag): describe, never read, what requests carry."""
    acls = _grant(SCALING, TOPIC, names.telemetry, (R, D))
    acls |= _grant(SCALING, GROUP, f"{names.prefix}.workers.", (D,), PREFIXED)
    acls |= _grant(SCALING, TOPIC, f"{names.prefix}.work.", (D,), PREFIXED)
    return acls
