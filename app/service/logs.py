"""Structured logs: one JSON object per line on stderr, for the service and uvicorn alike."""

from __future__ import annotations


def log_config(level: str = "INFO") -> dict:
    """A logging.config.dictConfig for `uvicorn.run(log_config=...)`."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "json": {
                "()": "pythonjsonlogger.json.JsonFormatter",
                "fmt": "%(asctime)s %(levelname)s %(name)s %(message)s",
                "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger"},
            }
        },
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"}},
        "loggers": {
            "losswatch": {"handlers": ["stderr"], "level": level, "propagate": False},
            "uvicorn": {"handlers": ["stderr"], "level": level, "propagate": False},
        },
    }
