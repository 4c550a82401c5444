"""Command-line entry points: the only place that reads argv and installs uvloop."""
