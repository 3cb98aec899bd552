"""Beat: only schedules. Entries derive from the settings and providers config."""
