"""Tools for developing and measuring kip on one machine: a local Kafka broker, a whole
kip as child processes, the demo, load and fault harnesses, and the benchmarks. Their
commands join the ``kip`` CLI through the ``kip.commands`` entry points."""
