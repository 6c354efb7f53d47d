"""Hostile: loops forever in its first batch."""

from hostile import hostile


def spin():
    n = 0
    while True:
        n += 1


WitWorld = hostile("py-spin", "loops forever in on-batch", spin)
