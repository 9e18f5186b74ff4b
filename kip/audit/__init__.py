"""The governance topic for its readers: ``kip audit`` (command.py) over reading.py."""
