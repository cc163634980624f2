"""Pure classification: fates, donation advice, what calls showed, what is live at the peak,
growth, recompiles, residuals, out-of-memory text, the fit search. No JAX here."""
