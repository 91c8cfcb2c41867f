"""The operator's commands: naming and releasing streams (`naming`), the remedies and their audit
(`remedies`), settling through the engine's status (`repair`), the views (`show`, `follow`, `lag`)
and bounded storage (`compact`, `prune`)."""
