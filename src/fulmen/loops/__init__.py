"""The training, evaluation and prediction loops (see fit.py's docstring for the whole loop)."""
