"""Hostile: allocates and touches memory without end in its first batch."""

from hostile import hostile

hoard = []


def bomb():
    while True:
        hoard.append(bytearray(b"\x5a" * (1 << 20)))


WitWorld = hostile("py-membomb", "allocates without bound in on-batch", bomb)
