"""Dead letters for the operator: ``kip deadletter list|show|replay`` (command.py) over
letters.py (reading, and what a replay would do) and replay.py (the replay itself)."""
