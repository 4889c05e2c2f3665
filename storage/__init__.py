"""temper's persistence: database tables, tuning records and the content-addressed blob store."""
