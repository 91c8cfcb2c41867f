"""The long-running worker: its loop (`loop`), the books due for a pass (`schedule`), the books
under the roots (`registration`), which of them are its own (`ownership`, by `membership`), the
survey of them and its gauges (`survey`, `survey_gauges`), change notification (`watcher`),
operators' changes heard by LISTEN (`control`), metrics and the background compaction
(`housekeeping`). A one-shot `sweep` imports none of it."""
