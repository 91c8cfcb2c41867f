"""A book's journal into Postgres: the books and their registration (`books`), one pass over a
book (`book_pass`), one batch's transaction with its cursors (`apply`), the projections' part of
that transaction (`projection_step`) and a projection caught up from the journals (`rebuild`)."""
