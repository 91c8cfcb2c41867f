"""The line and the file: one line in, a `Line` or a typed refusal out (`decode`), and a journal
opened safely and read as complete lines in bounded memory (`reader`). Depends on nothing of the
platform but its errors."""
