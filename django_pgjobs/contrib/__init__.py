"""Optional integrations (pytest)."""
