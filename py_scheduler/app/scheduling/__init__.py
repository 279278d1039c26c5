"""The scheduling loop: pop, one cycle through the core, binding cycles, decision records."""
