"""Where messages travel: topic names, the declarative catalogue, and applying it."""

from topics.catalogue import TopicSpec, catalogue
from topics.names import PRIORITIES, TopicNames

__all__ = ["PRIORITIES", "TopicNames", "TopicSpec", "catalogue"]
