"""Small tools the other layers use: ``files`` (atomic writes), ``cost`` (time and memory measurement),
``threads`` (torch's thread count) and ``renames`` (config fields renamed, old names still accepted)."""
