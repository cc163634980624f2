"""Reading one compiled program: memory figures, the HLO module, buffer assignment, liveness."""
