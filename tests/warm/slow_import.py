"""A module whose import takes a minute: the warm process is stopped while it imports it
(tests/warm/test_jobs.py). It marks the moment the import began in the file SLOW_IMPORT names."""

import os
import pathlib
import time

pathlib.Path(os.environ["SLOW_IMPORT"]).touch()
time.sleep(60)
