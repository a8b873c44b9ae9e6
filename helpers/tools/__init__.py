"""Small tools the other layers use: ``files`` (atomic writes), ``cost`` (time and memory measurement),
``threads`` (torch's thread count), ``progress`` (a long loop's progress as a few lines in a notebook)
and ``renames`` (config fields renamed, old names still accepted)."""
