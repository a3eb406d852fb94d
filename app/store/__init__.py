"""The persistent store: runs, every point, read offsets, alerts with their history and
webhook deliveries, in SQLite (default) or PostgreSQL."""
