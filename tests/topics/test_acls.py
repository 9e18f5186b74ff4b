"""The ACL plan: what each role is granted, derived from names, models and tenants."""

from __future__ import annotations

import pytest

from kip.schemas.messages import PRIORITIES, Priority
from kip.topics.acls import Acl, Operation, Pattern, Resource, is_kip_principal, plan
from kip.topics.names import TopicNames

NAMES = TopicNames("k")


def _grants(acls: set[Acl], principal: str) -> set[tuple[str, str, str]]:
    return {(a.operation.name, a.resource.name, a.name + ("*" if a.pattern == Pattern.PREFIXED
                                                           else ""))
            for a in acls if a.principal == principal}


def test_a_tenant_writes_only_its_classes_and_reads_only_its_own_replies():
    acls = plan(NAMES, ["digits"], {"acme": [Priority.BATCH], "bob": PRIORITIES})
    assert _grants(acls, "User:tenant-acme") == {
        ("WRITE", "TOPIC", "k.requests.batch"), ("DESCRIBE", "TOPIC", "k.requests.batch"),
        ("READ", "TOPIC", "k.results.acme"), ("DESCRIBE", "TOPIC", "k.results.acme"),
        ("READ", "TOPIC", "k.results.acme.*"), ("DESCRIBE", "TOPIC", "k.results.acme.*"),
        ("READ", "GROUP", "k.tenants.acme.*"), ("DESCRIBE", "GROUP", "k.tenants.acme.*")}


def test_a_worker_reads_only_its_models_work_and_owns_its_transactional_ids():
    grants = _grants(plan(NAMES, ["digits", "minilm"], {}), "User:worker-digits")
    reads = {name for op, kind, name in grants if op == "READ"}
    assert reads == {"k.work.digits.interactive", "k.work.digits.standard",
                     "k.work.digits.batch", "k.workers.digits",
                     "k.workers.digits.interactive", "k.releases", "k.cancels",
                     "k.answered.digits.interactive", "k.answered.digits.standard",
                     "k.answered.digits.batch"}
    assert ("WRITE", "TRANSACTIONAL_ID", "k.workers.digits.*") in grants
    assert not any("minilm" in name for _, _, name in grants)


def test_only_the_pipeline_writes_cancels_and_only_workers_read_them():
    acls = plan(NAMES, ["digits", "minilm"], {"acme": PRIORITIES})
    writers = {a.principal for a in acls if a.name == NAMES.cancels
               and a.operation == Operation.WRITE}
    readers = {a.principal for a in acls if a.name == NAMES.cancels
               and a.operation == Operation.READ}
    assert writers == {"User:pipeline"}
    assert readers == {"User:worker-digits", "User:worker-minilm"}


def test_only_the_operator_writes_control_and_only_the_audit_reader_reads_audit():
    acls = plan(NAMES, ["digits"], {"acme": PRIORITIES})
    control_writers = {a.principal for a in acls if a.name == NAMES.control
                       and a.operation == Operation.WRITE}
    audit_readers = {a.principal for a in acls if a.name == NAMES.audit
                     and a.operation == Operation.READ}
    assert control_writers == {"User:operator"} and audit_readers == {"User:audit-reader"}
    assert not any(a.resource == Resource.CLUSTER for a in acls)


def test_names_with_a_dot_are_refused():
    with pytest.raises(ValueError, match="acme.x"):
        plan(NAMES, ["digits"], {"acme.x": PRIORITIES})


def test_kip_principals_are_recognised_by_name():
    assert is_kip_principal("User:tenant-acme") and is_kip_principal("User:pipeline")
    assert not is_kip_principal("User:admin") and not is_kip_principal("User:someone")


def test_only_the_operator_reads_dead_letters_and_replays_them_to_the_request_topics():
    acls = plan(NAMES, ["digits"], {"acme": PRIORITIES})
    readers = {a.principal for a in acls if a.name in (NAMES.deadletter,
                                                       NAMES.deadletter_replays)
               and a.operation == Operation.READ}
    assert readers == {"User:operator"}
    grants = _grants(acls, "User:operator")
    writes = {name for op, kind, name in grants if op == "WRITE"}
    assert writes == {NAMES.control, NAMES.releases, NAMES.deadletter_replays, "k-operator*",
                      *NAMES.all_requests()}
    assert not any(name.startswith("k.work.") for _, _, name in grants)
