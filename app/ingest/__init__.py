"""Reading scalars from event files, logdirs and JSON/CSV logs into one point shape."""
