"""The dashboard: server-rendered pages over the same services and selectors as the JSON API."""
