"""The runtime layer, below the loops: run state (progress, phase, stop requests), the hook dispatcher, the
result collection and metrics hub, data sources and RNG capture. Loops import it; it never imports the loops
or the trainer."""
