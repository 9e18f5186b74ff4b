"""Where messages travel: topic names, the declarative catalogue, applying it, the Kafka
clients every process uses, and the transactions that carry each stage's outputs."""

from kip.topics.catalogue import TopicSpec, catalogue
from kip.topics.names import TopicNames

__all__ = ["TopicNames", "TopicSpec", "catalogue"]
