"""Checks of integer parameters that components share."""

from typing import TypeGuard


__all__ = ["is_int", "power_of_two"]


def is_int(value: object) -> TypeGuard[int]:
    """Whether ``value`` is an integer and not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def power_of_two(value: object) -> TypeGuard[int]:
    """Whether ``value`` is an integer (not a bool) that is a power of two."""
    return is_int(value) and value >= 1 and value & (value - 1) == 0
