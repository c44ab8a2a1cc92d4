"""Support code that several test tiers import: factories, fixtures, helpers, the settings
modules of subprocesses. No tests here."""
