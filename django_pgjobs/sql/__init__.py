"""SQL that is not a job state change, one module per table or concern (queries.py has those)."""
