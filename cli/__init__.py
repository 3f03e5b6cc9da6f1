"""Command-line entry points: ``dataq`` (the daemons) and ``dataq-cli`` (the operator's console)."""
