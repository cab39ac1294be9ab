"""The kernel: errors, environment parsing, encryption, roles, authentication and metric
primitives. It imports nothing from the apps above it (see the layers contract)."""
