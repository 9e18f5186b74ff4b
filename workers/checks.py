"""What a worker checks of every work item before it runs it, however it got onto the
work topic: the pipeline's stamp, that it is for the model this worker serves, that its
result goes inside the results namespace, and its inputs against the manifest of the
version that would run them. A work item that fails ends as one failed result and a dead
letter (workers/endings.py); it never reaches ONNX Runtime.
"""

from __future__ import annotations

from kip.models.manifest import Manifest
from kip.schemas.errors import InvalidRequest, ModelNotFound
from kip.schemas.messages import WorkItem
from kip.topics.names import TopicNames


def check_addressed(item: WorkItem, model: str, names: TopicNames) -> None:
    """Raise ``InvalidRequest`` unless ``item`` is for ``model`` and its result goes to a
    reply topic."""
    if item.route.model_name != model:
        raise InvalidRequest(f"a work item for model {item.route.model_name[:128]} reached "
                             f"the worker of {model}")
    if item.reply_to is not None and not names.is_reply_topic(item.reply_to):
        raise InvalidRequest(f"reply_to {item.reply_to} is outside {names.results}")


def check_inputs(item: WorkItem, manifest: Manifest, loaded_sha256: str) -> int:
    """The row count of ``item``'s request, if the version loaded, with ``manifest``, can
    run it: the digest of the bytes loaded is the one it was routed to, and its inputs
    pass the manifest's check, the same one the pipeline ran before routing
    (``Manifest.check_inputs``). Else raise ``InvalidRequest`` (or ``ModelNotFound``)."""
    if item.route.artifact_sha256 != loaded_sha256:
        raise ModelNotFound(f"{manifest.name}@{manifest.version} has artifact "
                            f"{loaded_sha256[:12]}, the work item was routed to "
                            f"{item.route.artifact_sha256[:12]}")
    return manifest.check_inputs(item.request.inputs)
