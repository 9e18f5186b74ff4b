"""How kip talks to Kafka: the clients every process builds, the transactions that carry
each stage's outputs, the records they write, reading and partitioning, and applying the
catalogue, ACLs and quotas to a cluster. Where messages travel is topics/'s; what they
are is schemas/'s. Every use of aiokafka's internals sits in ``aiokafka_adapter``, and of
faust's and mode's in ``faust_adapter``."""
