"""Apiary: a microkernel OS for network-attached FPGAs, built as tiles on a network-on-chip."""
