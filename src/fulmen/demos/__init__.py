"""Bundled demos: ``BoringModel`` for tests and the digits classifier (``python -m fulmen.demos.digits``)."""
