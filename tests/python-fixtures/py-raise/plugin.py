"""Hostile: raises an exception nobody catches in its first batch."""

from hostile import hostile


def fail():
    raise ZeroDivisionError("a batch the plugin cannot take")


WitWorld = hostile("py-raise", "raises in on-batch", fail)
