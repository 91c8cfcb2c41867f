"""The decisions, pure: what each line does to its stream's cursor (`rules`), the run state
machine (`runs`), the views of attempts and books (`views`), the states (`states`), exit codes
(`exit_codes`) and each run's part of the ledger (`spent`). No I/O, and no import of a database
driver: the rule cases run on these alone, in memory."""
