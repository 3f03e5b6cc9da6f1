"""What operators see and hear of the daemons: notices and their delivery by mail, metrics, health and rates,
and the crash hook of the systemd units."""
