"""What the library tells the outside: structlog events, redaction, JSON lines."""
