"""The long-running worker: its loop (`loop`), the books due for a pass (`schedule`), the survey of
the roots (`survey`), change notification (`watcher`), operators' changes heard by LISTEN
(`control`), which worker works which book (`membership`), metrics and the background compaction
(`housekeeping`). A one-shot `sweep` imports none of it."""
