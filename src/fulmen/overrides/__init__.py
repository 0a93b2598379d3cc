"""Pieces that adapt torch's own classes: samplers that never repeat a sample across processes, and DDP's
gradient-reduction set-up for backward passes run outside its forward."""
