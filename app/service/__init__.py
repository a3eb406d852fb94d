"""The HTTP service: ingest over HTTP, watched logdirs, the alerts API."""
