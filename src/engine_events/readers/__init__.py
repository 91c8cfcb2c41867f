"""The engine side's readers of a journal and of a stopped run: the line decoder (`decode`), the
bounded reader of complete lines (`lines`), `verify` (with its rules and its output), `watch`, and
`status` (the repair channel)."""
