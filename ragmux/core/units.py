"""Units used across the layers."""

MIB = 1024 * 1024
