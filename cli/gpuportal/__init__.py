"""The GPU Portal command line: a small client of the portal's REST API (``/api/v1/``)."""

__version__ = "0.1.0"
