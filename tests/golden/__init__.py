"""Golden numbers recorded before a refactor, and their recorder (``record.py``, module docstring there)."""
