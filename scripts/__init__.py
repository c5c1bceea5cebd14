"""Scripts a user runs from the checkout's root (``.venv/bin/python scripts/NAME.py``); the tests import them."""
