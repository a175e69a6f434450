"""Per-host state: each guard's state machine behind its own lock, and the registry that holds
one set per host."""
