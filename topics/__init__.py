"""Where messages travel: topic names, the declarative catalogue, applying it, the Kafka
clients every process uses, and the transactions that carry each stage's outputs."""

from topics.catalogue import TopicSpec, catalogue
from topics.names import TopicNames

__all__ = ["TopicNames", "TopicSpec", "catalogue"]
