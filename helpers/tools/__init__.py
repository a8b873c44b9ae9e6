"""Small tools the other layers use: ``files`` (atomic writes) and ``cost`` (time and memory measurement)."""
