"""The scaling signal: how far behind each model's workers are, and how many it wants."""
