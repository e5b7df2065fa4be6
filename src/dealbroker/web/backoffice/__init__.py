"""The back office: operators' pages under ``/back-office/`` (docs/back-office.md)."""
