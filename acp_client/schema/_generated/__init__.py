"""Generated ACP models (``v1``, ``v2``); see scripts/generate_schema.py. DO NOT EDIT."""
