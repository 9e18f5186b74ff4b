"""Released versions loaded before their first request: a worker follows the releases
topic (schemas/releases.py) and, for every release that routes to a version of the model
it serves, loads, checks and warms that version up in its loader thread. A canary's
first requests then find it ready instead of waiting for a cold load (or, with a model
store, for a stage). A version that
cannot be loaded is only logged and counted here; its requests get the error.
"""

from __future__ import annotations

import logging

from kip.schemas.errors import KipError
from kip.schemas.releases import Releases
from kip.transport.clients import KafkaConnection
from kip.topics.names import TopicNames
from kip.transport.reading import records_since
from kip.workers.sessions import Sessions

log = logging.getLogger("kip.worker")


async def preload(kafka: KafkaConnection, names: TopicNames, model: str,
                  sessions: Sessions, releases: Releases) -> None:
    """Until cancelled: stage and load each released version of ``model`` as its release
    arrives; ``releases`` holds the latest of each (the model cache keeps what they name)."""
    async for record in records_since(kafka, names.releases, 0, follow=True,
                                      what="releases topic"):
        try:
            releases.apply(record.key, record.value)
        except ValueError as err:
            log.warning("a release record that does not decode: %s", err)
            continue
        for version in versions_of(releases, model):
            try:
                await sessions.prepare(model, version)
            except KipError as err:
                log.warning("released %s@%s not loaded ahead: %s", model, version, err.message)


def versions_of(releases: Releases, model: str) -> list[str]:
    """The versions of ``model`` the latest releases route to."""
    return [route.version.partition("@")[2] for release in releases.latest.values()
            for route in release.routes if route.version.partition("@")[0] == model]


